//! Communicators: creation (bounded by a deadline), queries, abort and destruction.

use std::cell::Cell;
use std::ffi::{CString, c_int};
use std::fmt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::error::{NcclError, PendingRank, Result, ResultCode};
use super::group::{Group, in_group};
use super::library::{Nccl, UniqueId};
use super::sys::{self, NCCL_CONFIG_UNDEF_INT, ncclComm_t};
use super::version::Version;
use crate::cuda::Device;

/// Communicator settings (`ncclConfig_t`). `None` leaves NCCL's default (and its environment
/// variables) in charge. Fields newer than the loaded NCCL are refused with
/// [`NcclError::Unsupported`] rather than silently ignored.
#[derive(Debug, Clone)]
pub struct Config {
    /// Blocking communicator (NCCL's default, and nccl-tests'): calls return when their work
    /// is enqueued. `false` makes every call return at once (`ncclInProgress`), which this
    /// crate then waits out with [`Config::timeout`]; NCCL >= 2.28 starts a thread per group
    /// in that mode, so benchmarks should stay blocking.
    pub blocking: bool,
    /// Upper bound for creating the communicator (and, when nonblocking, for every call to
    /// leave `ncclInProgress`). When it passes the communicators are aborted and
    /// [`NcclError::Timeout`] is returned. A blocking creation with a timeout runs on a helper
    /// thread, which is left behind (and cleans up if it ever finishes) after a timeout.
    pub timeout: Option<Duration>,
    /// `cgaClusterSize`.
    pub cga_cluster_size: Option<u32>,
    /// `minCTAs`.
    pub min_ctas: Option<u32>,
    /// `maxCTAs`.
    pub max_ctas: Option<u32>,
    /// `netName`: the network plugin to use, e.g. "IB" or "Socket".
    pub net_name: Option<String>,
    /// `splitShare`.
    pub split_share: Option<bool>,
    /// `trafficClass` (NCCL >= 2.26).
    pub traffic_class: Option<u32>,
    /// `commName` (NCCL >= 2.27).
    pub comm_name: Option<String>,
    /// `collnetEnable` (NCCL >= 2.27).
    pub collnet_enable: Option<bool>,
    /// `CTAPolicy` (NCCL >= 2.27; nccl-tests `-x`).
    pub cta_policy: Option<u32>,
    /// `nvlsCTAs` (NCCL >= 2.27).
    pub nvls_ctas: Option<u32>,
    /// `nChannelsPerNetPeer` (NCCL >= 2.28).
    pub n_channels_per_net_peer: Option<u32>,
    /// `nvlinkCentricSched` (NCCL >= 2.28; nccl-tests built against 2.28 sets it to 1).
    pub nvlink_centric_sched: Option<bool>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            blocking: true,
            timeout: None,
            cga_cluster_size: None,
            min_ctas: None,
            max_ctas: None,
            net_name: None,
            split_share: None,
            traffic_class: None,
            comm_name: None,
            collnet_enable: None,
            cta_policy: None,
            nvls_ctas: None,
            n_channels_per_net_peer: None,
            nvlink_centric_sched: None,
        }
    }
}

/// A raw config and the strings its pointers refer to (NCCL may keep `commName`).
pub(crate) struct RawConfig {
    pub(crate) raw: sys::ncclConfig_t,
    _strings: Vec<CString>,
}

// SAFETY: the raw pointers point into `strings`, owned by the same value.
unsafe impl Send for RawConfig {}

impl Config {
    /// Builds the `ncclConfig_t` for NCCL `version`, refusing fields that release lacks.
    pub(crate) fn to_raw(&self, version: Version) -> Result<RawConfig> {
        let mut raw = sys::ncclConfig_t {
            blocking: c_int::from(self.blocking),
            ..Default::default()
        };
        let mut strings = Vec::new();
        let need = |field: &str, v: Version| -> Result<()> {
            if version < v {
                return Err(NcclError::Unsupported {
                    what: format!(
                        "communicator setting {field} needs NCCL >= {v} (loaded {version})"
                    ),
                });
            }
            Ok(())
        };
        let int = |field: &str, v: u32| -> Result<c_int> {
            c_int::try_from(v)
                .map_err(|_| NcclError::invalid(format!("{field} = {v} is out of range")))
        };
        let mut string = |field: &str, s: &str| -> Result<*const std::ffi::c_char> {
            let c = CString::new(s)
                .map_err(|_| NcclError::invalid(format!("{field} contains a NUL byte")))?;
            let p = c.as_ptr();
            strings.push(c);
            Ok(p)
        };
        if let Some(v) = self.cga_cluster_size {
            raw.cgaClusterSize = int("cga_cluster_size", v)?;
        }
        if let Some(v) = self.min_ctas {
            raw.minCTAs = int("min_ctas", v)?;
        }
        if let Some(v) = self.max_ctas {
            raw.maxCTAs = int("max_ctas", v)?;
        }
        if let Some(s) = &self.net_name {
            raw.netName = string("net_name", s)?;
        }
        if let Some(b) = self.split_share {
            raw.splitShare = c_int::from(b);
        }
        if let Some(v) = self.traffic_class {
            need("traffic_class", Version::new(2, 26, 0))?;
            raw.trafficClass = int("traffic_class", v)?;
        }
        if let Some(s) = &self.comm_name {
            need("comm_name", Version::new(2, 27, 0))?;
            raw.commName = string("comm_name", s)?;
        }
        if let Some(b) = self.collnet_enable {
            need("collnet_enable", Version::new(2, 27, 0))?;
            raw.collnetEnable = c_int::from(b);
        }
        if let Some(v) = self.cta_policy {
            need("cta_policy", Version::new(2, 27, 0))?;
            raw.CTAPolicy = int("cta_policy", v)?;
        }
        if let Some(v) = self.nvls_ctas {
            need("nvls_ctas", Version::new(2, 27, 0))?;
            raw.nvlsCTAs = int("nvls_ctas", v)?;
        }
        if let Some(v) = self.n_channels_per_net_peer {
            need("n_channels_per_net_peer", Version::new(2, 28, 0))?;
            raw.nChannelsPerNetPeer = int("n_channels_per_net_peer", v)?;
        }
        if let Some(b) = self.nvlink_centric_sched {
            need("nvlink_centric_sched", Version::new(2, 28, 0))?;
            raw.nvlinkCentricSched = c_int::from(b);
        }
        debug_assert_ne!(raw.blocking, NCCL_CONFIG_UNDEF_INT);
        Ok(RawConfig {
            raw,
            _strings: strings,
        })
    }
}

/// An NCCL communicator: one rank of a clique, bound to one GPU.
///
/// `Send` (it may move to another thread) but not `Sync`: NCCL communicators must not be
/// used by two threads at once. After [`Comm::abort`] (explicit or by a deadline helper) every
/// call returns [`NcclError::Aborted`]. Dropping a live communicator destroys it
/// (`ncclCommDestroy`), which waits for its pending work: abort stuck ones instead.
pub struct Comm {
    pub(crate) nccl: &'static Nccl,
    raw: Cell<ncclComm_t>,
    device: Device,
    rank: usize,
    nranks: usize,
    blocking: bool,
    timeout: Option<Duration>,
    _config: Option<RawConfig>,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a time; `Comm` is not
// Sync (Cell), so shared references never reach two threads.
unsafe impl Send for Comm {}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("device", &self.device.ordinal())
            .field("aborted", &self.raw.get().is_null())
            .finish()
    }
}

/// One rank to create in [`Comm::init_ranks`]: its GPU and its rank number.
#[derive(Debug, Clone)]
pub struct RankSpec {
    /// The GPU the rank runs on.
    pub device: Device,
    /// The rank, `0..nranks`.
    pub rank: usize,
}

/// A handle that owns raw communicators until they are wrapped, aborting them otherwise
/// (init failure, timeout, a helper thread finishing too late).
struct PendingComms {
    nccl: &'static Nccl,
    raws: Vec<ncclComm_t>,
}

// SAFETY: raw communicators may be handed to another thread; only one thread uses them.
unsafe impl Send for PendingComms {}

impl PendingComms {
    fn abort_all(&mut self) {
        for raw in self.raws.drain(..) {
            if !raw.is_null() {
                // SAFETY: raw is a communicator created by ncclCommInitRankConfig and not yet
                // destroyed; abort releases it even mid-initialization.
                unsafe { (self.nccl.api.ncclCommAbort)(raw) };
            }
        }
    }
}

impl Drop for PendingComms {
    fn drop(&mut self) {
        self.abort_all();
    }
}

impl Comm {
    /// Creates this process's rank `rank` of an `nranks` communicator identified by `id`, on
    /// `device` (`ncclCommInitRankConfig`). Every rank must call it with the same id and
    /// `nranks`. With [`Config::timeout`] set, a peer that never shows up yields
    /// [`NcclError::Timeout`] instead of a hang.
    pub fn init_rank(
        nccl: &'static Nccl,
        device: &Device,
        nranks: usize,
        rank: usize,
        id: &UniqueId,
        config: &Config,
    ) -> Result<Comm> {
        let spec = [RankSpec {
            device: device.clone(),
            rank,
        }];
        let mut comms = Comm::init_ranks(nccl, &spec, nranks, id, config)?;
        comms
            .pop()
            .ok_or_else(|| NcclError::invalid("no communicator created"))
    }

    /// Creates several ranks of one communicator from this thread, one per GPU, inside one
    /// NCCL group (what nccl-tests does for `-g`). Returns them in the order given.
    pub fn init_ranks(
        nccl: &'static Nccl,
        ranks: &[RankSpec],
        nranks: usize,
        id: &UniqueId,
        config: &Config,
    ) -> Result<Vec<Comm>> {
        if nranks == 0 || c_int::try_from(nranks).is_err() {
            return Err(NcclError::invalid(format!(
                "nranks = {nranks} is out of range"
            )));
        }
        if ranks.is_empty() {
            return Err(NcclError::invalid("no ranks to create"));
        }
        for (i, r) in ranks.iter().enumerate() {
            if r.rank >= nranks {
                return Err(NcclError::invalid(format!(
                    "rank {} is not below nranks {nranks}",
                    r.rank
                )));
            }
            if ranks[..i]
                .iter()
                .any(|o| o.device.ordinal() == r.device.ordinal())
            {
                return Err(NcclError::invalid(format!(
                    "GPU {} is given to two ranks of one communicator",
                    r.device.ordinal()
                )));
            }
        }
        // Validate the settings on this thread, before any helper thread exists.
        config.to_raw(nccl.version())?;
        match (config.blocking, config.timeout) {
            (true, Some(limit)) => init_on_helper_thread(nccl, ranks, nranks, id, config, limit),
            _ => init_now(nccl, ranks, nranks, id, config),
        }
    }

    /// Creates one communicator per GPU of this process with `ncclCommInitAll` (no id to
    /// exchange; ranks follow `devices`' order).
    pub fn init_all(nccl: &'static Nccl, devices: &[Device]) -> Result<Vec<Comm>> {
        if devices.is_empty() {
            return Err(NcclError::invalid("ncclCommInitAll needs at least one GPU"));
        }
        let ordinals: Vec<c_int> = devices
            .iter()
            .map(|d| c_int::try_from(d.ordinal()).unwrap_or(c_int::MAX))
            .collect();
        devices[0].bind()?;
        let mut pending = PendingComms {
            nccl,
            raws: vec![std::ptr::null_mut(); devices.len()],
        };
        // SAFETY: raws has room for ndev communicators and ordinals lists ndev devices.
        let rc = unsafe {
            (nccl.api.ncclCommInitAll)(
                pending.raws.as_mut_ptr(),
                ordinals.len() as c_int,
                ordinals.as_ptr(),
            )
        };
        nccl.check("ncclCommInitAll", rc, std::ptr::null_mut())?;
        let config = Config::default();
        let mut comms = Vec::with_capacity(devices.len());
        for (i, d) in devices.iter().enumerate() {
            let raw = std::mem::replace(&mut pending.raws[i], std::ptr::null_mut());
            comms.push(Comm::wrap(nccl, raw, d.clone(), &config, None)?);
        }
        Ok(comms)
    }

    /// Wraps a live communicator, reading rank and size from NCCL. On error the
    /// communicator is released.
    fn wrap(
        nccl: &'static Nccl,
        raw: ncclComm_t,
        device: Device,
        config: &Config,
        raw_config: Option<RawConfig>,
    ) -> Result<Comm> {
        let mut comm = Comm {
            nccl,
            raw: Cell::new(raw),
            device,
            rank: 0,
            nranks: 0,
            blocking: config.blocking,
            timeout: config.timeout,
            _config: raw_config,
        };
        comm.rank = comm.query_int("ncclCommUserRank", nccl.api.ncclCommUserRank)?;
        comm.nranks = comm.query_int("ncclCommCount", nccl.api.ncclCommCount)?;
        Ok(comm)
    }

    fn query_int(
        &self,
        call: &'static str,
        f: unsafe extern "C" fn(ncclComm_t, *mut c_int) -> sys::ncclResult_t,
    ) -> Result<usize> {
        let raw = self.handle()?;
        let mut v: c_int = 0;
        // SAFETY: raw is a live communicator; the function writes one int.
        let rc = unsafe { f(raw, &mut v) };
        self.nccl.check(call, rc, raw)?;
        Ok(usize::try_from(v).unwrap_or(0))
    }

    /// The live handle, or [`NcclError::Aborted`].
    #[inline]
    pub(crate) fn handle(&self) -> Result<ncclComm_t> {
        let raw = self.raw.get();
        if raw.is_null() {
            return Err(NcclError::Aborted { rank: self.rank });
        }
        Ok(raw)
    }

    /// This rank's number in the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the communicator (`ncclCommCount`).
    pub fn size(&self) -> usize {
        self.nranks
    }

    /// The GPU this rank runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The CUDA device ordinal NCCL reports for this communicator (`ncclCommCuDevice`).
    pub fn cu_device(&self) -> Result<usize> {
        self.query_int("ncclCommCuDevice", self.nccl.api.ncclCommCuDevice)
    }

    /// The NCCL library this communicator comes from.
    pub fn nccl(&self) -> &'static Nccl {
        self.nccl
    }

    /// Whether the communicator is blocking.
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// Whether the communicator was aborted.
    pub fn is_aborted(&self) -> bool {
        self.raw.get().is_null()
    }

    /// The raw `ncclComm_t`, for NCCL calls this crate does not wrap. Null after abort.
    /// Do not destroy or abort it.
    pub fn as_raw(&self) -> ncclComm_t {
        self.raw.get()
    }

    /// The bound on waits of nonblocking calls ([`Config::timeout`]).
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// `ncclCommGetAsyncError`: `Ok(true)` when idle or healthy, `Ok(false)` while a
    /// nonblocking operation is still in progress, an [`NcclError::Async`] when NCCL
    /// recorded an error (for example a peer that died).
    pub fn async_error(&self) -> Result<bool> {
        let raw = self.handle()?;
        let mut state: sys::ncclResult_t = 0;
        // SAFETY: raw is live; NCCL writes one result.
        let rc = unsafe { (self.nccl.api.ncclCommGetAsyncError)(raw, &mut state) };
        self.nccl.check("ncclCommGetAsyncError", rc, raw)?;
        match ResultCode(state) {
            ResultCode::SUCCESS => Ok(true),
            ResultCode::IN_PROGRESS => Ok(false),
            code => Err(NcclError::Async {
                rank: self.rank,
                code,
                last_error: self.nccl.last_error(raw),
            }),
        }
    }

    /// `ncclCommAbort`: stops the communicator's pending work (NCCL kernels see the abort flag
    /// and exit) and frees it. Afterwards every call returns [`NcclError::Aborted`].
    /// Idempotent.
    ///
    /// Freeing NCCL's device memory waits for the whole GPU: work that is not NCCL's and
    /// never finishes (another library's kernel, a blocked host function) holds the abort
    /// until it does. Stuck NCCL kernels do not: they exit on the abort flag.
    ///
    /// Refused ([`NcclError::InvalidArgument`]) while a group is open on this thread: the group
    /// may have recorded operations on the communicator, which its end would launch on the
    /// freed communicator (issue 34 hole 2). End the group first; its end waits for, and on
    /// failure aborts, the communicators it used.
    pub fn abort(&self) -> Result<()> {
        if in_group() {
            return Err(NcclError::invalid(
                "ncclCommAbort inside an open group: the group's end would launch what it \
                 recorded on the freed communicator; end the group first",
            ));
        }
        let raw = self.raw.replace(std::ptr::null_mut());
        if raw.is_null() {
            return Ok(());
        }
        // SAFETY: raw was live and is now unreachable through self, so it is released once.
        let rc = unsafe { (self.nccl.api.ncclCommAbort)(raw) };
        self.nccl.check("ncclCommAbort", rc, std::ptr::null_mut())
    }

    /// Frees the communicator (`ncclCommDestroy`, which flushes its pending work first).
    /// Nonblocking communicators are finalized first (`ncclCommFinalize`), bounded by the
    /// config's timeout; on failure they are aborted.
    pub fn destroy(self) -> Result<()> {
        let raw = self.handle()?;
        if !self.blocking {
            // SAFETY: raw is live.
            let rc = unsafe { (self.nccl.api.ncclCommFinalize)(raw) };
            if let Err(e) = self.settle("ncclCommFinalize", rc) {
                let _ = self.abort();
                return Err(e);
            }
        }
        let raw = self.raw.replace(std::ptr::null_mut());
        // SAFETY: raw was live and is now unreachable through self; destroyed once.
        let rc = unsafe { (self.nccl.api.ncclCommDestroy)(raw) };
        self.nccl.check("ncclCommDestroy", rc, std::ptr::null_mut())
    }

    /// Interprets the result of an NCCL call on this communicator: errors become
    /// [`NcclError::Call`]; `ncclInProgress` (nonblocking communicators, outside a group) is
    /// waited out within the config's timeout.
    #[inline]
    pub(crate) fn settle(&self, call: &'static str, rc: sys::ncclResult_t) -> Result<()> {
        if rc == ResultCode::IN_PROGRESS.0 {
            if in_group() {
                return Ok(());
            }
            return wait_ready(&[self], self.timeout);
        }
        self.nccl.check(call, rc, self.raw.get())
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        let raw = self.raw.replace(std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        if in_group() {
            // A group open on this thread (one never ended, after `mem::forget`) may hold
            // recorded work on it: leaked rather than freed under NCCL's group.
            return;
        }
        // SAFETY: raw is live and released once. Errors cannot be reported from drop.
        unsafe { (self.nccl.api.ncclCommDestroy)(raw) };
    }
}

/// Creates the communicators on this thread.
fn init_now(
    nccl: &'static Nccl,
    ranks: &[RankSpec],
    nranks: usize,
    id: &UniqueId,
    config: &Config,
) -> Result<Vec<Comm>> {
    let mut raw_configs = Vec::with_capacity(ranks.len());
    for _ in ranks {
        raw_configs.push(config.to_raw(nccl.version())?);
    }
    let mut pending = PendingComms {
        nccl,
        raws: vec![std::ptr::null_mut(); ranks.len()],
    };
    let started = Instant::now();
    let mut first_error = None;
    {
        let group = if ranks.len() > 1 {
            Some(Group::start(nccl)?)
        } else {
            None
        };
        for (i, r) in ranks.iter().enumerate() {
            if let Err(e) = r.device.bind() {
                first_error.get_or_insert(NcclError::from(e));
                break;
            }
            // SAFETY: the slot receives one communicator; the id is passed by value; the
            // config (and its strings) outlive the call and the communicator.
            let rc = unsafe {
                (nccl.api.ncclCommInitRankConfig)(
                    &mut pending.raws[i],
                    nranks as c_int,
                    id.raw(),
                    r.rank as c_int,
                    &mut raw_configs[i].raw,
                )
            };
            if rc != ResultCode::IN_PROGRESS.0
                && let Err(e) = nccl.check("ncclCommInitRankConfig", rc, pending.raws[i])
            {
                first_error.get_or_insert(e);
                break;
            }
        }
        if let Some(group) = group {
            match group.end() {
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if !config.blocking {
        let remaining = config.timeout.map(|t| t.saturating_sub(started.elapsed()));
        wait_raw_ready(
            nccl,
            &pending.raws,
            ranks,
            remaining,
            "NCCL communicator creation",
        )?;
    }
    let mut comms = Vec::with_capacity(ranks.len());
    for (i, (r, rc)) in ranks.iter().zip(raw_configs).enumerate() {
        let raw = std::mem::replace(&mut pending.raws[i], std::ptr::null_mut());
        comms.push(Comm::wrap(nccl, raw, r.device.clone(), config, Some(rc))?);
    }
    Ok(comms)
}

/// Polls freshly created nonblocking communicators until ready, an error, or the deadline
/// (then `pending`'s drop aborts them all).
fn wait_raw_ready(
    nccl: &'static Nccl,
    raws: &[ncclComm_t],
    ranks: &[RankSpec],
    limit: Option<Duration>,
    operation: &str,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut not_ready = Vec::new();
        for (raw, r) in raws.iter().zip(ranks) {
            let mut state: sys::ncclResult_t = 0;
            // SAFETY: raw is a communicator being created; NCCL writes one result.
            let rc = unsafe { (nccl.api.ncclCommGetAsyncError)(*raw, &mut state) };
            nccl.check("ncclCommGetAsyncError", rc, *raw)?;
            match ResultCode(state) {
                ResultCode::SUCCESS => {}
                ResultCode::IN_PROGRESS => not_ready.push(PendingRank {
                    rank: r.rank,
                    device: r.device.ordinal(),
                }),
                code => {
                    return Err(NcclError::Async {
                        rank: r.rank,
                        code,
                        last_error: nccl.last_error(*raw),
                    });
                }
            }
        }
        if not_ready.is_empty() {
            return Ok(());
        }
        if let Some(limit) = limit
            && start.elapsed() >= limit
        {
            // The caller's PendingComms aborts them when this error propagates.
            return Err(NcclError::Timeout {
                operation: operation.to_string(),
                after: limit,
                pending: not_ready,
                aborted: true,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A blocking creation cannot be interrupted, so it runs on a helper thread and the caller
/// waits for it with a deadline. A creation that finishes after the deadline aborts its
/// communicators itself.
fn init_on_helper_thread(
    nccl: &'static Nccl,
    ranks: &[RankSpec],
    nranks: usize,
    id: &UniqueId,
    config: &Config,
    limit: Duration,
) -> Result<Vec<Comm>> {
    let (tx, rx) = mpsc::channel::<Result<Vec<Comm>>>();
    let ranks_owned = ranks.to_vec();
    let id = *id;
    let helper_config = Config {
        timeout: None,
        ..config.clone()
    };
    let spawned = std::thread::Builder::new()
        .name("nccl-init".into())
        .spawn(move || {
            let result = init_now(nccl, &ranks_owned, nranks, &id, &helper_config);
            // If the caller gave up, the communicators come back here and are aborted (not
            // destroyed: peers may be gone).
            if let Err(mpsc::SendError(Ok(comms))) = tx.send(result) {
                for c in comms {
                    let _ = c.abort();
                }
            }
        });
    if let Err(e) = spawned {
        return Err(NcclError::invalid(format!(
            "cannot start the NCCL init thread: {e}"
        )));
    }
    match rx.recv_timeout(limit) {
        Ok(Ok(mut comms)) => {
            for c in &mut comms {
                c.timeout = config.timeout;
            }
            Ok(comms)
        }
        Ok(Err(e)) => Err(e),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(NcclError::Timeout {
            operation: "NCCL communicator creation".into(),
            after: limit,
            pending: ranks
                .iter()
                .map(|r| PendingRank {
                    rank: r.rank,
                    device: r.device.ordinal(),
                })
                .collect(),
            aborted: false,
        }),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(NcclError::Call {
            call: "ncclCommInitRankConfig",
            code: ResultCode::INTERNAL_ERROR,
            last_error: "the init thread ended without a result".into(),
        }),
    }
}

/// Waits until nonblocking communicators leave `ncclInProgress` (after a call or a
/// [`Group`] returned [`GroupStatus::InProgress`](super::GroupStatus::InProgress)). On an error or when `timeout` passes,
/// every communicator in `comms` is aborted. Blocking communicators return at once.
pub fn wait_ready(comms: &[&Comm], timeout: Option<Duration>) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut not_ready = Vec::new();
        for c in comms {
            match c.async_error() {
                Ok(true) => {}
                Ok(false) => not_ready.push(PendingRank {
                    rank: c.rank,
                    device: c.device.ordinal(),
                }),
                Err(e) => {
                    abort_all(comms);
                    return Err(e);
                }
            }
        }
        if not_ready.is_empty() {
            return Ok(());
        }
        if let Some(limit) = timeout
            && start.elapsed() >= limit
        {
            abort_all(comms);
            return Err(NcclError::Timeout {
                operation: "nonblocking NCCL operation".into(),
                after: limit,
                pending: not_ready,
                aborted: true,
            });
        }
        std::thread::yield_now();
    }
}

pub(crate) fn abort_all(comms: &[&Comm]) {
    for c in comms {
        let _ = c.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_blocking_with_nccl_defaults() {
        let raw = Config::default()
            .to_raw(Version::new(2, 19, 3))
            .unwrap()
            .raw;
        assert_eq!(raw.blocking, 1);
        assert_eq!(raw.minCTAs, NCCL_CONFIG_UNDEF_INT);
        assert!(raw.netName.is_null());
        assert_eq!(raw.version, 22800);
    }

    #[test]
    fn newer_settings_are_refused_on_older_nccl() {
        let c = Config {
            nvlink_centric_sched: Some(true),
            ..Config::default()
        };
        let e = c.to_raw(Version::new(2, 27, 7)).err().unwrap();
        assert_eq!(e.exit_status(), 5);
        assert!(
            e.to_string()
                .contains("nvlink_centric_sched needs NCCL >= 2.28.0 (loaded 2.27.7)"),
            "{e}"
        );
        let raw = c.to_raw(Version::new(2, 28, 3)).unwrap().raw;
        assert_eq!(raw.nvlinkCentricSched, 1);
        let c = Config {
            cta_policy: Some(1),
            ..Config::default()
        };
        assert!(c.to_raw(Version::new(2, 26, 6)).is_err());
        assert_eq!(c.to_raw(Version::new(2, 27, 3)).unwrap().raw.CTAPolicy, 1);
    }

    #[test]
    fn settings_are_range_checked() {
        let c = Config {
            min_ctas: Some(u32::MAX),
            ..Config::default()
        };
        assert_eq!(
            c.to_raw(Version::new(2, 28, 3))
                .err()
                .unwrap()
                .exit_status(),
            6
        );
        let c = Config {
            net_name: Some("IB\0x".into()),
            ..Config::default()
        };
        assert!(
            c.to_raw(Version::new(2, 28, 3))
                .err()
                .unwrap()
                .to_string()
                .contains("NUL")
        );
    }

    #[test]
    fn strings_stay_owned_by_the_config() {
        let c = Config {
            net_name: Some("IB".into()),
            comm_name: Some("bench".into()),
            blocking: false,
            ..Config::default()
        };
        let rc = c.to_raw(Version::new(2, 28, 3)).unwrap();
        assert_eq!(rc.raw.blocking, 0);
        // SAFETY: the pointers point into rc.strings, alive here.
        let name = unsafe { std::ffi::CStr::from_ptr(rc.raw.netName) };
        assert_eq!(name.to_str().unwrap(), "IB");
        let moved = rc;
        // SAFETY: moving RawConfig does not move the CString heap buffers.
        let comm = unsafe { std::ffi::CStr::from_ptr(moved.raw.commName) };
        assert_eq!(comm.to_str().unwrap(), "bench");
    }
}
