//! # tile: a tile-programming DSL for Rust
//!
//! Write a GPU kernel as block-level tile code — load a tile, reduce it,
//! compute with it, store it — and `#[tile::kernel]` compiles it to PTX while
//! `cargo build` runs. No thread indices, no barriers, no shared-memory
//! bookkeeping: the compiler maps tiles onto threads, warps and shared memory.
//!
//! ```
//! use tile::prelude::*;
//!
//! /// y = a * x + y, one 1024-element tile per block.
//! #[tile::kernel(BLOCK = [1024])]
//! fn axpy<const BLOCK: usize>(a: f32, x: &Tensor<f32>, y: &mut Tensor<f32>) {
//!     let i = block_id(0);
//!     let t = a * x.load([i], [BLOCK]) + y.load([i], [BLOCK]);
//!     y.store([i], t);
//! }
//!
//! // On the CPU (the reference version, runs anywhere): tensors in host memory.
//! let x = HostTensor::from_vec(vec![1.0f32; 3000], &[3000]).unwrap();
//! let mut y = HostTensor::from_vec(vec![2.0f32; 3000], &[3000]).unwrap();
//! axpy::launch::<1024, _>(&tile::Cpu, 3, 0.5, &x, &mut y).unwrap();
//! assert!(y.to_vec().iter().all(|&v| v == 2.5));
//!
//! // On a GPU stream, the same call with GPU tensors.
//! if let Ok(device) = Device::new(0) {
//!     let s = device.stream();
//!     let (xd, mut yd) = (s.upload(&x).unwrap(), s.zeros::<f32>(&[3000]).unwrap());
//!     axpy::launch::<1024, _>(&s, 3, 0.5, &xd, &mut yd).unwrap();
//!     assert!(s.download(&yd).unwrap().to_vec().iter().all(|&v| v == 2.5));
//! }
//! ```
//!
//! Each kernel becomes a module with `launch_with` (the const values given
//! at run time), `launch` (given as generic arguments, checked at compile
//! time), both taking a [`Backend`] (a GPU [`Stream`] or [`Cpu`]), and
//! `KERNEL` (the generated PTX, parameter list and CPU version, also in
//! the registry; [`ptx`] reads a variant's PTX); a kernel that declares its
//! tuning (`grid = ..`, `key = [..]`) also gets `run`, which picks its
//! configuration by timing them ([`Tuned`]).

pub use half::{bf16, f16};
pub use tile_macros::kernel;
pub use tile_runtime::{
    Arg, Backend, Cpu, CpuVersion, DType, Device, Element, Error, Event, Grid, HostArg, HostTensor, HostTensorArg,
    KernelRef, KernelSpec, Packed, ParamSpec, Ptx, Result, Scalar, Size, SizeOp, Stream, Target, Tensor, TensorArg,
    TensorMap, TensorView, Tuned, Tuning, Variant, autotune, device_count, driver_present, ptx, registered_kernels,
    select, testing,
};

/// The names a program using tile usually needs.
pub mod prelude {
    pub use crate::{Backend, Cpu, Device, Grid, HostTensor, Stream, Tensor, TensorView, bf16, f16};
}

/// Used by the code `#[tile::kernel]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use tile_runtime::{
        cpu, host_args, host_scalar, host_tensor, host_tensor_mut, inventory, run_config, run_tuned,
    };
}

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guide's table of contents (docs/README.md).
#[doc = include_str!("../docs/README.md")]
#[cfg(doctest)]
pub struct GuideContents;

/// Guide, chapter 1: the mental model.
#[doc = include_str!("../docs/01-mental-model.md")]
#[cfg(doctest)]
pub struct GuideMentalModel;

/// Guide, chapter 2: vector add.
#[doc = include_str!("../docs/02-vector-add.md")]
#[cfg(doctest)]
pub struct GuideVectorAdd;

/// Guide, chapter 3: softmax.
#[doc = include_str!("../docs/03-softmax.md")]
#[cfg(doctest)]
pub struct GuideSoftmax;

/// Guide, chapter 4: LayerNorm.
#[doc = include_str!("../docs/04-layernorm.md")]
#[cfg(doctest)]
pub struct GuideLayerNorm;

/// Guide, chapter 5: matrix multiplication.
#[doc = include_str!("../docs/05-matmul.md")]
#[cfg(doctest)]
pub struct GuideMatmul;

/// Guide, chapter 6: flash attention.
#[doc = include_str!("../docs/06-flash-attention.md")]
#[cfg(doctest)]
pub struct GuideFlashAttention;

/// Guide, chapter 7: a GPT block.
#[doc = include_str!("../docs/07-gpt-block.md")]
#[cfg(doctest)]
pub struct GuideGptBlock;

/// Guide, chapter 8: the DSL reference.
#[doc = include_str!("../docs/08-reference.md")]
#[cfg(doctest)]
pub struct GuideReference;

/// Guide, chapter 9: the host API.
#[doc = include_str!("../docs/09-host-api.md")]
#[cfg(doctest)]
pub struct GuideHostApi;

/// Guide, chapter 10: debugging.
#[doc = include_str!("../docs/10-debugging.md")]
#[cfg(doctest)]
pub struct GuideDebugging;

/// Guide, chapter 11: performance.
#[doc = include_str!("../docs/11-performance.md")]
#[cfg(doctest)]
pub struct GuidePerformance;
