//! Launching a compiled kernel on a GPU. The arguments are checked first
//! (kinds, element types, ranks and the grid as on either backend, see
//! `backend`; here also 32-bit addressability and the device); then the
//! facts about the arguments go to [`select`], which picks the variant and
//! any operand copies; this module makes the copies, encodes the tensor
//! maps and launches on the stream.

use crate::arg::Arg;
use crate::device::Stream;
use crate::grid::Grid;
use crate::repitch::{Held, Rows, Source};
use crate::select::{ArgFacts, for_grid, select};
use crate::spec::KernelSpec;
use crate::tensor::TensorArg;
use crate::tensor_map::{self, TensorMapArg};
use crate::{Error, Result};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

/// Checks that 32-bit element offsets reach all of a tensor.
fn check_size(kernel: &KernelSpec, param: &'static str, shape: &[usize], strides: &[usize]) -> Result<()> {
    let max_offset = crate::host::span(shape, strides).map_or(u64::MAX, |n| n as u64);
    let too_big = max_offset > i32::MAX as u64 || shape.iter().chain(strides).any(|&x| x > i32::MAX as usize);
    if too_big {
        return Err(Error::TooLarge {
            kernel: kernel.name,
            param,
            max_offset,
        });
    }
    Ok(())
}

/// True when 16-byte vector accesses are valid for a tensor at `ptr`.
fn allows_vectors(dtype: crate::DType, shape: &[usize], strides: &[usize], ptr: u64) -> bool {
    let v = 16 / dtype.bytes();
    let last = shape.len() - 1;
    ptr.is_multiple_of(16)
        && strides[last] == 1
        && shape[last].is_multiple_of(v)
        && strides[..last].iter().all(|s| s % v == 0)
}

/// A tensor argument as the launch passes it: element type, address,
/// shape and strides (of the argument, or of its copy).
#[derive(Clone)]
struct TensorAt {
    dtype: crate::DType,
    ptr: u64,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl TensorAt {
    fn new(t: &dyn TensorArg, ptr: u64) -> TensorAt {
        TensorAt {
            dtype: t.dtype(),
            ptr,
            shape: t.shape().to_vec(),
            strides: t.strides().to_vec(),
        }
    }
}

enum Raw {
    U64(u64),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// Launches `kernel` with const values `consts` on `stream`, with
/// arguments [`Backend::launch_kernel`](crate::Backend::launch_kernel)
/// checked against its parameters.
///
/// Checks what only the GPU needs (32-bit offsets, every tensor on the
/// stream's device), gathers the facts [`select`] decides on, makes
/// the copies it asks for and encodes the tensor maps of its variant
/// (selecting again without them when there is no memory for the copies
/// or the driver refuses a map), loads the function, lets [`for_grid`]
/// settle persistent two-tile blocks against plain ones, and launches.
pub(crate) fn launch(
    kernel: &'static KernelSpec,
    types: &[crate::DType],
    consts: &[i64],
    stream: &Stream,
    grid: Grid,
    args: &mut [Arg<'_, dyn TensorArg>],
) -> Result<()> {
    let ctx = stream.device().context().clone();
    for (p, a) in kernel.params.iter().zip(args.iter()) {
        if let Some(t) = a.tensor_view() {
            check_size(kernel, p.name(), t.shape(), t.strides())?;
            if !Arc::ptr_eq(t.context(), &ctx) {
                return Err(Error::WrongContext {
                    kernel: kernel.name,
                    param: p.name(),
                });
            }
        }
    }
    let cuda = stream.cuda();
    let mut guards = Vec::new();
    // Per argument, a tensor's element type, address, shape and strides
    // (and whether the kernel only reads it), or a scalar's value.
    let mut tensors = Vec::new();
    let (mut read_only, mut scalars) = (Vec::new(), Vec::new());
    for a in args.iter_mut() {
        read_only.push(matches!(a, Arg::Tensor(_)));
        scalars.push(match a {
            Arg::F32(x) => Some(Raw::F32(*x)),
            Arg::I32(x) => Some(Raw::I32(*x)),
            Arg::U32(x) => Some(Raw::U32(*x)),
            Arg::Tensor(_) | Arg::TensorMut(_) => None,
        });
        tensors.push(match a {
            Arg::Tensor(t) => {
                let (ptr, g) = t.ptr(cuda);
                guards.push(g);
                Some(TensorAt::new(*t, ptr))
            }
            Arg::TensorMut(t) => {
                let (dtype, shape, strides) = (t.dtype(), t.shape().to_vec(), t.strides().to_vec());
                let (ptr, g) = t.ptr_mut(cuda);
                guards.push(g);
                Some(TensorAt {
                    dtype,
                    ptr,
                    shape,
                    strides,
                })
            }
            _ => None,
        });
    }
    let mut facts = ArgFacts {
        aligned: tensors
            .iter()
            .map(|t| {
                t.as_ref()
                    .is_some_and(|t| allows_vectors(t.dtype, &t.shape, &t.strides, t.ptr))
            })
            .collect(),
        copyable: read_only
            .iter()
            .zip(&tensors)
            .map(|(&r, t)| r && t.as_ref().is_some_and(|t| Rows::of(&t.shape, &t.strides).is_some()))
            .collect(),
        maps_encode: true,
    };
    let site = stream.device().site(grid.clusters);
    // Each failure below turns a fact off, so this settles within three rounds.
    let (variant, passed, maps, scratch) = loop {
        let selection = select(kernel, types, consts, &facts, site)?;
        let mut passed = tensors.clone();
        let mut scratch = None;
        if !selection.copies.is_empty() {
            match copy_operands(stream, &selection.copies, &mut passed) {
                Ok(held) => scratch = Some(held),
                // No memory for the copies: a variant that needs none.
                Err(Error::Driver { call: "cuMemAlloc", .. }) => {
                    facts.copyable.fill(false);
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        let maps: Option<Vec<TensorMapArg>> = selection
            .variant
            .tensor_maps
            .iter()
            .map(|m| {
                let t = passed.get(m.param)?.as_ref()?;
                tensor_map::encode(m, t.dtype, t.ptr, &t.shape, &t.strides)
            })
            .collect();
        match maps {
            Some(maps) => break (selection.variant, passed, maps, scratch),
            None => facts.maps_encode = false,
        }
    };
    let loaded = stream.device().function(kernel, variant)?;
    let plain = for_grid(kernel, variant, grid, loaded.resident_blocks);
    let (variant, loaded) = if std::ptr::eq(plain, variant) {
        (variant, loaded)
    } else {
        (plain, stream.device().function(kernel, plain)?)
    };
    let mut raws = Vec::new();
    for (t, scalar) in passed.iter().zip(scalars) {
        if let Some(t) = t {
            raws.push(Raw::U64(t.ptr));
            raws.extend(t.shape.iter().chain(&t.strides).map(|&x| Raw::U32(x as u32)));
        }
        raws.extend(scalar);
    }
    let mut args: Vec<*mut c_void> = raws
        .iter()
        .map(|r| match r {
            Raw::U64(x) => x as *const u64 as *mut c_void,
            Raw::U32(x) => x as *const u32 as *mut c_void,
            Raw::I32(x) => x as *const i32 as *mut c_void,
            Raw::F32(x) => x as *const f32 as *mut c_void,
        })
        .chain(maps.iter().map(|m| m as *const TensorMapArg as *mut c_void))
        .collect();
    // A persistent grid: enough blocks to fill the GPU once, each looping
    // over its share of the `grid.x` the kernel was launched with.
    let mut blocks_x = grid.x;
    if variant.persistent {
        let planes = grid.y * grid.z;
        let cluster = variant.cluster;
        let fit = (loaded.resident_blocks.div_ceil(planes) / cluster).max(1) * cluster;
        blocks_x = fit.min(grid.x.next_multiple_of(cluster));
        args.push(&grid.x as *const u32 as *mut c_void);
    }
    // Programmatic dependent launch: the kernel may be scheduled while the
    // previous one on the stream runs; it waits for that kernel's memory
    // before its first load or store (`griddepcontrol.wait`, placed by the
    // compiler's `plan::dependency`), so only its launch, index arithmetic
    // and prefetches overlap the previous kernel.
    let mut dependent = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue { pad: [0; 64] },
    };
    dependent.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: blocks_x,
        gridDimY: grid.y,
        gridDimZ: grid.z,
        blockDimX: variant.threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: variant.dynamic_shared_bytes as u32,
        hStream: cuda.cu_stream(),
        attrs: &mut dependent,
        numAttrs: stream.device().dependent_launch() as u32,
    };
    cuda.context()
        .bind_to_thread()
        .map_err(|e| Error::driver("cuCtxSetCurrent", e))?;
    // SAFETY: the arguments match the entry's parameter list (generated from
    // the same spec) and outlive the call, which copies them; every tensor
    // was checked to be addressable with 32-bit offsets, and the kernel
    // bounds-checks every access against the shapes.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            loaded.function.cu_function(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(|e| Error::driver("cuLaunchKernelEx", e))?;
    stream.device().note_launch(variant);
    drop((guards, scratch));
    Ok(())
}

/// Copies the tensors `copies` (indices into `tensors`, read-only with
/// evenly spaced rows) into the stream's scratch buffer with rows 16 bytes
/// apart, and points their entries at the copies. Returns the buffer,
/// held until the launch reading it is queued.
fn copy_operands<'s>(stream: &'s Stream, copies: &[usize], tensors: &mut [Option<TensorAt>]) -> Result<Held<'s>> {
    let (params, sources): (Vec<usize>, Vec<Source>) = copies
        .iter()
        .filter_map(|&p| {
            let t = tensors[p].as_ref()?;
            let rows = Rows::of(&t.shape, &t.strides)?;
            Some((
                p,
                Source {
                    ptr: t.ptr,
                    dtype: t.dtype,
                    rows,
                },
            ))
        })
        .unzip();
    let (held, addresses) = stream.scratch().copy(stream.cuda(), &sources)?;
    for ((&p, source), address) in params.iter().zip(&sources).zip(addresses) {
        if let Some(t) = tensors[p].as_mut() {
            t.strides = source.rows.aligned_strides(&t.shape, t.dtype);
            t.ptr = address;
        }
    }
    Ok(held)
}
