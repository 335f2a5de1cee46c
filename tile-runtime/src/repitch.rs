//! Copies of read-only operands into rows 16 bytes apart.
//!
//! TMA reads only tensors whose strides are multiples of 16 bytes; an LM
//! head's `[768, 50257]` bf16 weights have rows 100514 bytes apart. When a
//! variant reads such a tensor through TMA alone (`Variant::tma_only`),
//! the launcher copies it, with one `cuMemcpy2DAsync` on the launch's
//! stream, into the stream's scratch buffer with rows a multiple of 16
//! bytes apart, and launches on the copy: a copy that costs two passes
//! over the tensor, against a kernel that would otherwise read it an
//! element at a time. The buffer stays with the stream for the next
//! launch; without memory for it, the launch takes a variant that needs
//! no copy.

use crate::DType;
use crate::{Error, Result};
use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::{Arc, Mutex, MutexGuard};

/// Alignment of each copy in the scratch buffer (TMA needs 16 bytes).
const COPY_ALIGN: usize = 256;

/// Rows of a tensor evenly spaced in memory, as a 2-D copy sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rows {
    /// Rows (every dimension but the last), elements per row, elements between rows.
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) pitch: usize,
}

impl Rows {
    /// The rows of a tensor of `shape` and `strides` (elements) whose last
    /// dimension is contiguous and whose other dimensions stack its rows at
    /// one pitch; `None` otherwise, or for fewer than two dimensions.
    pub(crate) fn of(shape: &[usize], strides: &[usize]) -> Option<Rows> {
        let last = shape.len().checked_sub(1).filter(|&l| l > 0)?;
        let pitch = strides[last - 1];
        let stacked = (0..last - 1).all(|d| shape[d] == 1 || strides[d] == strides[d + 1] * shape[d + 1]);
        (strides[last] == 1 && pitch >= shape[last] && stacked).then(|| Rows {
            rows: shape[..last].iter().product(),
            cols: shape[last],
            pitch,
        })
    }

    /// The copy's pitch: the row length rounded up to 16 bytes.
    pub(crate) fn aligned_pitch(&self, dtype: DType) -> usize {
        self.cols.next_multiple_of(16 / dtype.bytes())
    }

    /// The copy's strides for a tensor of `shape` with these rows.
    pub(crate) fn aligned_strides(&self, shape: &[usize], dtype: DType) -> Vec<usize> {
        let mut strides = vec![1; shape.len()];
        let mut s = self.aligned_pitch(dtype);
        for d in (0..shape.len() - 1).rev() {
            strides[d] = s;
            s *= shape[d];
        }
        strides
    }

    fn aligned_bytes(&self, dtype: DType) -> usize {
        self.rows * self.aligned_pitch(dtype) * dtype.bytes()
    }
}

/// A tensor to copy: its address, element type and rows.
pub(crate) struct Source {
    pub(crate) ptr: u64,
    pub(crate) dtype: DType,
    pub(crate) rows: Rows,
}

/// A stream's scratch buffer for the copies, grown as launches need.
#[derive(Clone, Default)]
pub(crate) struct Scratch(Arc<Mutex<Option<CudaSlice<u8>>>>);

/// The scratch buffer, held while the launch that reads it is queued.
pub(crate) type Held<'a> = MutexGuard<'a, Option<CudaSlice<u8>>>;

impl Scratch {
    /// Copies each of `sources` into the scratch buffer (queued on
    /// `stream`), returning the buffer, held, and each copy's address.
    /// Launches that read a copy are queued on the same stream while the
    /// buffer is held, so that the next launch's copies follow them.
    pub(crate) fn copy(&self, stream: &Arc<CudaStream>, sources: &[Source]) -> Result<(Held<'_>, Vec<u64>)> {
        let mut offsets = Vec::new();
        let mut total = 0;
        for s in sources {
            offsets.push(total);
            total += s.rows.aligned_bytes(s.dtype).next_multiple_of(COPY_ALIGN);
        }
        let mut held = self.0.lock().expect("scratch lock");
        if held.as_ref().is_none_or(|b| b.len() < total) {
            // The old buffer is freed in stream order, after the launches reading it.
            *held = None;
            *held = Some(
                stream
                    .alloc_zeros::<u8>(total)
                    .map_err(|e| Error::allocation(total, e))?,
            );
        }
        let base = {
            let buffer = held.as_ref().expect("allocated above");
            buffer.device_ptr(stream).0
        };
        let mut addresses = Vec::new();
        for (s, offset) in sources.iter().zip(offsets) {
            let dst = base + offset as u64;
            let eb = s.dtype.bytes();
            let copy = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: s.ptr,
                srcArray: std::ptr::null_mut(),
                srcPitch: s.rows.pitch * eb,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: dst,
                dstArray: std::ptr::null_mut(),
                dstPitch: s.rows.aligned_pitch(s.dtype) * eb,
                WidthInBytes: s.rows.cols * eb,
                Height: s.rows.rows,
            };
            // SAFETY: both regions are device memory of this context: the
            // source spans `rows` rows of `pitch` elements (the launcher
            // checked the tensor's extent), the destination was allocated
            // above with room for `rows` rows of the aligned pitch.
            unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }
                .result()
                .map_err(|e| Error::driver("cuMemcpy2DAsync", e))?;
            addresses.push(dst);
        }
        Ok((held, addresses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_stack_every_dimension_but_the_last_at_one_pitch() {
        // An LM head's weights in `matmul` form: 768 rows of 50257.
        let lm = Rows::of(&[768, 50257], &[50257, 1]).expect("rows");
        assert_eq!((lm.rows, lm.cols, lm.pitch), (768, 50257, 50257));
        assert_eq!(lm.aligned_pitch(DType::BF16), 50264);
        assert_eq!(lm.aligned_pitch(DType::F32), 50260);
        assert_eq!(lm.aligned_strides(&[768, 50257], DType::BF16), [50264, 1]);
        // A batch of matrices, rows padded: still one pitch.
        let batch = Rows::of(&[3, 5, 7], &[45, 9, 1]).expect("rows");
        assert_eq!((batch.rows, batch.cols, batch.pitch), (15, 7, 9));
        assert_eq!(batch.aligned_strides(&[3, 5, 7], DType::F32), [40, 8, 1]);
        // Not rows: a transposed view, matrices apart from their rows' pitch, a vector.
        assert_eq!(Rows::of(&[4, 6], &[1, 4]), None);
        assert_eq!(Rows::of(&[3, 5, 7], &[50, 9, 1]), None);
        assert_eq!(Rows::of(&[7], &[1]), None);
    }
}
