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
//! the registry; [`ptx`] reads a variant's PTX); a kernel that declares its tuning (`grid = ..`,
//! `key = [..]`) also gets `run`, which picks its configuration by timing
//! them ([`Tuned`]).
//!
//! # The guide
//!
//! The [`guide`] teaches the DSL from [the mental model] (blocks, tiles,
//! padding) through worked kernels up to [a GPT block], then documents
//! [every operation and rule] of the DSL, [the host API], [debugging] and
//! [performance]. Its examples are doc tests: they run on the CPU anywhere,
//! and on the GPU where there is one.
//!
//! [the mental model]: guide::ch01_mental_model
//! [a GPT block]: guide::ch07_gpt_block
//! [every operation and rule]: guide::ch08_reference
//! [the host API]: guide::ch09_host_api
//! [debugging]: guide::ch10_debugging
//! [performance]: guide::ch11_performance

#![warn(missing_docs)]

pub use half::{bf16, f16};
pub use tile_macros::kernel;
pub use tile_runtime::{
    Arg, Backend, Cpu, CpuVersion, DType, Device, Element, Error, Event, Graph, Grid, HostArg, HostTensor,
    HostTensorArg, KernelRef, KernelSpec, Packed, ParamSpec, PeerTensor, Ptx, Result, Scalar, ShapeDim, Size, SizeOp,
    Stream, Target, Tensor, TensorArg, TensorMap, TensorView, Tuned, Tuning, Variant, autotune, device_count,
    driver_present, ptx, registered_kernels, select, testing,
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

// The rendered guide's targets for the chapters' cross-references. A
// chapter links by reference labels (`[chapter 4][ch04-rows]`) that it
// defines at its end as relative `.md` paths, which work on GitHub; these
// definitions come before the chapter's text in rustdoc, and the first
// definition of a label wins, so there the labels are intra-doc links.
#[cfg(any(doc, doctest))]
macro_rules! guide_links {
    () => {
        "[guide]: crate::guide\n\
         [ch01]: crate::guide::ch01_mental_model\n\
         [ch02]: crate::guide::ch02_vector_add\n\
         [ch03]: crate::guide::ch03_softmax\n\
         [ch03-online]: crate::guide::ch03_softmax#the-online-softmax-rows-longer-than-a-tile\n\
         [ch04]: crate::guide::ch04_layernorm\n\
         [ch04-masking]: crate::guide::ch04_layernorm#masking-the-padding\n\
         [ch04-rows]: crate::guide::ch04_layernorm#several-rows-per-block\n\
         [ch04-shapes]: crate::guide::ch04_layernorm#declared-shapes\n\
         [ch05]: crate::guide::ch05_matmul\n\
         [ch06]: crate::guide::ch06_flash_attention\n\
         [ch06-ragged]: crate::guide::ch06_flash_attention#without-the-causal-mask-ragged-keys\n\
         [ch07]: crate::guide::ch07_gpt_block\n\
         [ch08]: crate::guide::ch08_reference\n\
         [ch09]: crate::guide::ch09_host_api\n\
         [ch09-grids]: crate::guide::ch09_host_api#grids\n\
         [ch09-registry]: crate::guide::ch09_host_api#the-registry\n\
         [ch10]: crate::guide::ch10_debugging\n\
         [ch11]: crate::guide::ch11_performance\n"
    };
}

// The guide (docs/), rendered with these docs: one module per chapter.
#[cfg(any(doc, doctest))]
pub mod guide;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
