//! Downloads the host does not wait for: a copy to page-locked host
//! memory queued on the stream like a launch, read once the stream has
//! reached it. What a decode loop needs to queue the next step before the
//! last one's tokens are read.

use crate::{Element, Error, Result, Stream};
use cudarc::driver::{CudaEvent, PinnedHostSlice};

/// Page-locked host memory that [`Stream::download_later`] copies into,
/// with the event recorded after the last such copy.
pub struct Landing<T> {
    slice: PinnedHostSlice<T>,
    landed: CudaEvent,
}

impl<T: Element> Landing<T> {
    /// The elements the last copy queued into it brought (waits for it).
    pub fn wait(&self) -> Result<&[T]> {
        (self.landed.synchronize()).map_err(|e| Error::driver("cuEventSynchronize", e))?;
        // The slice's own event is never recorded (the runtime tracks no
        // events): `landed` is what the copy signals.
        self.slice
            .as_slice()
            .map_err(|e| Error::driver("cuEventSynchronize", e))
    }

    /// Elements it holds.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// The memory to copy into on `stream`, and a record of the copy's end
    /// once it is queued.
    pub(crate) fn target(&mut self) -> (&mut PinnedHostSlice<T>, &CudaEvent) {
        (&mut self.slice, &self.landed)
    }
}

impl<T> Drop for Landing<T> {
    /// Waits for a copy still queued into the memory before it is freed.
    fn drop(&mut self) {
        let _ = self.landed.synchronize();
    }
}

impl Stream {
    /// Page-locked host memory for `len` elements of `T` (cached for the
    /// host's reads: not write-combined).
    pub fn landing<T: Element>(&self, len: usize) -> Result<Landing<T>> {
        let ctx = self.device().context();
        // SAFETY: the memory is read only through `Landing::wait`, after a
        // copy into it of its whole length (`download_later` checks the
        // length); elements are plain data valid as any bits.
        let slice = unsafe { ctx.alloc_pinned_with_flags::<T>(len, 0) }
            .map_err(|e| Error::allocation(len * std::mem::size_of::<T>(), e))?;
        let flags = cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let landed = ctx
            .new_event(Some(flags))
            .map_err(|e| Error::driver("cuEventCreate", e))?;
        Ok(Landing { slice, landed })
    }
}
