//! `erdma-stat --serve` on loopback over a made-up sysfs (`ERDMA_STAT_SYSFS`):
//! its text passes `promtool check metrics`, each scrape reads sysfs anew, a
//! real Prometheus (Debian's `prometheus`) scrapes it and computes a rate(),
//! 100 scrapes per second for 10 s with garbage, slow and surplus clients
//! beside them leave the answers right and the memory flat; the alert rules
//! pass `promtool check rules` and `promtool test rules`. The rig repeats the
//! scrape over real rxe and siw devices (rig/guest/tests.d/prometheus.sh).
//! Without prometheus/promtool the tests that need them say so and skip,
//! unless ERDMA_REQUIRE_PROMETHEUS=1 (scripts/test.sh, whose setup installs it).
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STAT: &str = env!("CARGO_BIN_EXE_erdma-stat");

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/prometheus")
}

/// Whether `bin` is on PATH; when not, skips (or fails under ERDMA_REQUIRE_PROMETHEUS=1).
fn have(bin: &str, test: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let why = format!(
            "SKIPPED {test}: {bin} not installed (apt-get install prometheus; scripts/setup.sh installs it)"
        );
        assert!(
            std::env::var("ERDMA_REQUIRE_PROMETHEUS").as_deref() != Ok("1"),
            "{why}, and ERDMA_REQUIRE_PROMETHEUS=1"
        );
        eprintln!("{why}");
    }
    ok
}

/// A made-up device directory: erdma_0 port 1 with eRDMA's counters, its netdev `lo`.
struct Sysfs(PathBuf);

impl Sysfs {
    fn new(tag: &str) -> Sysfs {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("prom-sysfs-{tag}"));
        let _ = std::fs::remove_dir_all(&d);
        let s = Sysfs(d);
        for (n, v) in [
            ("tx_bytes_cnt", "1000"),
            ("rx_bytes_cnt", "2000"),
            ("tx_packets_cnt", "10"),
            ("rx_packets_cnt", "20"),
            ("tx_bps_meter_drop_cnt", "0"),
        ] {
            s.put(&format!("erdma_0/ports/1/hw_counters/{n}"), v);
        }
        s.put("erdma_0/ports/1/state", "4: ACTIVE");
        s.put("erdma_0/ports/1/phys_state", "5: LinkUp");
        s.put("erdma_0/ports/1/rate", "100 Gb/sec (4X EDR)");
        s.put("erdma_0/ports/1/link_layer", "Ethernet");
        s.put("erdma_0/ports/1/gid_attrs/ndevs/0", "lo");
        s
    }
    fn put(&self, rel: &str, v: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        // Written whole then renamed: a concurrent scrape never sees half a number.
        let tmp = p.with_extension("tmp~");
        std::fs::write(&tmp, format!("{v}\n")).unwrap();
        std::fs::rename(tmp, p).unwrap();
    }
}

impl Drop for Sysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (bound then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running exporter; killed when dropped.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Exporter {
    fn start(sysfs: &Path, extra: &[&str]) -> Exporter {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(STAT)
            .arg("--serve")
            .arg(addr.to_string())
            .args(extra)
            .env("ERDMA_STAT_SYSFS", sysfs)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start erdma-stat --serve");
        let mut e = Exporter { child, addr };
        let t0 = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(st)) = e.child.try_wait() {
                panic!("erdma-stat --serve {addr} exited: {st}");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "not listening after 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        e
    }

    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }

    fn threads(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("Threads")
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `req` raw, returns (status code, body); bounded by 30 s.
fn raw(addr: SocketAddr, req: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(req);
    let mut buf = Vec::new();
    let _ = s.take(16 << 20).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// The value of the sample line starting with `series`.
fn value(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
}

const TX: &str = r#"erdma_port_transmit_bytes_total{device="erdma_0",port="1"}"#;

#[test]
fn serves_checked_metrics_read_on_each_scrape() {
    let sys = Sysfs::new("each");
    let ex = Exporter::start(&sys.0, &["--checks-every", "0"]);
    let (code, body) = get(ex.addr, "/metrics");
    assert_eq!(code, 200, "{body}");
    assert_eq!(value(&body, TX).as_deref(), Some("1000"), "{body}");
    assert_eq!(value(&body, "erdma_rdma_devices").as_deref(), Some("1"));
    assert_eq!(
        value(
            &body,
            r#"erdma_port_rate_bytes_per_second{device="erdma_0",port="1"}"#
        )
        .as_deref(),
        Some("12500000000")
    );
    assert!(
        body.contains(
            r#"erdma_port_netdev_transmit_bytes_total{device="erdma_0",port="1",netdev="lo"}"#
        ),
        "{body}"
    );
    assert!(
        !body.contains("erdma_doctor_check_status"),
        "--checks-every 0"
    );
    sys.put("erdma_0/ports/1/hw_counters/tx_bytes_cnt", "5000");
    let (_, body) = get(ex.addr, "/metrics?x=y");
    assert_eq!(value(&body, TX).as_deref(), Some("5000"), "read again");
    // The index page, and everything else refused.
    let (code, page) = get(ex.addr, "/");
    assert_eq!(code, 200);
    assert!(page.contains("href=\"/metrics\""), "{page}");
    assert_eq!(get(ex.addr, "/../etc/passwd").0, 404);
    assert_eq!(raw(ex.addr, b"POST /metrics HTTP/1.1\r\n\r\n").0, 405);
    assert_eq!(
        raw(
            ex.addr,
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"
        )
        .0,
        400
    );

    if have("promtool", "promtool check metrics") {
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && all.trim().is_empty(),
            "promtool: {all}\n{body}"
        );
    }
}

#[test]
fn doctor_checks_and_no_devices() {
    let sys = Sysfs::new("none");
    let empty = sys.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let ex = Exporter::start(&empty, &["--skip", "gpu,nccl,container"]);
    let (code, body) = get(ex.addr, "/metrics");
    assert_eq!(code, 200);
    assert_eq!(value(&body, "erdma_rdma_devices").as_deref(), Some("0"));
    assert!(
        body.contains("erdma_rdma_unavailable{reason=\"no RDMA device under "),
        "{body}"
    );
    assert!(
        body.contains(r#"erdma_doctor_check_status{check="limits.memlock",group="limits",status="#),
        "{body}"
    );
    // Skipped checks are exported as skip.
    assert_eq!(
        value(
            &body,
            r#"erdma_doctor_check_status{check="gpu.driver",group="gpu",status="skip"}"#
        )
        .as_deref(),
        Some("1"),
        "{body}"
    );
    // One status per check is 1.
    let ones = body
        .lines()
        .filter(|l| l.starts_with("erdma_doctor_check_status{") && l.ends_with(" 1"))
        .count();
    let all = body
        .lines()
        .filter(|l| l.starts_with("erdma_doctor_check_status{"))
        .count();
    assert_eq!(ones * 4, all, "{body}");
    drop(ex);
    // Bad arguments and an address in use: one line, documented statuses.
    let out = Command::new(STAT)
        .args(["--serve", "127.0.0.1:1", "--skip", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let out = Command::new(STAT)
        .args(["--serve", &held.local_addr().unwrap().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot listen") && err.contains("give a free HOST:PORT"),
        "{err}"
    );
    let out = Command::new(STAT)
        .args(["--serve", "x", "-l"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// 100 scrapes per second for 10 s (one paced client), while other threads
/// send garbage, oversized heads, stalled heads and hold six idle
/// connections: every scrape answered 200 carries the current counter (a
/// 503 is allowed, under 10%), none hangs, and the memory after the run is
/// within 4 MB of before. Then 20 idle connections: a scrape is answered
/// 503 at once, and 200 again once they are gone.
#[test]
fn under_load_and_abuse_answers_stay_right_and_memory_flat() {
    let sys = Sysfs::new("load");
    let ex = Exporter::start(&sys.0, &["--checks-every", "0"]);
    let addr = ex.addr;
    // Warm up (first-use allocations), then the baseline.
    for _ in 0..50 {
        assert_eq!(get(addr, "/metrics").0, 200);
    }
    let rss0 = ex.rss_kib();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut abusers = Vec::new();
    for kind in 0..4 {
        let stop = stop.clone();
        abusers.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match kind {
                    // Garbage bytes.
                    0 => {
                        let junk: Vec<u8> = (0..600u32).map(|i| (i * 7919 % 251) as u8).collect();
                        let (c, _) = raw(addr, &junk);
                        assert!(matches!(c, 0 | 400 | 408 | 431 | 503), "garbage got {c}");
                    }
                    // A head over the limit.
                    1 => {
                        let mut r = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
                        r.extend(std::iter::repeat_n(b'a', 64 << 10));
                        let (c, _) = raw(addr, &r);
                        assert!(matches!(c, 0 | 431 | 503), "oversized got {c}");
                    }
                    // Half a request, then silence until the server gives up.
                    2 => {
                        let mut s = TcpStream::connect(addr).unwrap();
                        let _ = s.write_all(b"GET /metr");
                        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                        let t0 = Instant::now();
                        let mut b = Vec::new();
                        let _ = s.read_to_end(&mut b);
                        assert!(
                            t0.elapsed() < Duration::from_secs(29),
                            "a stalled client was held"
                        );
                    }
                    // Six idle connections at once, dropped after 1 s.
                    _ => {
                        let held: Vec<TcpStream> = (0..6)
                            .filter_map(|_| TcpStream::connect(addr).ok())
                            .collect();
                        std::thread::sleep(Duration::from_secs(1));
                        drop(held);
                    }
                }
                n += 1;
            }
            n
        }));
    }
    let (mut ok, mut busy, mut value_now) = (0u64, 0u64, 1000u64);
    let t0 = Instant::now();
    let mut worst = Duration::ZERO;
    for i in 0..1000u64 {
        // Paced at 100/s (behind schedule on a busy machine: no catching up in bursts).
        let due = Duration::from_millis(10 * i);
        if let Some(w) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(w);
        }
        if i % 100 == 0 {
            value_now += 1;
            sys.put(
                "erdma_0/ports/1/hw_counters/tx_bytes_cnt",
                &value_now.to_string(),
            );
        }
        let t = Instant::now();
        let (code, body) = get(addr, "/metrics");
        worst = worst.max(t.elapsed());
        match code {
            200 => {
                assert_eq!(value(&body, TX), Some(value_now.to_string()), "scrape {i}");
                assert!(body.ends_with('\n') && body.contains("erdma_scrape_duration_seconds "));
                ok += 1;
            }
            503 => busy += 1,
            c => panic!("scrape {i}: status {c}: {body}"),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let abused: Vec<u64> = abusers.into_iter().map(|h| h.join().unwrap()).collect();
    let rss1 = ex.rss_kib();
    eprintln!(
        "1000 scrapes in {secs:.1} s: {ok} ok, {busy} busy (503), slowest {:.1} ms; abuse rounds {abused:?}; \
         RSS {rss0} KiB before, {rss1} KiB after; {} threads",
        worst.as_secs_f64() * 1e3,
        ex.threads()
    );
    assert!(ok >= 900, "{ok} of 1000 scrapes answered 200 ({busy} busy)");
    assert!(
        rss1 <= rss0 + 4096,
        "RSS grew from {rss0} KiB to {rss1} KiB under load"
    );
    // More idle connections than are served at once: a scrape is told 503
    // at once (not held), and served again once they are gone.
    let held: Vec<TcpStream> = (0..20)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let (code, _) = get(addr, "/metrics");
    let waited = t.elapsed();
    assert_eq!(code, 503, "a 21st connection");
    assert!(waited < Duration::from_secs(4), "503 after {waited:?}");
    drop(held);
    let t = Instant::now();
    while get(addr, "/metrics").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "not served again");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The surplus connections are gone: one thread left besides main after a moment.
    let t = Instant::now();
    while ex.threads() > 1 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ex.threads(), 1, "connection threads left behind");
}

#[test]
fn promtool_checks_and_tests_the_rules() {
    if !have("promtool", "promtool_checks_and_tests_the_rules") {
        return;
    }
    let dir = rules_dir();
    for args in [
        &["check", "rules", "erdma-alerts.yml"][..],
        &["test", "rules", "erdma-alerts.test.yml"][..],
        &["check", "config", "prometheus.yml"][..],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Percent-encodes a PromQL query for a URL.
fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A real Prometheus scrapes the exporter every second while the made-up
/// byte counter grows 1 MB per 100 ms: rate() over its HTTP API is > 0,
/// and the alert rules load.
#[test]
fn a_real_prometheus_scrapes_and_computes_a_rate() {
    if !have(
        "prometheus",
        "a_real_prometheus_scrapes_and_computes_a_rate",
    ) {
        return;
    }
    let sys = Sysfs::new("real");
    let ex = Exporter::start(&sys.0, &["--checks-every", "0"]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prom-server");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        rules_dir().join("erdma-alerts.yml"),
        dir.join("erdma-alerts.yml"),
    )
    .unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - erdma-alerts.yml\n\
             scrape_configs:\n  - job_name: erdma\n    static_configs:\n      - targets: ['{}']\n",
            ex.addr
        ),
    )
    .unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _prom = Kill(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus"),
    );
    let q = urlencode(r#"rate(erdma_port_transmit_bytes_total{job="erdma",device="erdma_0"}[5s])"#);
    let t0 = Instant::now();
    let mut v = 1000u64;
    let mut last = String::new();
    loop {
        v += 1_000_000;
        sys.put("erdma_0/ports/1/hw_counters/tx_bytes_cnt", &v.to_string());
        std::thread::sleep(Duration::from_millis(100));
        if TcpStream::connect(web).is_ok() {
            let (code, body) = get(web, &format!("/api/v1/query?query={q}"));
            if code == 200 {
                let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let rate = doc["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok());
                if let Some(r) = rate.filter(|r| *r > 0.0) {
                    eprintln!(
                        "Prometheus: rate of erdma_port_transmit_bytes_total = {r:.0} B/s after {:.1} s",
                        t0.elapsed().as_secs_f64()
                    );
                    break;
                }
                last = body;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no rate > 0 from Prometheus in 120 s; last answer: {last}; log: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
    }
    let (code, body) = get(web, "/api/v1/rules");
    assert_eq!(code, 200);
    assert!(body.contains("ErdmaTrafficOnTcp"), "{body}");
    drop(ex);
    let _ = std::fs::remove_dir_all(&dir);
}
