//! CUDA graphs: the work a closure queues on a stream, recorded once and
//! replayed with one launch, so that a step of many small kernels costs
//! the host one call (what a decode step needs: its launches, not its
//! arithmetic, bound it otherwise).

use crate::{Error, Result, Stream};
use cudarc::driver::{CudaGraph, sys};

/// Work recorded from a stream ([`Stream::capture`]), replayed on it with
/// [`Stream::replay`]. Its kernels read and write the buffers they were
/// recorded with, at the same addresses; tensors it allocated and freed
/// while recorded come from the graph's own memory.
pub struct Graph(CudaGraph);

// SAFETY: a CUDA graph may be used from any thread, one at a time; `Graph`
// is only reached through `&` for replay, which the driver serialises per
// stream, and through `&mut`/ownership otherwise.
unsafe impl Send for Graph {}
// SAFETY: as above: replaying from two threads at once launches the
// executable graph twice on one stream, which the driver orders.
unsafe impl Sync for Graph {}

impl Stream {
    /// Records what `work` queues on this stream into a graph, without
    /// running it. `work` must queue only stream work: launches, stream
    /// allocations and frees, device-to-device copies (no upload, download
    /// or synchronisation, and no kernel or configuration used for the
    /// first time: run the same work once beforehand). An error of
    /// `work` ends the recording and is returned.
    pub fn capture<E: From<Error>>(
        &self,
        work: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Graph, E> {
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        (self.cuda().begin_capture(mode)).map_err(|e| Error::driver("cuStreamBeginCapture", e))?;
        let worked = work();
        let ended = self.cuda().end_capture(sys::CUgraphInstantiate_flags(0));
        worked?;
        match ended {
            Ok(Some(graph)) => Ok(Graph(graph)),
            Ok(None) => Err(Error::Driver {
                call: "cuStreamEndCapture",
                message: "nothing was recorded".into(),
            }
            .into()),
            Err(e) => Err(Error::driver("cuStreamEndCapture", e).into()),
        }
    }

    /// Queues `graph`'s work on this stream (the stream it was recorded on).
    pub fn replay(&self, graph: &Graph) -> Result<()> {
        graph.0.launch().map_err(|e| Error::driver("cuGraphLaunch", e))
    }
}
