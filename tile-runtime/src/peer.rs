//! Peer access: kernels on one GPU reading and writing another GPU's memory
//! over NVLink (or PCIe), which collectives written as kernels exchange
//! data through (`signal` and `wait` order the two GPUs' accesses).

use crate::device::Stream;
use crate::tensor::Tensor;
use crate::{Element, Error, Result};
use cudarc::driver::sys::{self, CUresult};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

impl Stream {
    /// Whether kernels on this stream's GPU can address `peer`'s GPU's
    /// memory (false for the same GPU).
    pub fn can_access_peer(&self, peer: &Stream) -> Result<bool> {
        let (on, other) = (self.device().context(), peer.device().context());
        if on.cu_device() == other.cu_device() {
            return Ok(false);
        }
        let mut can = 0;
        // SAFETY: an out pointer to a local and two valid device handles.
        let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, on.cu_device(), other.cu_device()) };
        check("cuDeviceCanAccessPeer", r)?;
        Ok(can == 1)
    }

    /// Lets kernels on this stream's GPU address `peer`'s GPU's memory
    /// (once for the pair; again does nothing): the peer's context, and
    /// the peer's default memory pool, where its tensors are allocated
    /// when the driver has stream-ordered allocation.
    pub fn enable_peer_access(&self, peer: &Stream) -> Result<()> {
        if !self.can_access_peer(peer)? {
            return Err(Error::Shape(format!(
                "{} can't address the memory of {} (no peer access between them)",
                self.device().name(),
                peer.device().name()
            )));
        }
        let ctx = self.device().context();
        ctx.bind_to_thread().map_err(|e| Error::driver("cuCtxSetCurrent", e))?;
        let other = peer.device().context();
        // SAFETY: this device's context is current and `peer`'s is alive.
        match unsafe { sys::cuCtxEnablePeerAccess(other.cu_ctx(), 0) } {
            CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
            r => check("cuCtxEnablePeerAccess", r)?,
        }
        if !other.has_async_alloc() {
            return Ok(());
        }
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ctx.cu_device(),
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: `pool` receives the peer's default pool, which lives as
        // long as its device; one access descriptor, read by the call.
        unsafe {
            check(
                "cuDeviceGetDefaultMemPool",
                sys::cuDeviceGetDefaultMemPool(&mut pool, other.cu_device()),
            )?;
            check("cuMemPoolSetAccess", sys::cuMemPoolSetAccess(pool, &access, 1))
        }
    }

    /// `t`, a tensor in the memory of another GPU, as a tensor of this
    /// stream's: kernels launched here read and write its elements over
    /// the link. [`Stream::enable_peer_access`] first.
    ///
    /// # Safety
    ///
    /// `t` must outlive the view, and the two GPUs' accesses to it must be
    /// ordered (a kernel's `signal` and the other's `wait`): neither the
    /// view nor the launches that take it know about the other GPU's.
    pub unsafe fn peer_view<T: Element>(&self, t: &Tensor<T>) -> Result<PeerTensor<T>> {
        use cudarc::driver::DevicePtr;
        let (ptr, _guard) = t.as_cudarc().device_ptr(t.as_cudarc().stream());
        let len = t.as_cudarc().len();
        // SAFETY: the caller keeps `t`'s allocation of `len` elements alive
        // while the view is; the view never frees it (`PeerTensor::drop`).
        let buf = unsafe { self.cuda().upgrade_device_ptr::<T>(ptr, len) };
        Ok(PeerTensor(ManuallyDrop::new(Tensor::from_parts(
            buf,
            t.shape(),
            t.strides(),
        ))))
    }
}

/// A tensor of another GPU's memory seen by this one's kernels
/// ([`Stream::peer_view`]): use it as a [`Tensor`] of the viewing stream.
/// Dropping it leaves the memory to its owner.
pub struct PeerTensor<T: Element>(ManuallyDrop<Tensor<T>>);

impl<T: Element> Deref for PeerTensor<T> {
    type Target = Tensor<T>;
    fn deref(&self) -> &Tensor<T> {
        &self.0
    }
}

impl<T: Element> DerefMut for PeerTensor<T> {
    fn deref_mut(&mut self) -> &mut Tensor<T> {
        &mut self.0
    }
}

impl<T: Element> Drop for PeerTensor<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the owner frees the memory.
        let view = unsafe { ManuallyDrop::take(&mut self.0) };
        view.into_cudarc().leak();
    }
}

fn check(call: &'static str, r: CUresult) -> Result<()> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(Error::driver(call, cudarc::driver::DriverError(e))),
    }
}
