//! The GPU: driver probe, device and context, streams, timing events, and the
//! module cache (each PTX variant is loaded, its text inflated, once per
//! device).

use crate::repitch::Scratch;
use crate::select::Site;
use crate::spec::KernelSpec;
use crate::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tile_spec::{Target, Variant};

/// One CUDA device with its primary context.
pub struct Device {
    ctx: Arc<CudaContext>,
    /// The stream [`Device::stream`] hands out: a stream of its own, not
    /// the legacy default stream, which cannot be recorded into a graph.
    stream: Arc<CudaStream>,
    name: String,
    capability: (i32, i32),
    /// Whether variants made for this GPU's architecture-specific target
    /// (sm_90a: `wgmma`) are used; else only portable ones.
    arch_specific: AtomicBool,
    /// Whether kernels are launched as programmatic dependents of the
    /// previous kernel on their stream (`TILE_PDL=0`: no).
    dependent_launch: bool,
    /// Streaming multiprocessors.
    sm_count: u32,
    /// L2 cache size in bytes.
    l2_bytes: usize,
    /// Shared memory one block may have (opting in past 48 KiB).
    block_shared_bytes: usize,
    /// Shared memory an SM has at most, and what it reserves a block.
    sm_shared_bytes: usize,
    reserved_shared_bytes: usize,
    /// A smaller limit set for testing (see [`Device::limit_block_shared_bytes`]).
    block_shared_limit: AtomicUsize,
    functions: Mutex<HashMap<usize, Loaded>>,
    /// The `.entry` names of the variants launched so far.
    launched: Mutex<BTreeSet<&'static str>>,
}

/// A variant's loaded function, and how many of its blocks the GPU holds
/// at once (what a persistent grid launches; a multiple of its cluster).
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) function: CudaFunction,
    pub(crate) resident_blocks: u32,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({} sm_{}{})", self.name, self.capability.0, self.capability.1)
    }
}

/// True when the NVIDIA driver library can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda and drops the handle.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// How many CUDA devices the driver reports (probing for the driver first).
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    match CudaContext::device_count() {
        Ok(n) => Ok(n.max(0) as usize),
        // cuInit itself fails with "no device" on machines without a GPU.
        Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
        Err(e) => Err(Error::driver("cuDeviceGetCount", e)),
    }
}

/// Lets the device's default memory pool, which stream-ordered allocations
/// (`cuMemAllocAsync`) draw from, keep what is freed instead of returning
/// it to the driver at each synchronization: a forward pass frees and
/// allocates its activations again at every step, which would otherwise
/// map the same memory again each time (as PyTorch's caching allocator
/// avoids too).
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::sys;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: `pool` receives the device's default pool, which lives as long
    // as the device; the attribute takes a pointer to a u64.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(|e| Error::driver("cuDeviceGetDefaultMemPool", e))?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(|e| Error::driver("cuMemPoolSetAttribute", e))?;
    }
    Ok(())
}

impl Device {
    /// Opens device `ordinal`. Fails with a typed error when there is no
    /// driver, no such device, or the device is older than sm_90.
    pub fn new(ordinal: usize) -> Result<Arc<Device>> {
        let count = device_count()?;
        if count == 0 {
            return Err(Error::NoDevice);
        }
        if ordinal >= count {
            return Err(Error::DeviceIndex { index: ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::driver("cuDevicePrimaryCtxRetain", e))?;
        let name = ctx.name().map_err(|e| Error::driver("cuDeviceGetName", e))?;
        let capability = ctx
            .compute_capability()
            .map_err(|e| Error::driver("cuDeviceGetAttribute", e))?;
        let attribute = |a| ctx.attribute(a).map_err(|e| Error::driver("cuDeviceGetAttribute", e));
        use cudarc::driver::sys::CUdevice_attribute::{
            CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
        };
        let sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
        let block_shared_bytes = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let sm_shared_bytes = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?;
        let reserved_shared_bytes = attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)?;
        if capability.0 < 9 {
            return Err(Error::UnsupportedDevice {
                name,
                major: capability.0,
                minor: capability.1,
            });
        }
        if ctx.has_async_alloc() {
            keep_freed_memory(&ctx)?;
        }
        // Work on one device is ordered by the streams it is queued on, as
        // in CUDA: cudarc's events around every buffer's use, which order
        // uses across streams for the caller, are off (they would also
        // make a recorded graph wait on events from outside it).
        // SAFETY: turned off before any buffer or stream of this device's
        // runtime exists.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| Error::driver("cuStreamCreate", e))?;
        Ok(Arc::new(Device {
            ctx,
            stream,
            name,
            capability,
            arch_specific: AtomicBool::new(std::env::var_os("TILE_PORTABLE").is_none_or(|v| v == "0")),
            dependent_launch: std::env::var_os("TILE_PDL").is_none_or(|v| v != "0"),
            sm_count: sm_count.max(1) as u32,
            l2_bytes: l2_bytes.max(0) as usize,
            block_shared_bytes: block_shared_bytes.max(0) as usize,
            sm_shared_bytes: sm_shared_bytes.max(0) as usize,
            reserved_shared_bytes: reserved_shared_bytes.max(0) as usize,
            block_shared_limit: AtomicUsize::new(usize::MAX),
            functions: Mutex::new(HashMap::new()),
            launched: Mutex::new(BTreeSet::new()),
        }))
    }

    /// Bytes of device memory in use: total less free, as the driver counts
    /// them (every process's allocations, and the memory this process's
    /// allocator keeps for reuse).
    pub fn memory_in_use(&self) -> Result<usize> {
        let (free, total) = self.ctx.mem_get_info().map_err(|e| Error::driver("cuMemGetInfo", e))?;
        Ok(total.saturating_sub(free))
    }

    /// The device's name as the driver reports it ("NVIDIA H100 80GB HBM3").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Streaming multiprocessors (132 on an H100 SXM): a grid of fewer
    /// blocks leaves some of them idle.
    pub fn multiprocessors(&self) -> usize {
        self.sm_count as usize
    }

    /// L2 cache size in bytes (50 MiB on an H100 SXM): what blocks running
    /// at once can share of what they read.
    pub fn l2_bytes(&self) -> usize {
        self.l2_bytes
    }

    /// (major, minor), e.g. (9, 0) for H100/H200.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }

    /// The PTX target whose variants this device runs: sm_90a on Hopper
    /// (kernels with `mma` have `wgmma` variants for it), else the portable
    /// sm_90 PTX, which the driver compiles for sm_100 and sm_120. Setting
    /// `TILE_PORTABLE=1`, or [`Device::use_arch_specific`]`(false)`, keeps
    /// to the portable variants.
    pub fn target(&self) -> Target {
        if self.capability == (9, 0) && self.arch_specific.load(Ordering::Relaxed) {
            Target::Sm90a
        } else {
            Target::Sm90
        }
    }

    /// Whether to launch variants made for this GPU's architecture-specific
    /// target (see [`Device::target`]); for comparing them with the portable ones.
    pub fn use_arch_specific(&self, on: bool) {
        self.arch_specific.store(on, Ordering::Relaxed);
    }

    /// Whether a kernel may be scheduled while the previous kernel on its
    /// stream still runs (programmatic dependent launch): it then waits for
    /// that kernel's memory before its first global access, so a step of
    /// short kernels loses less to launches. On unless `TILE_PDL=0`, a
    /// switch for comparing and for ruling it out when debugging.
    pub fn dependent_launch(&self) -> bool {
        self.dependent_launch
    }

    /// Shared memory one block may have on this device (sm_90: 227 KiB;
    /// sm_120: 99 KiB), or less under [`Device::limit_block_shared_bytes`]:
    /// variants that need more are not launched here.
    pub fn block_shared_bytes(&self) -> usize {
        self.block_shared_bytes
            .min(self.block_shared_limit.load(Ordering::Relaxed))
    }

    /// Launches only variants whose blocks need at most `bytes` of shared
    /// memory, as a GPU that gives a block less would (`usize::MAX`: the
    /// device's own limit again); for testing, on one GPU, what another
    /// runs (the portable variants sm_120 runs, with its 99 KiB).
    pub fn limit_block_shared_bytes(&self, bytes: usize) {
        self.block_shared_limit.store(bytes, Ordering::Relaxed);
    }

    /// Where a launch on this device runs (see [`Site`]), with or without
    /// blocks in 2-CTA clusters.
    pub(crate) fn site(&self, clusters: bool) -> Site {
        Site {
            target: self.target(),
            clusters,
            block_shared_bytes: self.block_shared_bytes(),
        }
    }

    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's stream: every call gives the same one, whose work
    /// runs in the order it is queued (and can be recorded into a graph).
    pub fn stream(self: &Arc<Self>) -> Stream {
        Stream {
            device: self.clone(),
            inner: self.stream.clone(),
            scratch: Scratch::default(),
        }
    }

    /// A new stream, independent of [`Device::stream`]: work queued on
    /// two streams is not ordered between them (synchronize one, or
    /// download, before the other uses what it wrote).
    pub fn new_stream(self: &Arc<Self>) -> Result<Stream> {
        let inner = self.ctx.new_stream().map_err(|e| Error::driver("cuStreamCreate", e))?;
        Ok(Stream {
            device: self.clone(),
            inner,
            scratch: Scratch::default(),
        })
    }

    /// The `.entry` names of the variants launched on this device so far,
    /// sorted: which of a kernel's variants the arguments' alignment, the
    /// target and the grid chose.
    pub fn launched_variants(&self) -> Vec<&'static str> {
        let launched = self.launched.lock().expect("launched variants lock");
        launched.iter().copied().collect()
    }

    /// Notes that `v` was launched (see [`Device::launched_variants`]).
    pub(crate) fn note_launch(&self, v: &'static Variant) {
        self.launched.lock().expect("launched variants lock").insert(&v.entry);
    }

    /// The loaded function for a variant, loading its module on first use.
    pub(crate) fn function(&self, kernel: &KernelSpec, v: &'static Variant) -> Result<Loaded> {
        let key = v as *const Variant as usize;
        let mut cache = self.functions.lock().expect("module cache lock");
        if let Some(f) = cache.get(&key) {
            return Ok(f.clone());
        }
        let ptx = crate::ptx::module(crate::ptx::load_target(v), v);
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| Error::Driver {
                call: "cuModuleLoadData",
                message: format!("{} ({}): {e}", kernel.describe(v), v.entry),
            })?;
        let f = module
            .load_function(&v.entry)
            .map_err(|e| Error::driver("cuModuleGetFunction", e))?;
        // Past 48 KiB, dynamic shared memory must be allowed explicitly.
        if v.dynamic_shared_bytes + v.shared_bytes > 48 * 1024 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                v.dynamic_shared_bytes as i32,
            )
            .map_err(|e| Error::driver("cuFuncSetAttribute", e))?;
        }
        // One L1/shared split for the kernels of a step (`carveout`'s doc).
        let split = crate::carveout::carveout(
            v.dynamic_shared_bytes + v.shared_bytes,
            self.sm_shared_bytes,
            self.reserved_shared_bytes,
        );
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            split,
        )
        .map_err(|e| Error::driver("cuFuncSetAttribute", e))?;
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(v.threads, v.dynamic_shared_bytes, None)
            .map_err(|e| Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?;
        let mut resident_blocks = self.sm_count * per_sm.max(1);
        if v.cluster > 1 {
            // A cluster's blocks run on one GPC: fewer may fit than SMs allow.
            let config = cudarc::driver::LaunchConfig {
                grid_dim: (resident_blocks.next_multiple_of(v.cluster), 1, 1),
                block_dim: (v.threads, 1, 1),
                shared_mem_bytes: v.dynamic_shared_bytes as u32,
            };
            let clusters = f
                .occupancy_max_active_clusters(config, &self.ctx.default_stream())
                .map_err(|e| Error::driver("cuOccupancyMaxActiveClusters", e))?;
            resident_blocks = clusters.max(1) * v.cluster;
        }
        let loaded = Loaded {
            function: f,
            resident_blocks,
        };
        cache.insert(key, loaded.clone());
        Ok(loaded)
    }
}

/// A CUDA stream: kernels and copies on it run in order.
#[derive(Clone)]
pub struct Stream {
    device: Arc<Device>,
    inner: Arc<CudaStream>,
    /// Where the launcher copies operands TMA could not read (see `repitch`).
    scratch: Scratch,
}

impl Stream {
    /// The device the stream runs on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    pub(crate) fn cuda(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    pub(crate) fn scratch(&self) -> &Scratch {
        &self.scratch
    }

    /// The underlying `cudarc` stream, for interoperating with CUDA libraries.
    pub fn as_cudarc(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// Waits for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        self.inner
            .synchronize()
            .map_err(|e| Error::driver("cuStreamSynchronize", e))
    }

    /// Records an event: the point in the stream reached when it completes.
    pub fn record(&self) -> Result<Event> {
        let ev = self
            .device
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| Error::driver("cuEventCreate", e))?;
        ev.record(&self.inner).map_err(|e| Error::driver("cuEventRecord", e))?;
        Ok(Event(ev))
    }
}

/// A point in a stream, for timing GPU work.
pub struct Event(cudarc::driver::CudaEvent);

impl Event {
    /// Milliseconds of GPU time from `self` to `later` (waits for `later`).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        later
            .0
            .synchronize()
            .map_err(|e| Error::driver("cuEventSynchronize", e))?;
        self.0
            .elapsed_ms(&later.0)
            .map_err(|e| Error::driver("cuEventElapsedTime", e))
    }
}
