//! Tensors in GPU memory: a buffer, a shape and element strides.

use crate::arg::TensorView;
use crate::device::Stream;
use crate::host::{HostTensor, contiguous_strides, span};
use crate::{DType, Element, Error, Landing, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use std::sync::Arc;

/// An n-dimensional array on a GPU.
pub struct Tensor<T: Element> {
    buf: CudaSlice<T>,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl<T: Element> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor<{}>{:?} strides {:?}", T::DTYPE, self.shape, self.strides)
    }
}

impl<T: Element> Tensor<T> {
    /// The size of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The distance, in elements, between neighbours along each dimension.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements (a dimension of size 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying `cudarc` buffer, for interoperating with CUDA libraries
    /// (cuBLAS, NCCL): elements in row-major order with [`Tensor::strides`].
    pub fn as_cudarc(&self) -> &CudaSlice<T> {
        &self.buf
    }

    /// The underlying `cudarc` buffer, writable.
    pub fn as_cudarc_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.buf
    }

    /// A tensor of `buf` with `shape` and `strides`, which the caller has checked.
    pub(crate) fn from_parts(buf: CudaSlice<T>, shape: &[usize], strides: &[usize]) -> Tensor<T> {
        Tensor {
            buf,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }

    /// The underlying buffer, the tensor given up.
    pub(crate) fn into_cudarc(self) -> CudaSlice<T> {
        self.buf
    }

    /// The same buffer seen with another contiguous shape of equal size.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Tensor<T>> {
        self.reshape_in_place(shape)?;
        Ok(self)
    }

    /// [`Tensor::reshape`] of a tensor held elsewhere (a buffer kept across
    /// steps): the same buffer, its shape changed in place.
    pub fn reshape_in_place(&mut self, shape: &[usize]) -> Result<()> {
        crate::host::check_reshape(&self.shape, &self.strides, shape)?;
        self.strides = contiguous_strides(shape);
        self.shape = shape.to_vec();
        Ok(())
    }
}

impl Stream {
    /// Copies a host tensor to the GPU, keeping its strides.
    pub fn upload<T: Element>(&self, host: &HostTensor<T>) -> Result<Tensor<T>> {
        let storage = &host.storage()[..span(host.shape(), host.strides())?.max(1).min(host.storage().len())];
        Ok(Tensor {
            buf: self.copied(storage)?,
            shape: host.shape().to_vec(),
            strides: host.strides().to_vec(),
        })
    }

    /// Copies `data` (row-major) to a new contiguous GPU tensor of `shape`.
    pub fn upload_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<Tensor<T>> {
        let n = crate::host::elements(shape)?;
        if n != data.len() {
            return Err(Error::Shape(format!(
                "shape {shape:?} holds {n} elements but the data has {}",
                data.len()
            )));
        }
        Ok(Tensor {
            buf: self.copied(data)?,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
        })
    }

    /// A new buffer of `n` elements, its contents not yet written, or
    /// `Error::OutOfMemory`.
    fn alloc<T: Element>(&self, n: usize) -> Result<CudaSlice<T>> {
        // SAFETY: `copied` and `zeros`, the callers, write the whole buffer
        // on the stream before anything can read it.
        unsafe { self.cuda().alloc::<T>(n) }.map_err(|e| Error::allocation(n * std::mem::size_of::<T>(), e))
    }

    /// A new buffer holding a copy of `data`.
    fn copied<T: Element>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        let mut buf = self.alloc(data.len())?;
        (self.cuda().memcpy_htod(data, &mut buf)).map_err(|e| Error::driver("cuMemcpyHtoDAsync", e))?;
        Ok(buf)
    }

    /// Copies `data` (row-major) into the contiguous tensor `t`, in place:
    /// its buffer keeps its address.
    pub fn write<T: Element>(&self, t: &mut Tensor<T>, data: &[T]) -> Result<()> {
        self.check_context("Stream::write", "t", t)?;
        if t.len() != data.len() || t.strides != contiguous_strides(&t.shape) {
            return Err(Error::Shape(format!(
                "can't write {} elements into a tensor of shape {:?} (strides {:?})",
                data.len(),
                t.shape,
                t.strides
            )));
        }
        (self.cuda().memcpy_htod(data, &mut t.buf)).map_err(|e| Error::driver("cuMemcpyHtoDAsync", e))
    }

    /// A new contiguous tensor filled with `value`.
    pub fn full<T: Element>(&self, shape: &[usize], value: T) -> Result<Tensor<T>> {
        let n = crate::host::elements(shape)?;
        self.upload_slice(&vec![value; n], shape)
    }

    /// A new contiguous tensor of zeros, allocated and cleared on the
    /// stream: the host does not wait for the GPU (where `full` uploads).
    pub fn zeros<T: Element>(&self, shape: &[usize]) -> Result<Tensor<T>> {
        let n = crate::host::elements(shape)?;
        let mut buf = self.alloc(n)?;
        (self.cuda().memset_zeros(&mut buf)).map_err(|e| Error::driver("cuMemsetD8Async", e))?;
        Ok(Tensor {
            buf,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
        })
    }

    /// `Error::WrongContext` unless tensor `param` of stream operation `op`
    /// was allocated in this stream's context: the rule a launch follows,
    /// also where the driver would copy between two `Device`s of one GPU.
    fn check_context<T: Element>(&self, op: &'static str, param: &'static str, t: &Tensor<T>) -> Result<()> {
        if Arc::ptr_eq(t.context(), self.device().context()) {
            return Ok(());
        }
        Err(Error::WrongContext { kernel: op, param })
    }

    /// Copies `src` into `dst` on the GPU (both contiguous, same shape,
    /// both of this stream's device).
    pub fn copy<T: Element>(&self, src: &Tensor<T>, dst: &mut Tensor<T>) -> Result<()> {
        self.check_context("Stream::copy", "src", src)?;
        self.check_context("Stream::copy", "dst", dst)?;
        let contiguous = |t: &Tensor<T>| t.strides == contiguous_strides(&t.shape);
        if src.shape != dst.shape || !contiguous(src) || !contiguous(dst) {
            return Err(Error::Shape(format!(
                "copy needs two contiguous tensors of one shape, got {:?} and {:?}",
                src.shape, dst.shape
            )));
        }
        self.cuda()
            .memcpy_dtod(&src.buf, &mut dst.buf)
            .map_err(|e| Error::driver("cuMemcpyDtoD", e))
    }

    /// Queues a copy of the contiguous `t` into `into` (of `t`'s length)
    /// and returns at once, where [`Stream::download`] waits for the
    /// stream; [`Landing::wait`] reads it once the stream gets there.
    pub fn download_later<T: Element>(&self, t: &Tensor<T>, into: &mut Landing<T>) -> Result<()> {
        self.check_context("Stream::download_later", "t", t)?;
        if t.len() != into.len() || t.strides != contiguous_strides(&t.shape) {
            return Err(Error::Shape(format!(
                "can't download a tensor of shape {:?} (strides {:?}) into a landing of {} elements",
                t.shape,
                t.strides,
                into.len()
            )));
        }
        let (slice, landed) = into.target();
        (self.cuda().memcpy_dtoh(&t.buf, slice)).map_err(|e| Error::driver("cuMemcpyDtoHAsync", e))?;
        landed
            .record(self.cuda())
            .map_err(|e| Error::driver("cuEventRecord", e))
    }

    /// Copies a GPU tensor of this stream's device back (waits for the
    /// stream).
    pub fn download<T: Element>(&self, t: &Tensor<T>) -> Result<HostTensor<T>> {
        self.check_context("Stream::download", "t", t)?;
        let data = self
            .cuda()
            .clone_dtoh(&t.buf)
            .map_err(|e| Error::driver("cuMemcpyDtoH", e))?;
        self.synchronize()?;
        HostTensor::from_vec_strided(data, &t.shape, &t.strides)
    }
}

/// A GPU tensor argument with its element type erased, as the launcher
/// sees it: its view, context and device address.
pub trait TensorArg: TensorView {
    /// The CUDA context the buffer was allocated in, which must be the
    /// launch stream's.
    fn context(&self) -> &Arc<CudaContext>;
    /// The device address, for reading on `stream`.
    fn ptr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>);
    /// The device address, for writing on `stream`.
    fn ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>);
}

impl<T: Element> TensorView for Tensor<T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn strides(&self) -> &[usize] {
        &self.strides
    }
}

impl<T: Element> TensorArg for Tensor<T> {
    fn context(&self) -> &Arc<CudaContext> {
        self.buf.context()
    }
    fn ptr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        self.buf.device_ptr(stream)
    }
    fn ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        self.buf.device_ptr_mut(stream)
    }
}
