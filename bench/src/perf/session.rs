//! The common driver: one connection with a peer, from the version
//! exchange to the last handshake, with the steps perftest's `main`s are
//! made of ([`crate::perf::cases`] strings them together per test).

use std::time::Duration;

use erdma::cuda::Device;
use erdma::{Context, LinkLayer, Mtu, RemoteBuffer, Transport};
use serde_json::json;

use super::bw::{self, Mode, Run};
use super::cases::{Kind, Verb};
use super::error::{PerfError, PerfResult};
use super::lat;
use super::memory::{Layout, Salt, check_pattern};
use super::options::{AtomicType, Options};
use super::output::{self, Output, RESULT_LINE, Row, TestInfo};
use super::rdma::{self, Plan, Resources};
use super::report::{BwMeasure, BwReport, LatMeasure, bw_report, lat_report};
use super::wire::keys::{DEST_STRUCT_SIZE, Dest, KEY_MSG_SIZE, KEY_MSG_SIZE_GID};
use super::wire::{self, Comm, Role, RunKey, WireReport};

/// One test run with one peer.
pub struct Session<'a> {
    o: &'a Options,
    role: Role,
    comm: Box<dyn Comm>,
    res: Resources,
    my: Vec<Dest>,
    rem: Vec<Dest>,
    out: &'a mut Output,
    mtu: Mtu,
    /// Bytes checked by `--verify`.
    checked: u64,
}

/// The page size (perftest's cycle buffer).
fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u32 } else { 4096 }
}

/// The L1 data cache line (perftest's `get_cache_line_size`).
fn cache_line() -> u32 {
    crate::input::read_text("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&v: &u32| v > 0)
        .unwrap_or(64)
}

impl<'a> Session<'a> {
    /// Exchanges versions, options, page and cache-line sizes and the MTU,
    /// creates (and with `-R` connects) the QPs and prints the test
    /// information block.
    pub fn open(
        o: &'a Options,
        role: Role,
        mut comm: Box<dyn Comm>,
        dev: &Context,
        gpu: Option<&'a (Device, String)>,
        out: &'a mut Output,
    ) -> PerfResult<Session<'a>> {
        comm.set_timeout(Some(o.timeout));
        let mut theirs = [0u8; wire::VERSION_LEN];
        wire::xchg(
            comm.as_mut(),
            role,
            &wire::version_record(),
            &mut theirs,
            "the version",
        )?;
        let peer = wire::parse_version(&theirs)?;
        out.facts.insert(
            "peer".into(),
            json!({
                "address": comm.peer(),
                "tool": if peer.erdma { "erdma-perf" } else { "perftest" },
                "version": peer.text,
            }),
        );
        if peer.erdma {
            let theirs = wire::exchange_run_key(comm.as_mut(), role, &run_key(o))?;
            if let Some(m) = run_key(o).mismatch(&theirs) {
                return Err(PerfError::Peer(format!(
                    "the peer ({}) runs with other options: {m}: start both sides with the same test and options",
                    comm.peer()
                )));
            }
        } else if o.verify {
            return Err(PerfError::Peer(format!(
                "--verify needs erdma-perf on both sides; the peer ({}) is perftest {}",
                comm.peer(),
                peer.text
            )));
        }
        let (cycle, line) = wire::exchange_sys(comm.as_mut(), role, page_size(), cache_line())?;
        let mine = rdma::port_mtu(dev, o)?;
        let mtu =
            Mtu::from_raw(wire::exchange_mtu(comm.as_mut(), role, mine.raw())?).unwrap_or(mine);
        let layout = Layout::new(u64::from(cycle), u64::from(line), o.size);
        let plan = Plan { o, layout, gpu };
        let n = o.qps as usize;
        let mut s_comm = comm;
        let res = if o.rdma_cm {
            // perftest swaps a (zeroed) record before and after the RDMA CM
            // connection of the test QPs.
            let zero = Dest::default();
            let listener = match role {
                Role::Server => Some(Resources::cm_listen(o)?),
                Role::Client => None,
            };
            hs_records(s_comm.as_mut(), role, &zero, true, false)?;
            let res = match (listener, &o.server) {
                (None, Some(server)) => {
                    let ip = resolve_ipv4(server)?;
                    Resources::cm_client(&plan, ip)?
                }
                (Some(l), _) => Resources::cm_server(&plan, l)?,
                (None, None) => unreachable!("a client has a server address"),
            };
            hs_records(s_comm.as_mut(), role, &zero, true, false)?;
            res
        } else {
            Resources::verbs(&plan, dev.clone())?
        };
        res.check_atomics(o)?;
        let mut res = res;
        fill(&mut res, o)?;
        let my = res.dests()?;
        out.facts.insert("memory".into(), json!(res.memory));
        let s = Session {
            o,
            role,
            comm: s_comm,
            res,
            my,
            rem: vec![Dest::default(); n],
            out,
            mtu,
            checked: 0,
        };
        let info = s.test_info();
        s.out.text(&info.text());
        s.out.info = Some(info);
        Ok(s)
    }

    /// The options.
    pub fn opts(&self) -> &'a Options {
        self.o
    }

    fn test_info(&self) -> TestInfo {
        let o = self.o;
        let mut title = vec![o.case.verb.title().to_string()];
        if o.case.verb == Verb::Atomic {
            title.push(o.atomic.name().to_string());
        }
        if o.case.kind == Kind::Bw {
            if o.duplex {
                title.push("Bidirectional".into());
            }
            title.push("BW".into());
        } else {
            title.push("Latency".into());
        }
        let link = self
            .res
            .ctx
            .port(self.res.port)
            .map(|p| p.link_layer())
            .unwrap_or(LinkLayer::Unspecified);
        let sender = o.is_client() || o.duplex;
        TestInfo {
            title: title.join(" "),
            device: self.res.ctx.name().to_string(),
            qps: o.qps,
            transport: if self.res.transport() == Transport::Iwarp {
                "IW"
            } else {
                "IB"
            },
            sender,
            tx_depth: o.tx_depth,
            rx_depth: (o.case.verb == Verb::Send && (!o.is_client() || o.duplex))
                .then_some(o.rx_depth),
            cq_mod: (o.case.kind == Kind::Bw).then_some(o.cq_mod),
            mtu: self.mtu.bytes(),
            link: match link {
                LinkLayer::Ethernet => "Ethernet",
                LinkLayer::InfiniBand | LinkLayer::Unspecified => "IB",
                _ => "Unknown",
            },
            gid_index: self.res.gid.as_ref().map(|g| g.index),
            inline_or_reads: if matches!(o.case.verb, Verb::Read | Verb::Atomic) {
                (true, self.res.out_reads)
            } else {
                (false, self.res.inline)
            },
            rdma_cm: o.rdma_cm,
            method: self.comm.method(),
            cm_server: o.rdma_cm && !o.is_client(),
            relaxed: o.relaxed_ordering,
        }
    }

    fn struct_records(&self) -> bool {
        self.comm.method() == "rdma_cm"
    }

    /// perftest's `ctx_hand_shake` with QP 0's record: a synchronisation.
    pub fn hs(&mut self) -> PerfResult<()> {
        let (st, gid) = (self.struct_records(), self.res.gid.is_some());
        self.rem[0] = hs_records(self.comm.as_mut(), self.role, &self.my[0], st, gid)?;
        Ok(())
    }

    /// A handshake the peer answers only after its test: no time limit (a
    /// peer that dies is still noticed).
    fn hs_after_run(&mut self) -> PerfResult<()> {
        self.comm.set_timeout(None);
        let r = self.hs();
        self.comm.set_timeout(Some(self.o.timeout));
        r
    }

    /// Swaps every QP's record (`ctx_hand_shake` per QP).
    pub fn exchange_dests(&mut self) -> PerfResult<()> {
        let (st, gid) = (self.struct_records(), self.res.gid.is_some());
        for i in 0..self.my.len() {
            self.rem[i] = hs_records(self.comm.as_mut(), self.role, &self.my[i], st, gid)?;
        }
        if !self.o.rdma_cm {
            // perftest's ctx_check_gid_compatibility.
            let v4 = |g: &[u8; 16]| g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff;
            if gid && v4(&self.my[0].gid) != v4(&self.rem[0].gid) {
                return Err(PerfError::Peer(
                    "the two sides use GIDs of different IP versions (IPv4 vs IPv6): pick matching GID indexes with -x"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// perftest's `ctx_connect` (Ethernet exchange; RDMA CM QPs are connected).
    pub fn connect(&mut self) -> PerfResult<()> {
        if !self.o.rdma_cm {
            self.res.connect(self.o, &self.my, &self.rem, self.mtu)?;
        }
        if self.o.case.kind == Kind::Lat {
            self.res.make_lane()?;
        }
        Ok(())
    }

    /// Prints this side's records, then swaps and prints the peer's.
    pub fn print_dests_and_exchange(&mut self) -> PerfResult<()> {
        let fields = if self.struct_records() {
            None
        } else {
            Some(self.o.case.verb)
        };
        let gid = self.res.gid.is_some();
        for d in self.my.clone() {
            self.out.text(&output::dest_lines("local", &d, fields, gid));
        }
        self.exchange_dests()?;
        for d in self.rem.clone() {
            self.out
                .text(&output::dest_lines("remote", &d, fields, gid));
        }
        Ok(())
    }

    /// The BW result header.
    pub fn print_bw_header(&mut self) {
        let h = output::bw_header(self.o.report_gbits);
        self.out.text(&format!("{RESULT_LINE}\n{h}\n"));
    }

    /// The latency result header.
    pub fn print_lat_header(&mut self) {
        let h = output::lat_header(self.o.duration.is_some());
        self.out.text(&format!("{RESULT_LINE}\n{h}\n"));
    }

    /// The closing dashes.
    pub fn end_line(&mut self) {
        self.out.line(RESULT_LINE);
    }

    /// perftest's `ctx_close_connection`: a handshake, then (over TCP)
    /// `"done"`, read back so that neither side's close resets the
    /// connection.
    pub fn close(&mut self) -> PerfResult<()> {
        self.hs_after_run()?;
        self.done()
    }

    /// The second half of [`Session::close`], after its handshake.
    fn done(&mut self) -> PerfResult<()> {
        if !self.struct_records() {
            self.comm.send(b"done\0", "the closing \"done\"")?;
            self.comm.set_timeout(Some(Duration::from_secs(2)));
            let mut b = [0u8; 5];
            let _ = self.comm.recv(&mut b, "the closing \"done\"");
        }
        self.summary_verify();
        Ok(())
    }

    /// The end of a test without perftest's closing steps (write_lat).
    pub fn finish(&mut self) -> PerfResult<()> {
        self.summary_verify();
        Ok(())
    }

    fn summary_verify(&mut self) {
        if self.o.verify {
            let n = self.checked;
            self.out
                .line(&format!(" --verify: {n} bytes checked, all as sent"));
            self.out
                .facts
                .insert("verify".into(), json!({"checked_bytes": n, "ok": true}));
        }
    }

    fn remote_bufs(&self) -> Vec<RemoteBuffer> {
        self.rem.iter().map(|r| self.res.remote(r)).collect()
    }

    fn measure_bw(&mut self, size: u64, mode: Mode) -> PerfResult<BwMeasure> {
        let remote = if self.res.credits.is_some() {
            self.rem
                .iter()
                .map(|r| RemoteBuffer {
                    addr: r.vaddr,
                    rkey: r.rkey,
                    len: 4,
                })
                .collect()
        } else {
            self.remote_bufs()
        };
        let mut run = Run {
            r: &mut self.res,
            o: self.o,
            comm: self.comm.as_mut(),
            remote: &remote,
            size,
        };
        bw::run(&mut run, mode)
    }

    fn peak(&self) -> bool {
        !self.o.no_peak
    }

    /// The steps of write_bw, read_bw and atomic_bw (`allow_all`: `-a`).
    pub fn one_sided_bw(&mut self, allow_all: bool) -> PerfResult<()> {
        let o = self.o;
        self.exchange_dests()?;
        self.connect()?;
        self.print_dests_and_exchange()?;
        self.hs()?;
        let sizes = if allow_all { o.sizes() } else { vec![o.size] };
        self.print_bw_header();
        if !o.is_client() && !o.duplex {
            // The passive server: the client measures and sends its report.
            if o.verify && o.case.verb == Verb::Write {
                for &size in &sizes {
                    self.hs_after_run()?;
                    self.verify_exposed(size)?;
                }
            }
            self.hs_after_run()?;
            let rem = wire::exchange_report(self.comm.as_mut(), self.role, &WireReport::default())?;
            self.out.row(Row::Bw(from_wire(&rem, o.report_gbits)));
            if o.verify && o.case.verb == Verb::Atomic {
                self.verify_exposed(o.size)?;
            }
            self.close()?;
            self.end_line();
            return Ok(());
        }
        let mut last = BwReport::default();
        for &size in &sizes {
            if o.duplex {
                self.hs()?;
            }
            let m = self.measure_bw(
                size,
                Mode {
                    sends: true,
                    recvs: false,
                    wait_first_rx: false,
                    peak: self.peak(),
                },
            )?;
            if o.duplex && sizes.len() > 1 {
                self.hs_after_run()?;
            }
            let mine = bw_report(&m, o.report_gbits);
            last = mine;
            if o.duplex {
                let rem = self.exchange_bw(&mine)?;
                self.out.row(Row::Bw(mine.plus(&rem)));
            } else {
                self.out.row(Row::Bw(mine));
            }
            if o.verify {
                self.verify_after_bw(size)?;
            }
        }
        self.end_line();
        if o.is_client() && !o.duplex {
            self.hs_after_run()?;
            self.exchange_bw(&last)?;
        }
        self.close()
    }

    fn exchange_bw(&mut self, mine: &BwReport) -> PerfResult<BwReport> {
        self.comm.set_timeout(None);
        let w = WireReport {
            size: mine.size,
            iters: mine.iters,
            bw_peak: mine.bw_peak,
            bw_avg: mine.bw_avg,
            msg_rate: mine.msg_rate,
        };
        let r = wire::exchange_report(self.comm.as_mut(), self.role, &w);
        self.comm.set_timeout(Some(self.o.timeout));
        Ok(from_wire(&r?, self.o.report_gbits))
    }

    /// `--verify` after a WRITE/READ/atomic bandwidth run of `size`.
    fn verify_after_bw(&mut self, size: u64) -> PerfResult<()> {
        let o = self.o;
        match o.case.verb {
            Verb::Write if o.duplex => {
                if !(o.duplex && o.sizes().len() > 1) {
                    self.hs_after_run()?;
                }
                self.verify_exposed(size)
            }
            // The passive server checks what was written.
            Verb::Write => self.hs_after_run(),
            Verb::Read => self.verify_read(size),
            Verb::Atomic if o.duplex => {
                self.hs_after_run()?;
                self.verify_exposed(size)
            }
            _ => Ok(()),
        }
    }

    /// Checks this side's exposed buffer after the peer's WRITEs or atomics.
    fn verify_exposed(&mut self, size: u64) -> PerfResult<()> {
        let o = self.o;
        let l = self.res.layout;
        let slots = l.slots(size);
        for i in 0..self.res.qps.len() {
            let base = i as u64 * l.stride;
            if o.case.verb == Verb::Atomic {
                let slots = l.slots(8);
                for k in 0..slots.min(o.iters) {
                    let mut b = [0u8; 8];
                    self.res.xmr.read((base + k * l.inc(8)) as usize, &mut b)?;
                    let got = u64::from_le_bytes(b);
                    let want = match o.atomic {
                        AtomicType::FetchAndAdd => o.iters / slots + u64::from(k < o.iters % slots),
                        AtomicType::CmpAndSwap => 0,
                    };
                    if got != want {
                        return Err(PerfError::Verify(format!(
                            "atomic target {k} of QP {i} holds {got}, expected {want} after {} {}s",
                            o.iters,
                            o.atomic.name()
                        )));
                    }
                    self.checked += 8;
                }
                continue;
            }
            for k in 0..slots.min(o.iters) {
                let off = k * l.inc(size);
                let mut got = vec![0u8; size as usize];
                self.res.xmr.read((base + off) as usize, &mut got)?;
                check_pattern(&got, i as u32, off, Salt::Source, || {
                    format!("RDMA WRITE target {k} of {size} bytes on QP {i}")
                })?;
                self.checked += size;
            }
        }
        Ok(())
    }

    /// Checks what this side's READs fetched.
    fn verify_read(&mut self, size: u64) -> PerfResult<()> {
        let l = self.res.layout;
        for i in 0..self.res.qps.len() {
            for k in 0..l.slots(size).min(self.o.iters) {
                let off = k * l.inc(size);
                let mut got = vec![0u8; size as usize];
                self.res
                    .lmr
                    .read((i as u64 * l.stride + off) as usize, &mut got)?;
                check_pattern(&got, i as u32, off, Salt::Exposed, || {
                    format!("RDMA READ into slot {k} of {size} bytes on QP {i}")
                })?;
                self.checked += size;
            }
        }
        Ok(())
    }

    /// Posts the receives of a SEND test for `size` (and resets credits).
    pub fn prepare_recvs(&mut self, size: u64) -> PerfResult<()> {
        let o = self.o;
        let receives = !o.is_client() || o.duplex || o.case.kind == Kind::Lat;
        if let Some(c) = &mut self.res.credits {
            let zero = vec![0u8; c.target.len()];
            c.target.write(0, &zero)?;
        }
        if receives {
            bw::post_recvs(&mut self.res, o, size)?;
        }
        Ok(())
    }

    /// One send_bw measurement (client sends, server receives, `-b` both).
    pub fn run_send_bw(&mut self, size: u64) -> PerfResult<BwMeasure> {
        let o = self.o;
        let client = o.is_client();
        let mode = Mode {
            sends: client || o.duplex,
            recvs: !client || o.duplex,
            wait_first_rx: o.duplex && !client,
            peak: self.peak() && (client || o.duplex),
        };
        let m = self.measure_bw(size, mode)?;
        self.checked += if o.verify && mode.recvs {
            m.iters * size
        } else {
            0
        };
        Ok(m)
    }

    /// Reports a send_bw measurement: each side its own, `-b` the sum.
    pub fn report_bw(&mut self, m: &BwMeasure) -> PerfResult<()> {
        let mine = bw_report(m, self.o.report_gbits);
        if self.o.duplex && self.o.duration.is_none() {
            let rem = self.exchange_bw(&mine)?;
            self.out.row(Row::Bw(mine.plus(&rem)));
        } else {
            self.out.row(Row::Bw(mine));
        }
        Ok(())
    }

    /// One write_lat measurement.
    pub fn run_write_lat(&mut self, size: u64) -> PerfResult<LatMeasure> {
        let remote = self.remote_bufs();
        let server = !self.o.is_client();
        let mut run = Run {
            r: &mut self.res,
            o: self.o,
            comm: self.comm.as_mut(),
            remote: &remote,
            size,
        };
        let m = lat::write_lat(&mut run, server)?;
        if self.o.verify {
            self.checked += m.iters * (size - 1);
        }
        Ok(m)
    }

    /// One send_lat measurement.
    pub fn run_send_lat(&mut self, size: u64) -> PerfResult<LatMeasure> {
        let remote = self.remote_bufs();
        let client = self.o.is_client();
        let mut run = Run {
            r: &mut self.res,
            o: self.o,
            comm: self.comm.as_mut(),
            remote: &remote,
            size,
        };
        let m = lat::send_lat(&mut run, client)?;
        if self.o.verify {
            self.checked += m.iters * size;
        }
        Ok(m)
    }

    /// Prints a latency result.
    pub fn report_lat(&mut self, m: &LatMeasure) -> PerfResult<()> {
        self.out.row(Row::Lat(lat_report(m)));
        Ok(())
    }

    /// The steps of read_lat and atomic_lat: the client measures, the
    /// server waits.
    pub fn one_sided_lat(&mut self) -> PerfResult<()> {
        let o = self.o;
        self.hs()?;
        self.exchange_dests()?;
        self.connect()?;
        self.print_dests_and_exchange()?;
        self.hs()?;
        if !o.is_client() {
            self.hs_after_run()?;
            if o.verify && o.case.verb == Verb::Atomic && o.atomic == AtomicType::FetchAndAdd {
                let mut b = [0u8; 8];
                self.res.xmr.read(0, &mut b)?;
                let got = u64::from_le_bytes(b);
                if got != o.iters {
                    return Err(PerfError::Verify(format!(
                        "the atomic target holds {got} after {} FETCH_AND_ADDs of 1",
                        o.iters
                    )));
                }
                self.checked += 8;
            }
            self.done()?;
            self.end_line();
            return Ok(());
        }
        self.print_lat_header();
        let remote = self.remote_bufs();
        let sizes = if o.case.verb == Verb::Atomic {
            vec![o.size]
        } else {
            o.sizes()
        };
        for size in sizes {
            let mut run = Run {
                r: &mut self.res,
                o,
                comm: self.comm.as_mut(),
                remote: &remote,
                size,
            };
            let m = lat::one_sided_lat(&mut run)?;
            if o.verify {
                self.checked += m.iters * if o.case.verb == Verb::Atomic { 8 } else { size };
            }
            self.report_lat(&m)?;
        }
        self.close()?;
        self.end_line();
        Ok(())
    }
}

/// The options two erdma-perf sides compare.
pub fn run_key(o: &Options) -> RunKey {
    RunKey {
        version: env!("CARGO_PKG_VERSION").to_string(),
        test: o.case.name.to_string(),
        size: o.size,
        all: o.all,
        iters: o.iters,
        duration: o.duration,
        qps: o.qps,
        duplex: o.duplex,
        verify: o.verify,
        rx_depth: if o.case.verb == Verb::Send {
            o.rx_depth
        } else {
            0
        },
        atomic: if o.case.verb == Verb::Atomic {
            o.atomic.name().to_string()
        } else {
            String::new()
        },
    }
}

fn from_wire(w: &WireReport, gbits: bool) -> BwReport {
    BwReport {
        size: w.size,
        iters: w.iters,
        bw_peak: w.bw_peak,
        bw_avg: w.bw_avg,
        msg_rate: w.msg_rate,
        gbits,
    }
}

/// Swaps records: the text form over TCP (with or without the GID), the
/// struct over RDMA CM.
fn hs_records(
    comm: &mut dyn Comm,
    role: Role,
    mine: &Dest,
    as_struct: bool,
    with_gid: bool,
) -> PerfResult<Dest> {
    let what = "the connection record";
    let bad = |e: super::wire::keys::BadRecord| {
        PerfError::Peer(format!("the peer's connection record: {e}"))
    };
    if as_struct {
        let mut b = [0u8; DEST_STRUCT_SIZE];
        wire::xchg(comm, role, &mine.to_struct(0), &mut b, what)?;
        Dest::from_struct(&b).map_err(bad)
    } else {
        let size = if with_gid {
            KEY_MSG_SIZE_GID
        } else {
            KEY_MSG_SIZE
        };
        let mut b = vec![0u8; size];
        wire::xchg(comm, role, &mine.to_text(with_gid), &mut b, what)?;
        Dest::from_text(&b, with_gid).map_err(bad)
    }
}

/// Fills the buffers with what `--verify` checks (the sender's source, a
/// READ's source).
fn fill(res: &mut Resources, o: &Options) -> PerfResult<()> {
    let stride = res.layout.stride;
    if o.cuda.is_some() {
        return Ok(());
    }
    res.lmr.fill_pattern(stride, Salt::Source)?;
    if o.case.verb == Verb::Read {
        res.xmr.fill_pattern(stride, Salt::Exposed)?;
    }
    Ok(())
}

/// The IPv4 address of `host` (RDMA CM and perftest are IPv4).
pub fn resolve_ipv4(host: &str) -> PerfResult<std::net::Ipv4Addr> {
    use std::net::ToSocketAddrs;
    (host, 0u16)
        .to_socket_addrs()
        .map_err(|e| PerfError::Peer(format!("resolve the server name '{host}': {e}")))?
        .find_map(|a| match a {
            std::net::SocketAddr::V4(v) => Some(*v.ip()),
            _ => None,
        })
        .ok_or_else(|| PerfError::Peer(format!("the server name '{host}' has no IPv4 address")))
}
