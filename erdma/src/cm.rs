//! RDMA CM (librdmacm): connecting queue pairs by IP address. The only way
//! to connect iWARP devices (eRDMA in its default mode, siw); works for RoCE
//! and InfiniBand too.
//!
//! Client: [`CmId::resolve`] -> [`CmId::context`] -> PD and CQs ->
//! [`CmId::create_qp`] -> [`CmId::connect`].
//! Server: [`CmListener::bind`] -> [`CmListener::get_request`] ->
//! [`ConnectRequest::context`] -> PD and CQs -> [`ConnectRequest::create_qp`]
//! -> [`ConnectRequest::accept`].
//! Every wait has a timeout; a rejected or unreachable peer is an
//! [`Error::Cm`] naming the event.

use std::ffi::CStr;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use erdma_sys as sys;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::pd::ProtectionDomain;
use crate::qp::{QpCapabilities, QpState, QueuePair};

/// An rdma_cm event channel (non-blocking fd).
struct Channel(Ptr<sys::rdma_event_channel>);

impl Drop for Channel {
    fn drop(&mut self) {
        if let Ok(lib) = ffi::rdmacm() {
            // SAFETY: every id using the channel was destroyed before (each
            // holds an Arc to it).
            unsafe { lib.rdma_destroy_event_channel(self.0.0) };
        }
    }
}

impl Channel {
    fn new() -> Result<Arc<Channel>> {
        let lib = ffi::rdmacm()?;
        // SAFETY: plain constructor.
        let ch = unsafe { lib.rdma_create_event_channel() };
        if ch.is_null() {
            let e = Error::last_os("rdma_create_event_channel");
            return Err(match e.errno() {
                Some(libc::ENODEV) | Some(libc::ENOENT) | Some(libc::ENOSYS) => Error::Verb {
                    verb: "rdma_create_event_channel",
                    errno: e.errno().unwrap_or(libc::ENODEV),
                    hint: Some(
                        "no /dev/infiniband/rdma_cm: load rdma_ucm (modprobe rdma_ucm); in Docker pass \
                         --privileged or --device=/dev/infiniband/rdma_cm"
                            .into(),
                    ),
                },
                _ => e,
            });
        }
        // SAFETY: ch is live; plain fcntl on its fd.
        unsafe {
            let fd = (*ch).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(Arc::new(Channel(Ptr(ch))))
    }

    /// The next event, copied and acknowledged, or a timeout. Each
    /// `rdma_get_cm_event` runs under `qp`, the lock of the id the channel
    /// serves: on REJECTED and CONNECT_RESPONSE librdmacm modifies the id's
    /// QP (`id->qp`), which that lock keeps from being destroyed meanwhile
    /// (issue 34 hole 4). It is not held while sleeping.
    fn next(&self, timeout: Duration, what: &str, qp: &QpSlot) -> Result<Event> {
        let lib = ffi::rdmacm()?;
        let deadline = crate::deadline::after(timeout);
        loop {
            let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
            let own = qp.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: live channel (non-blocking); ev is writable. The id's
            // QP, if any, is not destroyed while `own` is held.
            let rc = unsafe { lib.rdma_get_cm_event(self.0.0, &mut ev) };
            if rc == 0 && !ev.is_null() {
                // SAFETY: ev is a live event until acked; the private data
                // is valid for private_data_len bytes until then.
                let out = unsafe {
                    let e = &*ev;
                    let conn = e.param.conn;
                    let private_data = if conn.private_data.is_null() || conn.private_data_len == 0
                    {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(
                            conn.private_data as *const u8,
                            conn.private_data_len as usize,
                        )
                        .to_vec()
                    };
                    Event {
                        kind: e.event,
                        status: e.status,
                        id: Ptr(e.id),
                        private_data,
                        responder_resources: conn.responder_resources,
                        initiator_depth: conn.initiator_depth,
                    }
                };
                // SAFETY: acked once, right away, so destroying the id never blocks.
                unsafe { lib.rdma_ack_cm_event(ev) };
                return Ok(out);
            }
            let err = std::io::Error::last_os_error();
            drop(own);
            if err.kind() != std::io::ErrorKind::WouldBlock
                && err.kind() != std::io::ErrorKind::Interrupted
            {
                return Err(Error::verb(
                    "rdma_get_cm_event",
                    err.raw_os_error().unwrap_or(libc::EIO),
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: what.to_owned(),
                    after: timeout,
                    hint: Some(
                        "the peer did not answer: is it running and listening on that address?"
                            .into(),
                    ),
                });
            }
            let mut pfd = libc::pollfd {
                // SAFETY: live channel.
                fd: unsafe { (*self.0.0).fd },
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe {
                libc::poll(
                    &mut pfd,
                    1,
                    left.as_millis().clamp(1, i32::MAX as u128) as i32,
                )
            };
        }
    }
}

struct Event {
    kind: u32,
    status: i32,
    id: Ptr<sys::rdma_cm_id>,
    private_data: Vec<u8>,
    responder_resources: u8,
    initiator_depth: u8,
}

fn event_name(kind: u32) -> String {
    match ffi::rdmacm() {
        // SAFETY: rdma_event_str returns a static string.
        Ok(lib) => unsafe {
            let p = lib.rdma_event_str(kind);
            if p.is_null() {
                format!("event {kind}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        },
        Err(_) => format!("event {kind}"),
    }
}

pub(crate) struct CmIdInner {
    id: Ptr<sys::rdma_cm_id>,
    channel: std::sync::Mutex<Arc<Channel>>,
    connected: AtomicBool,
    /// The QP made on this id, if any: creating and destroying it happen
    /// under this lock, so clones of the id on several threads can never
    /// both create one, and a value only destroys the QP it created. Every
    /// librdmacm call that may touch `id->qp` (`rdma_disconnect`,
    /// `rdma_get_cm_event`, `rdma_connect`, `rdma_accept`) runs under it too.
    qp: QpSlot,
}

/// The lock of an id's QP (see [`CmIdInner`]).
type QpSlot = std::sync::Mutex<Option<Ptr<sys::ibv_qp>>>;

impl Drop for CmIdInner {
    fn drop(&mut self) {
        if let Ok(lib) = ffi::rdmacm() {
            if self.connected.load(Ordering::Acquire) {
                // SAFETY: live id.
                unsafe { lib.rdma_disconnect(self.id.0) };
            }
            // SAFETY: the id's QP (which holds an Arc to this) is gone and
            // its events were acked when read; destroyed once.
            unsafe { lib.rdma_destroy_id(self.id.0) };
        }
    }
}

impl CmIdInner {
    fn new(channel: Arc<Channel>) -> Result<Arc<CmIdInner>> {
        let lib = ffi::rdmacm()?;
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: live channel; id is writable.
        let rc = unsafe {
            lib.rdma_create_id(channel.0.0, &mut id, std::ptr::null_mut(), sys::RDMA_PS_TCP)
        };
        Error::check("rdma_create_id", rc)?;
        Ok(Arc::new(CmIdInner {
            id: Ptr(id),
            channel: std::sync::Mutex::new(channel),
            connected: AtomicBool::new(false),
            qp: std::sync::Mutex::new(None),
        }))
    }

    fn channel(&self) -> Arc<Channel> {
        self.channel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn expect(&self, want: u32, step: &str, timeout: Duration) -> Result<Event> {
        let ev = self.channel().next(timeout, step, &self.qp)?;
        if ev.kind != want {
            return Err(cm_error(step, want, &ev));
        }
        Ok(ev)
    }
}

fn cm_error(step: &str, want: u32, ev: &Event) -> Error {
    let hint = match ev.kind {
        sys::RDMA_CM_EVENT_REJECTED => Some(
            "the peer refused: nothing listens on that port (status 28 on iWARP/RoCE means no listener), \
             or it rejected the request"
                .to_owned(),
        ),
        sys::RDMA_CM_EVENT_UNREACHABLE => Some("the peer did not answer: check the address and route".into()),
        sys::RDMA_CM_EVENT_ADDR_ERROR => {
            Some("no RDMA device owns a route to that address: use an IP of an RDMA interface".into())
        }
        sys::RDMA_CM_EVENT_ROUTE_ERROR => Some("no route to the peer's address".into()),
        sys::RDMA_CM_EVENT_CONNECT_ERROR => Some("the connection failed: check both sides' QP settings".into()),
        _ => None,
    };
    Error::Cm {
        step: step.to_owned(),
        expected: static_event_name(want),
        got: event_name(ev.kind),
        status: ev.status,
        hint,
    }
}

fn static_event_name(kind: u32) -> &'static str {
    match kind {
        sys::RDMA_CM_EVENT_ADDR_RESOLVED => "RDMA_CM_EVENT_ADDR_RESOLVED",
        sys::RDMA_CM_EVENT_ROUTE_RESOLVED => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        sys::RDMA_CM_EVENT_CONNECT_REQUEST => "RDMA_CM_EVENT_CONNECT_REQUEST",
        sys::RDMA_CM_EVENT_ESTABLISHED => "RDMA_CM_EVENT_ESTABLISHED",
        sys::RDMA_CM_EVENT_DISCONNECTED => "RDMA_CM_EVENT_DISCONNECTED",
        _ => "an event",
    }
}

/// A `sockaddr_storage` holding `addr`.
fn to_sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

/// The socket address at `sa` (IPv4/IPv6), if any.
///
/// # Safety
/// `sa` must point to a sockaddr of at least the size its family implies.
unsafe fn from_sockaddr(sa: *const sys::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller's contract.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(s.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Connection parameters of [`CmId::connect`] and [`ConnectRequest::accept`].
#[derive(Debug, Clone)]
pub struct ConnParams {
    /// Bytes handed to the peer (at most 56 to fit every transport), e.g.
    /// [`crate::RemoteBuffer::to_bytes`].
    pub private_data: Vec<u8>,
    /// READs/atomics accepted from the peer; 255 = as many as the device allows.
    pub responder_resources: u8,
    /// READs/atomics issued to the peer; 255 = as many as the device allows.
    pub initiator_depth: u8,
    /// Transport retries (InfiniBand/RoCE; max 7).
    pub retry_count: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry_count: u8,
}

impl Default for ConnParams {
    fn default() -> Self {
        ConnParams {
            private_data: Vec::new(),
            responder_resources: 255,
            initiator_depth: 255,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

/// Largest private data carried by every transport (InfiniBand REQ: 56).
pub const MAX_PRIVATE_DATA: usize = 56;

impl ConnParams {
    fn raw(&self, qp: &QueuePair, resources: Option<(u8, u8)>) -> Result<sys::rdma_conn_param> {
        if self.private_data.len() > MAX_PRIVATE_DATA {
            return Err(Error::invalid(
                "rdma_connect",
                format!(
                    "{} bytes of private data, at most {MAX_PRIVATE_DATA}",
                    self.private_data.len()
                ),
            ));
        }
        let a = qp.context().attributes();
        let clamp = |want: u8, dev: u32| -> u8 {
            if want == 255 {
                dev.clamp(1, 16) as u8
            } else {
                want
            }
        };
        let (mut rr, mut id) = (
            clamp(self.responder_resources, a.max_qp_rd_atom()),
            clamp(self.initiator_depth, a.max_qp_init_rd_atom()),
        );
        if let Some((peer_rr, peer_id)) = resources {
            // Accepting: never promise more than the peer asked for.
            rr = rr.min(peer_id.max(1));
            id = id.min(peer_rr.max(1));
        }
        Ok(sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len() as u8,
            responder_resources: rr,
            initiator_depth: id,
            flow_control: 1,
            retry_count: self.retry_count.min(7),
            rnr_retry_count: self.rnr_retry_count.min(7),
            srq: 0,
            qp_num: 0,
        })
    }
}

/// A connection identifier: the active side of a connection, or one accepted
/// by a [`CmListener`]. Dropping it disconnects.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<CmIdInner>,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

impl CmId {
    /// Resolves the address and route to `dst` (optionally from the local
    /// address `src`, which picks the device), waiting at most `timeout`.
    pub fn resolve(dst: SocketAddr, src: Option<SocketAddr>, timeout: Duration) -> Result<CmId> {
        let lib = ffi::rdmacm()?;
        let inner = CmIdInner::new(Channel::new()?)?;
        let mut d = to_sockaddr(dst);
        let mut s = src.map(to_sockaddr);
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let sp = s
            .as_mut()
            .map_or(std::ptr::null_mut(), |s| s as *mut _ as *mut sys::sockaddr);
        // SAFETY: live id; the sockaddrs are valid for the call.
        let rc = unsafe {
            lib.rdma_resolve_addr(inner.id.0, sp, &mut d as *mut _ as *mut sys::sockaddr, ms)
        };
        Error::check("rdma_resolve_addr", rc)?;
        inner.expect(
            sys::RDMA_CM_EVENT_ADDR_RESOLVED,
            &format!("resolve address {dst}"),
            timeout,
        )?;
        // SAFETY: live id.
        let rc = unsafe { lib.rdma_resolve_route(inner.id.0, ms) };
        Error::check("rdma_resolve_route", rc)?;
        inner.expect(
            sys::RDMA_CM_EVENT_ROUTE_RESOLVED,
            &format!("resolve route to {dst}"),
            timeout,
        )?;
        Ok(CmId { inner })
    }

    /// The device the id is bound to (librdmacm's context; PDs and CQs for
    /// [`CmId::create_qp`] must come from it).
    pub fn context(&self) -> Result<Context> {
        // SAFETY: live id.
        let verbs = unsafe { (*self.inner.id.0).verbs };
        if verbs.is_null() {
            return Err(Error::invalid(
                "CmId::context",
                "the id is not bound to a device yet",
            ));
        }
        Context::borrowed(verbs, self.inner.clone())
    }

    /// The local port number.
    pub fn port(&self) -> u8 {
        // SAFETY: live id.
        unsafe { (*self.inner.id.0).port_num }
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: live id; the route holds a sockaddr union.
        unsafe { from_sockaddr(sys::inline::rdma_get_local_addr(self.inner.id.0)) }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: live id; the route holds a sockaddr union.
        unsafe { from_sockaddr(sys::inline::rdma_get_peer_addr(self.inner.id.0)) }
    }

    /// Creates the id's RC queue pair (`rdma_create_qp`). `pd` and the CQs
    /// must come from [`CmId::context`].
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QpCapabilities,
    ) -> Result<QueuePair> {
        let qp = QueuePair::create(pd, send_cq, recv_cq, caps, Some(&self.inner))?;
        qp.query_state()?;
        Ok(qp)
    }

    /// Connects (`rdma_connect`) and waits for ESTABLISHED; returns the
    /// peer's private data. `qp` must be this id's QP.
    pub fn connect(
        &self,
        qp: &QueuePair,
        params: &ConnParams,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.check_qp(qp)?;
        let lib = ffi::rdmacm()?;
        let mut p = params.raw(qp, None)?;
        let rc = {
            let _qp = self.inner.qp.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: live id with its QP (borrowed, and under the lock its
            // destruction takes); p and its private data live across the call.
            unsafe { lib.rdma_connect(self.inner.id.0, &mut p) }
        };
        Error::check("rdma_connect", rc)?;
        let step = format!(
            "connect to {}",
            self.peer_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        let ev = self
            .inner
            .expect(sys::RDMA_CM_EVENT_ESTABLISHED, &step, timeout)?;
        self.inner.connected.store(true, Ordering::Release);
        established(qp)?;
        Ok(ev.private_data)
    }

    /// Disconnects; the peer gets DISCONNECTED and both QPs go to ERR.
    pub fn disconnect(&self) -> Result<()> {
        if !self.inner.connected.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let lib = ffi::rdmacm()?;
        // rdma_disconnect moves `id->qp` to ERR (IB, RoCE) or SQD (iWARP):
        // under the lock that the QP's destruction takes, so that a clone's
        // QP dropped on another thread is never modified after it was
        // destroyed (issue 34 hole 4); a destroyed QP's pointer is null.
        let _qp = self.inner.qp.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: live id; its QP, if any, is live while the lock is held.
        let rc = unsafe { lib.rdma_disconnect(self.inner.id.0) };
        Error::check("rdma_disconnect", rc)
    }

    /// Waits for the peer to disconnect (DISCONNECTED event).
    pub fn wait_disconnect(&self, timeout: Duration) -> Result<()> {
        self.inner.expect(
            sys::RDMA_CM_EVENT_DISCONNECTED,
            "wait for the peer to disconnect",
            timeout,
        )?;
        self.inner.connected.store(false, Ordering::Release);
        Ok(())
    }

    fn check_qp(&self, qp: &QueuePair) -> Result<()> {
        // The id's QP as recorded under the lock that every write of the id's
        // `qp` field holds (a clone of the id may be creating or destroying
        // one on another thread): reading the field itself would race. Once
        // `qp` is found to be the id's, it stays so while borrowed: only its
        // owner's drop destroys it, and creating another is refused.
        let own = self.inner.qp.lock().unwrap_or_else(|e| e.into_inner());
        if own.map(|p| p.0) != Some(qp.as_raw()) {
            return Err(Error::invalid(
                "rdma_connect",
                "the QP was not created by this CM id (use CmId::create_qp)",
            ));
        }
        Ok(())
    }
}

/// After ESTABLISHED the CM has moved the QP to RTS; record it.
fn established(qp: &QueuePair) -> Result<()> {
    match qp.query_state() {
        Ok(QpState::Rts) => Ok(()),
        // Some providers report a stale state right after ESTABLISHED; the
        // CM guarantees RTS at this point.
        Ok(_) | Err(_) => {
            qp.set_state(QpState::Rts);
            Ok(())
        }
    }
}

/// A listening CM id.
pub struct CmListener {
    inner: Arc<CmIdInner>,
}

impl fmt::Debug for CmListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmListener")
            .field("addr", &self.local_addr())
            .finish()
    }
}

impl CmListener {
    /// Listens on `addr` (an IP of an RDMA interface, or the wildcard).
    pub fn bind(addr: SocketAddr) -> Result<CmListener> {
        let lib = ffi::rdmacm()?;
        let inner = CmIdInner::new(Channel::new()?)?;
        let mut a = to_sockaddr(addr);
        // SAFETY: live id; a is valid for the call.
        let rc = unsafe { lib.rdma_bind_addr(inner.id.0, &mut a as *mut _ as *mut sys::sockaddr) };
        Error::check("rdma_bind_addr", rc)?;
        // SAFETY: live, bound id.
        let rc = unsafe { lib.rdma_listen(inner.id.0, 16) };
        Error::check("rdma_listen", rc)?;
        Ok(CmListener { inner })
    }

    /// The bound address (with the port chosen when 0 was given).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: live id.
        unsafe { from_sockaddr(sys::inline::rdma_get_local_addr(self.inner.id.0)) }
    }

    /// Waits for a connection request.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest> {
        let step = format!(
            "listen on {}",
            self.local_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        let ev = self
            .inner
            .expect(sys::RDMA_CM_EVENT_CONNECT_REQUEST, &step, timeout)?;
        // The new id gets its own channel so its events do not mix with
        // other requests'.
        let channel = Channel::new()?;
        let lib = ffi::rdmacm()?;
        // SAFETY: ev.id is the new, live id of the request; channel is live.
        let rc = unsafe { lib.rdma_migrate_id(ev.id.0, channel.0.0) };
        let inner = Arc::new(CmIdInner {
            id: ev.id,
            channel: std::sync::Mutex::new(if rc == 0 {
                channel
            } else {
                self.inner.channel()
            }),
            connected: AtomicBool::new(false),
            qp: std::sync::Mutex::new(None),
        });
        Error::check("rdma_migrate_id", rc)?;
        Ok(ConnectRequest {
            id: CmId { inner },
            private_data: ev.private_data,
            responder_resources: ev.responder_resources,
            initiator_depth: ev.initiator_depth,
        })
    }
}

/// A pending connection request from a peer.
#[derive(Debug)]
pub struct ConnectRequest {
    id: CmId,
    private_data: Vec<u8>,
    responder_resources: u8,
    initiator_depth: u8,
}

impl ConnectRequest {
    /// The peer's private data (may be padded by the transport).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<IpAddr> {
        self.id.peer_addr().map(|a| a.ip())
    }

    /// The device the request arrived on.
    pub fn context(&self) -> Result<Context> {
        self.id.context()
    }

    /// Creates the QP for this connection (see [`CmId::create_qp`]).
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QpCapabilities,
    ) -> Result<QueuePair> {
        self.id.create_qp(pd, send_cq, recv_cq, caps)
    }

    /// Accepts with `qp` (made by [`ConnectRequest::create_qp`]) and waits
    /// for ESTABLISHED. Post receives before accepting if the peer sends at once.
    pub fn accept(self, qp: &QueuePair, params: &ConnParams, timeout: Duration) -> Result<CmId> {
        self.id.check_qp(qp)?;
        let lib = ffi::rdmacm()?;
        let mut p = params.raw(qp, Some((self.responder_resources, self.initiator_depth)))?;
        let rc = {
            let _qp = self.id.inner.qp.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: live id with its QP (borrowed, and under the lock its
            // destruction takes: rdma_accept modifies it); p lives across
            // the call.
            unsafe { lib.rdma_accept(self.id.inner.id.0, &mut p) }
        };
        Error::check("rdma_accept", rc)?;
        self.id.inner.expect(
            sys::RDMA_CM_EVENT_ESTABLISHED,
            "accept a connection",
            timeout,
        )?;
        self.id.inner.connected.store(true, Ordering::Release);
        established(qp)?;
        Ok(self.id)
    }

    /// Rejects the request.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        let lib = ffi::rdmacm()?;
        let len = u8::try_from(private_data.len())
            .map_err(|_| Error::invalid("rdma_reject", "private data longer than 255 bytes"))?;
        // SAFETY: live id; the data is valid for len bytes.
        let rc = unsafe { lib.rdma_reject(self.id.inner.id.0, private_data.as_ptr().cast(), len) };
        Error::check("rdma_reject", rc)
    }
}

/// `rdma_create_qp` on `id`, unless the id already has a QP; the QP's owner
/// then destroys it with [`destroy_qp`].
pub(crate) fn create_qp(
    id: &Arc<CmIdInner>,
    pd: &ProtectionDomain,
    init: &mut sys::ibv_qp_init_attr,
) -> Result<*mut sys::ibv_qp> {
    let lib = ffi::rdmacm()?;
    // SAFETY: live id.
    let verbs = unsafe { (*id.id.0).verbs };
    if verbs != pd.context().as_raw() {
        return Err(Error::invalid(
            "rdma_create_qp",
            "the PD is not from this CM id's device: allocate it from CmId::context()",
        ));
    }
    let mut slot = id.qp.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: live id; its qp field is only written under this lock.
    if slot.is_some() || !unsafe { (*id.id.0).qp }.is_null() {
        return Err(Error::invalid(
            "rdma_create_qp",
            "the CM id already has a QP (one QP per connection: drop it first)",
        ));
    }
    // SAFETY: live id and PD of its device; init is valid; the lock keeps
    // other clones of the id from creating or destroying meanwhile.
    let rc = unsafe { lib.rdma_create_qp(id.id.0, pd.as_raw(), init) };
    Error::check("rdma_create_qp", rc)?;
    // SAFETY: rdma_create_qp stored the QP in the id.
    let qp = unsafe { (*id.id.0).qp };
    *slot = Some(Ptr(qp));
    Ok(qp)
}

/// Destroys `qp`, the QP [`create_qp`] made on `id`; `false` when the device
/// refused (the QP then stays, as the id's). A QP other than the id's is
/// never destroyed through the id.
pub(crate) fn destroy_qp(id: &Arc<CmIdInner>, qp: *mut sys::ibv_qp) -> bool {
    let Ok(lib) = ffi::verbs() else { return false };
    let mut slot = id.qp.lock().unwrap_or_else(|e| e.into_inner());
    if slot.map(|p| p.0) != Some(qp) {
        return false;
    }
    // rdma_destroy_qp returns nothing; destroying through libibverbs gives
    // the result, and the id's pointer is cleared only on success.
    // SAFETY: the id's live QP, destroyed once (the slot is cleared below).
    let rc = unsafe { lib.ibv_destroy_qp(qp) };
    if rc != 0 {
        return false;
    }
    // SAFETY: live id; its qp field is only written under this lock.
    unsafe { (*id.id.0).qp = std::ptr::null_mut() };
    *slot = None;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in ["10.99.1.2:7471", "[fe80::1]:5", "[::ffff:10.0.0.1]:80"] {
            let sa: SocketAddr = a.parse().unwrap();
            let ss = to_sockaddr(sa);
            // SAFETY: ss holds a sockaddr of its family.
            let back = unsafe { from_sockaddr(&ss as *const _ as *const sys::sockaddr) };
            assert_eq!(back, Some(sa));
        }
    }

    #[test]
    fn private_data_limit() {
        let p = ConnParams {
            private_data: vec![0; 57],
            ..Default::default()
        };
        assert_eq!(p.private_data.len(), MAX_PRIVATE_DATA + 1);
    }
}
