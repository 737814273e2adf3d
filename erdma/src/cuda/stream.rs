//! Streams and events.

use std::ffi::{c_uint, c_void};
use std::fmt;

use cudarc::driver::sys::{CUevent, CUstream};

use super::device::Device;
use super::driver::{HostFn, check, driver};
use super::error::{CUDA_ERROR_NOT_READY, CUDA_SUCCESS, Result};
use super::graph::Graph;

const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
const CU_EVENT_DISABLE_TIMING: c_uint = 2;

/// A CUDA stream on one [`Device`]. Work enqueued on it runs in order, asynchronously to the
/// host. Created non-blocking (like nccl-tests' `cudaStreamNonBlocking`) by
/// [`Stream::new`], or the legacy NULL stream by [`Stream::null`].
pub struct Stream {
    device: Device,
    raw: CUstream,
    owned: bool,
}

// SAFETY: CUDA stream handles may be used from any thread; every call binds the context.
unsafe impl Send for Stream {}
// SAFETY: the driver serializes concurrent enqueues on one stream.
unsafe impl Sync for Stream {}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.device.ordinal())
            .field("null", &self.raw.is_null())
            .finish()
    }
}

/// How a capture treats CUDA calls from other threads (`CUstreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureMode {
    /// Unsafe API calls from any thread fail during the capture.
    Global = 0,
    /// Only this thread's unsafe API calls fail (nccl-tests with several threads).
    ThreadLocal = 1,
    /// No restriction.
    Relaxed = 2,
}

impl Stream {
    /// Creates a non-blocking stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        device.bind()?;
        let d = driver()?;
        let mut raw: CUstream = std::ptr::null_mut();
        // SAFETY: the context is current; the driver writes one stream handle.
        check("cuStreamCreate", unsafe {
            (d.cuStreamCreate)(&mut raw, CU_STREAM_NON_BLOCKING)
        })?;
        Ok(Stream {
            device: device.clone(),
            raw,
            owned: true,
        })
    }

    /// The legacy default (NULL) stream of `device` (nccl-tests `-y 1`). It synchronizes with
    /// all blocking streams and cannot be captured into a graph.
    pub fn null(device: &Device) -> Stream {
        Stream {
            device: device.clone(),
            raw: std::ptr::null_mut(),
            owned: false,
        }
    }

    /// Wraps a stream created elsewhere (e.g. by another library) without taking ownership.
    ///
    /// # Safety
    /// `raw` must be a stream of `device`'s primary context (or NULL) that stays valid for as
    /// long as the returned value and anything enqueued through it are in use.
    pub unsafe fn from_raw(device: &Device, raw: CUstream) -> Stream {
        Stream {
            device: device.clone(),
            raw,
            owned: false,
        }
    }

    /// The GPU this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The raw handle, for NCCL and other libraries. Do not destroy it.
    pub fn as_raw(&self) -> CUstream {
        self.raw
    }

    /// Whether this is the NULL stream.
    pub fn is_null(&self) -> bool {
        self.raw.is_null()
    }

    /// `Ok(true)` once all enqueued work has finished, `Ok(false)` while it runs; an error
    /// when the work failed (`cuStreamQuery`).
    pub fn query(&self) -> Result<bool> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: the stream belongs to the current context and is alive.
        let rc = unsafe { (d.cuStreamQuery)(self.raw) };
        match rc {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            _ => check("cuStreamQuery", rc).map(|_| false),
        }
    }

    /// Blocks until all enqueued work has finished. Unbounded: to wait with a deadline
    /// poll [`Stream::query`] (or use `nccl::wait_all`).
    pub fn synchronize(&self) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: the stream belongs to the current context and is alive.
        check("cuStreamSynchronize", unsafe {
            (d.cuStreamSynchronize)(self.raw)
        })
    }

    /// Makes later work on this stream wait for `event` (recorded on any stream).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: both handles are alive; flags 0 = CU_EVENT_WAIT_DEFAULT.
        check("cuStreamWaitEvent", unsafe {
            (d.cuStreamWaitEvent)(self.raw, event.raw, 0)
        })
    }

    /// Starts capturing the work enqueued on this stream into a graph instead of running it.
    /// Not possible on the NULL stream.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: the stream is alive; mode is a valid CUstreamCaptureMode.
        check("cuStreamBeginCapture", unsafe {
            (d.cuStreamBeginCapture_v2)(self.raw, mode as c_uint)
        })
    }

    /// Ends the capture started by [`Stream::begin_capture`] and returns the captured graph.
    pub fn end_capture(&self) -> Result<Graph> {
        self.device.bind()?;
        let d = driver()?;
        let mut graph = std::ptr::null_mut();
        // SAFETY: the stream is alive; the driver writes one graph handle.
        check("cuStreamEndCapture", unsafe {
            (d.cuStreamEndCapture)(self.raw, &mut graph)
        })?;
        Ok(Graph::from_raw(&self.device, graph))
    }

    /// Whether a capture is active on this stream.
    pub fn is_capturing(&self) -> Result<bool> {
        self.device.bind()?;
        let d = driver()?;
        let mut status: c_uint = 0;
        // SAFETY: the driver writes one CUstreamCaptureStatus (an int-sized enum).
        check("cuStreamIsCapturing", unsafe {
            (d.cuStreamIsCapturing)(self.raw, &mut status)
        })?;
        Ok(status == 1)
    }

    /// Enqueues a host function: it runs on a driver thread once earlier work finished, and
    /// later work waits for it to return. It must not call CUDA.
    ///
    /// # Safety
    /// `data` must stay valid until `f` has run, and `f` must be safe to call with it from
    /// another thread.
    pub unsafe fn launch_host_func(
        &self,
        f: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        let f: HostFn = Some(f);
        // SAFETY: the caller guarantees `data` outlives the callback.
        check("cuLaunchHostFunc", unsafe {
            (d.cuLaunchHostFunc)(self.raw, f, data)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if self.device.bind().is_err() {
            return;
        }
        if let Ok(d) = driver() {
            // SAFETY: this value created the stream; pending work still completes (the
            // driver releases the stream once it is idle).
            unsafe { (d.cuStreamDestroy_v2)(self.raw) };
        }
    }
}

/// A CUDA event: a marker in a stream's work, for timing and cross-stream ordering.
pub struct Event {
    device: Device,
    raw: CUevent,
}

// SAFETY: event handles may be used from any thread; every call binds the context.
unsafe impl Send for Event {}
// SAFETY: the driver serializes concurrent uses of one event.
unsafe impl Sync for Event {}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl Event {
    /// Creates an event. `timing` enables [`Event::elapsed_ms`]; `blocking` makes
    /// [`Event::synchronize`] sleep instead of spin.
    pub fn new(device: &Device, timing: bool, blocking: bool) -> Result<Event> {
        device.bind()?;
        let d = driver()?;
        let mut flags = 0;
        if !timing {
            flags |= CU_EVENT_DISABLE_TIMING;
        }
        if blocking {
            flags |= CU_EVENT_BLOCKING_SYNC;
        }
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: the context is current; the driver writes one event handle.
        check("cuEventCreate", unsafe {
            (d.cuEventCreate)(&mut raw, flags)
        })?;
        Ok(Event {
            device: device.clone(),
            raw,
        })
    }

    /// Records the current end of `stream`'s work into this event.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: both handles are alive.
        check("cuEventRecord", unsafe {
            (d.cuEventRecord)(self.raw, stream.raw)
        })
    }

    /// `Ok(true)` once the recorded work finished.
    pub fn query(&self) -> Result<bool> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: the event is alive.
        let rc = unsafe { (d.cuEventQuery)(self.raw) };
        match rc {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            _ => check("cuEventQuery", rc).map(|_| false),
        }
    }

    /// Blocks until the recorded work finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: the event is alive.
        check("cuEventSynchronize", unsafe {
            (d.cuEventSynchronize)(self.raw)
        })
    }

    /// Milliseconds between `self` and `end` (both recorded with timing enabled, both done).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.device.bind()?;
        let d = driver()?;
        let mut ms = 0f32;
        // SAFETY: both events are alive; the driver writes one float.
        check("cuEventElapsedTime", unsafe {
            (d.event_elapsed_time)(&mut ms, self.raw, end.raw)
        })?;
        Ok(ms)
    }

    /// The raw handle. Do not destroy it.
    pub fn as_raw(&self) -> CUevent {
        self.raw
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.device.bind().is_err() {
            return;
        }
        if let Ok(d) = driver() {
            // SAFETY: this value created the event; destroying a pending event is allowed.
            unsafe { (d.cuEventDestroy_v2)(self.raw) };
        }
    }
}
