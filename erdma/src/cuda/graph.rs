//! CUDA graphs: work captured once from a stream and replayed many times (nccl-tests `-G`).

use std::fmt;

use cudarc::driver::sys::{CUgraph, CUgraphExec};

use super::device::Device;
use super::driver::{check, driver};
use super::error::Result;
use super::stream::Stream;

/// A captured graph, from [`Stream::end_capture`]. Instantiate it to run it.
pub struct Graph {
    device: Device,
    raw: CUgraph,
}

// SAFETY: graph handles are plain driver objects usable from any thread.
// Not Sync: CUDA requires the calls on one graph object to be serialised
// (instantiate reads the graph), which `&self` methods on several threads
// would not be.
unsafe impl Send for Graph {}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl Graph {
    pub(crate) fn from_raw(device: &Device, raw: CUgraph) -> Graph {
        Graph {
            device: device.clone(),
            raw,
        }
    }

    /// Instantiates the graph into an executable one (`cuGraphInstantiateWithFlags`, flags 0).
    pub fn instantiate(&self) -> Result<GraphExec> {
        self.device.bind()?;
        let d = driver()?;
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph is alive; the driver writes one executable-graph handle.
        check("cuGraphInstantiateWithFlags", unsafe {
            (d.cuGraphInstantiateWithFlags)(&mut exec, self.raw, 0)
        })?;
        Ok(GraphExec {
            device: self.device.clone(),
            raw: exec,
        })
    }

    /// The raw handle. Do not destroy it.
    pub fn as_raw(&self) -> CUgraph {
        self.raw
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.device.bind().is_err() {
            return;
        }
        if let Ok(d) = driver() {
            // SAFETY: this value owns the graph; executable graphs made from it are independent.
            unsafe { (d.cuGraphDestroy)(self.raw) };
        }
    }
}

/// An executable graph, launched as a single unit of work on a stream.
pub struct GraphExec {
    device: Device,
    raw: CUgraphExec,
}

// SAFETY: executable-graph handles are plain driver objects usable from any thread.
// Not Sync: CUDA requires the calls on one executable graph (launch, upload)
// to be serialised, which `&self` methods on several threads would not be.
unsafe impl Send for GraphExec {}

impl fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphExec")
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl GraphExec {
    /// Enqueues one replay of the captured work on `stream`.
    ///
    /// # Safety
    /// The captured work refers to memory by address: every buffer (and NCCL communicator)
    /// used while capturing must still be alive, and not used concurrently by other work,
    /// until this replay has completed.
    pub unsafe fn launch(&self, stream: &Stream) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: both handles are alive; the caller vouches for the captured memory.
        check("cuGraphLaunch", unsafe {
            (d.cuGraphLaunch)(self.raw, stream.as_raw())
        })
    }

    /// Uploads the graph to the GPU ahead of the first launch, so that launch is not slower.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        self.device.bind()?;
        let d = driver()?;
        // SAFETY: both handles are alive; upload runs no captured work.
        check("cuGraphUpload", unsafe {
            (d.cuGraphUpload)(self.raw, stream.as_raw())
        })
    }

    /// The raw handle. Do not destroy it.
    pub fn as_raw(&self) -> CUgraphExec {
        self.raw
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if self.device.bind().is_err() {
            return;
        }
        if let Ok(d) = driver() {
            // SAFETY: this value owns the executable graph; a running launch completes first.
            unsafe { (d.cuGraphExecDestroy)(self.raw) };
        }
    }
}
