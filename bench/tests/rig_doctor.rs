//! erdma-doctor's NCCL environment checks and erdma-stat's counters against the
//! rig's real devices (rxe0..rxe3 Soft-RoCE on veth0, veth1, veth4, veth5,
//! siw0..siw3 Soft-iWARP on veth2, veth3, veth6, veth7). rig/test.sh runs them in the VM with --include-ignored; the
//! shell steps (memlock, hidden device nodes, port down, --during) are in
//! rig/guest/tests.d/doctor.sh.

use std::process::Command;

const DOCTOR: &str = env!("CARGO_BIN_EXE_erdma-doctor");
const STAT: &str = env!("CARGO_BIN_EXE_erdma-stat");

/// Runs erdma-doctor (GPU checks skipped) with `env` set and every other
/// NCCL_* variable removed; returns (exit status, stdout).
fn doctor(env: &[(&str, &str)], extra: &[&str]) -> (i32, String) {
    let mut c = Command::new(DOCTOR);
    c.args(["--skip", "gpu"]).args(extra);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    let out = c.output().expect("run erdma-doctor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The line of check `id`, and the fix under it.
fn line<'a>(out: &'a str, id: &str) -> (&'a str, Option<&'a str>) {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.split_whitespace().nth(1) == Some(id) {
            let fix = lines
                .next()
                .and_then(|n| n.trim_start().strip_prefix("fix: "));
            return (l, fix);
        }
    }
    panic!("no line for {id} in:\n{out}");
}

const RXE: &[(&str, &str)] = &[("NCCL_IB_HCA", "rxe0,rxe1")];

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn ib_hca_naming_a_missing_device_fails() {
    let (code, out) = doctor(&[("NCCL_IB_HCA", "mlx5_0")], &[]);
    assert_eq!(code, 2, "{out}");
    let (l, fix) = line(&out, "nccl.ib-hca");
    assert!(l.starts_with("fail"), "{l}");
    assert!(
        l.contains(
            "mlx5_0: no such device (devices: rxe0, rxe1, rxe2, rxe3, siw0, siw1, siw2, siw3)"
        ),
        "{l}"
    );
    assert_eq!(fix, Some("-x NCCL_IB_HCA=rxe0,rxe1,rxe2,rxe3"));
    // A port the device lacks next to a good entry (one bad entry fails), and an
    // exclusion; the unit tests cover the rest of the syntax.
    let (code, out) = doctor(&[("NCCL_IB_HCA", "rxe1,rxe0:2")], &[]);
    assert_eq!(code, 2);
    assert!(line(&out, "nccl.ib-hca").0.contains("rxe0:2: no such port"));
    let (code, out) = doctor(&[("NCCL_IB_HCA", "^siw")], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line(&out, "nccl.ib-hca")
            .0
            .ends_with("NCCL_IB_HCA=^siw selects rxe0:1, rxe1:1, rxe2:1, rxe3:1")
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn socket_ifname_naming_a_missing_interface_fails() {
    let env = [RXE[0], ("NCCL_SOCKET_IFNAME", "eth9")];
    let (code, out) = doctor(&env, &[]);
    assert_eq!(code, 2, "{out}");
    let (l, fix) = line(&out, "nccl.socket-ifname");
    assert!(l.starts_with("fail"), "{l}");
    assert!(l.contains("eth9: no such interface"), "{l}");
    assert!(
        l.contains("veth0 10.99.0.1"),
        "lists the interfaces there are: {l}"
    );
    assert_eq!(
        fix,
        Some("-x NCCL_SOCKET_IFNAME=veth0 (the RDMA port's interface)")
    );
    let (code, out) = doctor(&[RXE[0], ("NCCL_SOCKET_IFNAME", "=veth0")], &[]);
    assert_eq!(code, 0, "{out}");
    // Everything but lo excluded: loopback only.
    let (code, out) = doctor(&[RXE[0], ("NCCL_SOCKET_IFNAME", "^veth")], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "nccl.socket-ifname").0.contains("loopback only"));
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn wrong_gid_index_warns() {
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    let (code, out) = doctor(&[RXE[0], ("NCCL_IB_GID_INDEX", &gid)], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(line(&out, "rdma.gid-index").0.contains("::ffff:10.99.0.1"));
    // Entry 0 is the link-local GID: not what NCCL would pick.
    let (code, out) = doctor(&[RXE[0], ("NCCL_IB_GID_INDEX", "0")], &[]);
    assert_eq!(code, 1, "{out}");
    let (l, fix) = line(&out, "rdma.gid-index");
    assert!(l.starts_with("warn"), "{l}");
    assert!(l.contains("rxe0:1: index 0 is fe80::"), "{l}");
    assert!(
        l.contains(&format!("NCCL's own choice: {gid} ::ffff:10.99.0.1")),
        "{l}"
    );
    assert_eq!(
        fix,
        Some(
            format!(
                "-x NCCL_IB_GID_INDEX={gid} (or leave it unset: NCCL picks the IPv4 RoCE v2 entry)"
            )
            .as_str()
        )
    );
    let (code, out) = doctor(&[RXE[0], ("NCCL_IB_GID_INDEX", "7")], &[]);
    assert_eq!(code, 1);
    assert!(line(&out, "rdma.gid-index").0.contains("entry 7 is empty"));
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn doctor_reports_the_devices_the_library_lists() {
    let (_, out) = doctor(&[], &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let devs = &v["checks"][1]["details"]["devices"];
    let names: Vec<&str> = devs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, erdma::devices().names());
    assert_eq!(
        v["recommended"]["devices"],
        serde_json::json!(["rxe0:1", "rxe1:1", "rxe2:1", "rxe3:1"])
    );
    // The interfaces come from the library (rxe: sysfs parent; siw: the GID's MAC).
    for (dev, nd) in [
        ("rxe0", "veth0"),
        ("rxe1", "veth1"),
        ("siw0", "veth2"),
        ("siw1", "veth3"),
        ("rxe2", "veth4"),
        ("rxe3", "veth5"),
        ("siw2", "veth6"),
        ("siw3", "veth7"),
    ] {
        let ctx = erdma::Context::open(dev).unwrap();
        assert_eq!(ctx.netdev(1).unwrap().as_deref(), Some(nd), "{dev}");
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn stat_names_each_drivers_counters() {
    let out = Command::new(STAT).arg("--json").output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tool"], "erdma-stat");
    assert_eq!(v["mode"], "totals");
    let port = |d: &str| {
        v["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["device"] == d)
            .unwrap_or_else(|| panic!("{d} missing"))
            .clone()
    };
    let rxe = port("rxe0");
    assert_eq!(
        rxe["counters"]["tx_packets"],
        "ports/1/hw_counters/sent_pkts"
    );
    assert_eq!(
        rxe["counters"]["rx_packets"],
        "ports/1/hw_counters/rcvd_pkts"
    );
    assert_eq!(rxe["missing"], serde_json::json!(["rx_bytes", "tx_bytes"]));
    assert!(rxe["rdma"]["tx_bytes"].is_null(), "missing, never 0");
    assert_eq!(rxe["netdev"]["name"], "veth0");
    assert_eq!(rxe["netdev"]["includes_non_rdma_traffic"], true);
    let siw = port("siw1");
    assert_eq!(siw["missing"].as_array().unwrap().len(), 4);
    assert_eq!(siw["netdev"]["name"], "veth3");
    // Human output says the same.
    let out = Command::new(STAT).args(["-d", "siw0"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("siw0:1: no RDMA counters; bytes from netdev veth2: ALL its traffic"),
        "{text}"
    );
}
