//! erdma-perf on a host without RDMA (CI): bad options, help, version, no
//! device, no libibverbs, no CUDA driver. Each failure is one line on stderr
//! with the documented exit status.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_erdma-perf");

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run erdma-perf")
}

fn one_line_error(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    assert!(err.starts_with("erdma-perf: "), "{err}");
    assert!(err.contains(needle), "'{needle}' not in: {err}");
}

#[test]
fn bad_options_exit_2_with_one_line() {
    for (args, needle) in [
        (&[][..], "no test given"),
        (&["write_bww"], "unknown test 'write_bww'"),
        (&["write_bw", "-n", "2"], "between 5 and 100000000"),
        (&["write_bw", "-s", "1G"], "message size"),
        (&["send_lat", "-b"], "bidirectional"),
        (&["write_bw", "-c", "UC"], "RC only"),
        (&["write_bw", "--odp"], "--odp"),
        (&["write_bw", "-x"], "requires an argument"),
        (&["write_bw", "--nosuch"], "unrecognized option"),
        (&["write_bw", "--use_cuda=x"], "--use_cuda"),
        (&["write_bw", "1.2.3.4", "5.6.7.8"], "more than one server"),
        (
            &["atomic_lat", "-A", "SWAP"],
            "CMP_AND_SWAP or FETCH_AND_ADD",
        ),
        (&["write_bw", "-D", "2", "-f", "1"], "twice the margin"),
    ] {
        let out = run(args, &[]);
        one_line_error(&out, 2, needle);
    }
}

#[test]
fn help_version_and_list_exit_0() {
    let out = run(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Exit status: 0 ok"), "{text}");
    assert!(text.contains("--use_cuda=GPU"), "{text}");
    let out = run(&["write_bw", "-V"], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Version: 6.06"));
    let out = run(&["--list"], &[]);
    let list = String::from_utf8_lossy(&out.stdout);
    assert_eq!(list.lines().count(), 8, "{list}");
}

#[test]
fn binary_named_after_a_test_runs_it() {
    let dir = std::env::temp_dir().join(format!("erdma-perf-argv0-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("erdma_send_lat");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    // The test comes from the name: -b is refused as for send_lat.
    let out = Command::new(&link).args(["-b"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    one_line_error(&out, 2, "bidirectional is only available in BW tests");
}

#[test]
fn no_device_or_no_library_is_one_line() {
    let out = run(
        &["write_bw"],
        &[("ERDMA_LIBIBVERBS", "/nonexistent/libibverbs.so.1")],
    );
    one_line_error(&out, 4, "libibverbs missing");
    if !std::path::Path::new("/sys/class/infiniband_verbs/abi_version").exists() {
        let out = run(&["write_bw"], &[]);
        one_line_error(&out, 3, "no RDMA device");
        let out = run(&["read_lat", "-d", "mlx5_0", "10.0.0.1"], &[]);
        one_line_error(&out, 3, "no RDMA device");
    }
}

#[test]
fn gpu_memory_without_a_cuda_driver_is_one_line() {
    if erdma::cuda::is_available() {
        eprintln!("a CUDA driver is present: the no-driver path is checked on hosts without one");
        return;
    }
    // CUDA is checked first, before the RDMA device and the connection.
    let out = run(&["write_bw", "--use_cuda=0", "10.0.0.1"], &[]);
    one_line_error(&out, 8, "--use_cuda=0: libcuda.so.1 not found");
    let out = run(&["write_bw", "--use_cuda=0", "--use_cuda_dmabuf"], &[]);
    one_line_error(&out, 8, "libcuda.so.1");
}
