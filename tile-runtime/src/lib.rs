//! Runtime for tile kernels.
//!
//! - [`Device`] and [`Stream`] over the CUDA driver (loaded dynamically by
//!   `cudarc`: a program needs only the NVIDIA driver, and a missing driver is
//!   [`Error::NoDriver`], not a crash);
//! - [`Tensor`] (GPU) and [`HostTensor`] (CPU) with shapes and strides;
//! - [`Backend`]: where a generated `kernel::launch_with` runs, a GPU
//!   [`Stream`] (the launcher, the variant choice in [`select`], the module
//!   cache) or [`Cpu`] (the kernels' reference versions);
//! - the kernel registry ([`registered_kernels`]), and [`ptx`], which
//!   reads a variant's PTX (the program stores it packed);
//! - [`cpu`], the reference tile library the CPU versions call.

#![warn(missing_docs)]

mod arg;
pub mod autotune;
mod backend;
mod carveout;
mod contract;
pub mod cpu;
mod device;
mod dtype;
mod error;
mod graph;
mod grid;
mod host;
mod landing;
mod launch;
mod peer;
pub mod ptx;
mod repitch;
pub mod select;
mod spec;
mod tensor;
mod tensor_map;
pub mod testing;
mod tuned;

pub use arg::{Arg, HostArg, HostTensorArg, TensorView};
pub use backend::{Backend, Cpu, Scalar, host_args, host_scalar, host_tensor, host_tensor_mut};
pub use device::{Device, Event, Stream, device_count, driver_present};
pub use dtype::Element;
pub use error::{Error, Result};
pub use graph::Graph;
pub use grid::Grid;
pub use host::{HostTensor, contiguous_strides};
pub use landing::Landing;
pub use peer::PeerTensor;
pub use spec::{CpuVersion, KernelRef, KernelSpec, ParamSpec, ShapeDim, registered_kernels};
pub use tensor::{Tensor, TensorArg};
pub use tile_spec::{DType, Packed, Ptx, Size, SizeOp, Target, TensorMap, Tuning, Variant};
pub use tuned::{Tuned, run_config, run_tuned};

pub use inventory;
