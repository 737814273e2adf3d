//! erdma-perf against misbehaving peers, in the rig (rxe1 serves on
//! 10.99.0.2): fake clients written here send garbage, an oversized record,
//! disconnect or stall during the exchange; real clients are killed mid-run,
//! or run with other options. Each time the server reports one line and
//! exits 6, or with --persistent goes on serving. Never a hang: every wait
//! here is bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_erdma-perf");

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn server_ip() -> String {
    env("ERDMA_RIG_RXE_IP1", "10.99.0.2")
}

fn gid() -> String {
    env("ERDMA_RIG_RXE_GID_INDEX", "1")
}

/// A process with its output collected by threads.
struct Proc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn erdma-perf");
        let collect = |r: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(String::new()));
            let b = buf.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let mut s = b.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            });
            buf
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    /// A server, once it listens.
    fn server(args: &[&str]) -> Proc {
        let p = Proc::spawn(args);
        p.wait_for("Waiting for client", "the server did not start");
        p
    }

    /// Waits up to 30 s until stdout contains `needle`; fails with `what` otherwise.
    fn wait_for(&self, needle: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.out().contains(needle) {
            assert!(Instant::now() < deadline, "{what}: {}", self.err());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn err(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn out(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits at most `secs` for the exit (kills it after).
    fn wait(&mut self, secs: u64) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Let the reader threads finish.
                std::thread::sleep(Duration::from_millis(100));
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "erdma-perf did not exit within {secs} s\nstdout: {}\nstderr: {}",
                    self.out(),
                    self.err()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Exit 6 and exactly one line on stderr containing `needle`.
fn one_line(p: &mut Proc, secs: u64, needle: &str) {
    let st = p.wait(secs);
    let err = p.err();
    assert_eq!(st.code(), Some(6), "stderr: {err}\nstdout: {}", p.out());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].starts_with("erdma-perf: "), "{err}");
    assert!(lines[0].contains(needle), "'{needle}' not in: {err}");
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect((server_ip().as_str(), port)).expect("connect to the server");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn version(erdma: bool) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(b"6.06");
    if erdma {
        v[5..15].copy_from_slice(b"erdma-perf");
    }
    v
}

/// A perftest client's first steps: version, page and line sizes, MTU.
fn perftest_prelude(s: &mut TcpStream) {
    let mut b16 = [0u8; 16];
    s.write_all(&version(false)).unwrap();
    s.read_exact(&mut b16).unwrap();
    let mut b4 = [0u8; 4];
    s.write_all(&4096u32.to_be_bytes()).unwrap();
    s.read_exact(&mut b4).unwrap();
    s.write_all(&64u32.to_be_bytes()).unwrap();
    s.read_exact(&mut b4).unwrap();
    let mut b2 = [0u8; 2];
    s.write_all(b"3\0").unwrap();
    s.read_exact(&mut b2).unwrap();
}

fn server_args(test: &str, port: u16) -> Vec<String> {
    vec![
        test.into(),
        "-d".into(),
        env("ERDMA_RIG_RXE1", "rxe1"),
        "-x".into(),
        gid(),
        "-p".into(),
        port.to_string(),
        "--timeout".into(),
        "5".into(),
    ]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn garbage_instead_of_the_version() {
    let a = server_args("write_bw", 18610);
    let mut srv = Proc::server(&args(&a));
    let mut c = connect(18610);
    c.write_all(&[0xff; 16]).unwrap();
    one_line(&mut srv, 20, "where perftest sends its version");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn oversized_options_record() {
    let a = server_args("send_bw", 18611);
    let mut srv = Proc::server(&args(&a));
    let mut c = connect(18611);
    c.write_all(&version(true)).unwrap();
    let mut b = [0u8; 16];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b[5..15], b"erdma-perf", "the server announces itself");
    let mut rec = b"ERDMAPRF".to_vec();
    rec.extend_from_slice(&(1u32 << 30).to_be_bytes());
    c.write_all(&rec).unwrap();
    one_line(
        &mut srv,
        20,
        "announces 1073741824 bytes, more than the 4096 allowed",
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn garbage_connection_record() {
    let a = server_args("write_bw", 18612);
    let mut srv = Proc::server(&args(&a));
    let mut c = connect(18612);
    perftest_prelude(&mut c);
    c.write_all(&[b'z'; 108]).unwrap();
    one_line(&mut srv, 20, "the peer's connection record");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn client_disconnects_during_the_exchange() {
    let a = server_args("read_lat", 18613);
    let mut srv = Proc::server(&args(&a));
    let mut c = connect(18613);
    c.write_all(&version(false)).unwrap();
    drop(c);
    one_line(
        &mut srv,
        20,
        "closed the connection while this side waited for",
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn silent_client_times_out() {
    let mut a = server_args("send_lat", 18614);
    a.extend(["--timeout".into(), "2".into()]);
    let mut srv = Proc::server(&args(&a));
    let _c = connect(18614);
    one_line(&mut srv, 30, "timed out");
}

fn client(test: &str, port: u16, extra: &[&str]) -> Proc {
    let mut v = vec![
        test.to_string(),
        "-d".into(),
        env("ERDMA_RIG_RXE0", "rxe0"),
        "-x".into(),
        gid(),
        "-p".into(),
        port.to_string(),
        "--timeout".into(),
        "5".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push(server_ip());
    Proc::spawn(&args(&v))
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn persistent_server_survives_bad_clients() {
    let mut a = server_args("write_bw", 18615);
    a.extend(["--persistent".into(), "-n".into(), "20".into()]);
    let mut srv = Proc::server(&args(&a));
    let mut c = connect(18615);
    c.write_all(&[0u8; 16]).unwrap();
    drop(c);
    let c = connect(18615);
    drop(c);
    let mut ok = client("write_bw", 18615, &["-n", "20"]);
    assert_eq!(ok.wait(60).code(), Some(0), "{}", ok.err());
    std::thread::sleep(Duration::from_millis(300));
    assert!(srv.alive(), "the persistent server exited: {}", srv.err());
    let err = srv.err();
    assert_eq!(err.lines().count(), 2, "one line per bad client: {err}");
    assert!(err.lines().all(|l| l.starts_with("erdma-perf: ")), "{err}");
    assert!(srv.out().contains(" 65536      20 "), "{}", srv.out());
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn mismatched_options_are_refused_on_both_sides() {
    let mut a = server_args("send_bw", 18616);
    a.extend(["-s".into(), "4096".into()]);
    let mut srv = Proc::server(&args(&a));
    let mut cli = client("send_bw", 18616, &[]);
    one_line(&mut cli, 30, "-s: this side 65536, the peer 4096");
    one_line(&mut srv, 30, "-s: this side 4096, the peer 65536");
}

fn killed_mid_run(test: &str, port: u16) {
    let mut a = server_args(test, port);
    a.extend(["-D".into(), "30".into()]);
    let mut srv = Proc::server(&args(&a));
    let mut cli = client(test, port, &["-D", "30"]);
    // Let the test start: the client prints the result header then.
    cli.wait_for("#bytes", "the client did not start");
    std::thread::sleep(Duration::from_secs(2));
    // SIGKILL: no goodbye on the wire.
    cli.child.kill().unwrap();
    let t = Instant::now();
    let st = srv.wait(40);
    let err = srv.err();
    assert_eq!(st.code(), Some(6), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("went away")
            || err.contains("closed the connection")
            || err.contains("disconnected"),
        "{err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "noticed after {:?}",
        t.elapsed()
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn client_killed_during_write_bw() {
    killed_mid_run("write_bw", 18617);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn client_killed_during_send_bw() {
    killed_mid_run("send_bw", 18618);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn server_killed_during_the_run() {
    let mut a = server_args("write_bw", 18619);
    a.extend(["-D".into(), "30".into()]);
    let mut srv = Proc::server(&args(&a));
    let mut cli = client("write_bw", 18619, &["-D", "30"]);
    cli.wait_for("#bytes", "the client did not start");
    std::thread::sleep(Duration::from_secs(2));
    srv.child.kill().unwrap();
    let st = cli.wait(40);
    let err = cli.err();
    assert!(matches!(st.code(), Some(6) | Some(1)), "{st:?} {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn iwarp_device_limits_are_one_line() {
    let siw = env("ERDMA_RIG_SIW", "siw0 siw1");
    let Some(dev) = siw.split_whitespace().next() else {
        eprintln!("no siw in this rig");
        return;
    };
    let mut p = Proc::spawn(&["write_bw", "-d", dev]);
    assert_eq!(p.wait(20).code(), Some(9), "{}", p.err());
    assert!(p.err().contains("add -R"), "{}", p.err());
    let mut p = Proc::spawn(&["atomic_bw", "-d", dev, "-R"]);
    assert_eq!(p.wait(20).code(), Some(9), "{}", p.err());
    assert!(p.err().contains("no atomic operations"), "{}", p.err());
    let mut p = Proc::spawn(&["write_bw", "-d", "nosuch0"]);
    assert_eq!(p.wait(20).code(), Some(5), "{}", p.err());
    let mut p = Proc::spawn(&["write_bw", "-d", "rxe0", "-x", "200"]);
    assert_eq!(p.wait(20).code(), Some(5), "{}", p.err());
    assert!(p.err().contains("bad GID index 200"), "{}", p.err());
    let mut p = Proc::spawn(&["write_bw", "-d", "rxe0", "-i", "3"]);
    assert_eq!(p.wait(20).code(), Some(5), "{}", p.err());
}
