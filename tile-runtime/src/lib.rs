//! Runtime for tile kernels.
//!
//! - [`Device`] and [`Stream`] over the CUDA driver (loaded dynamically by
//!   `cudarc`: a program needs only the NVIDIA driver, and a missing driver is
//!   [`Error::NoDriver`], not a crash);
//! - [`Tensor`] (GPU) and [`HostTensor`] (CPU) with shapes and strides;
//! - the launcher behind every generated `kernel::launch`, and the module cache;
//! - the kernel registry ([`registered_kernels`]);
//! - [`cpu`], the reference tile library behind every generated `kernel::cpu`.

pub mod autotune;
pub mod cpu;
mod device;
mod dtype;
mod error;
mod grid;
mod host;
mod launch;
mod repitch;
pub mod select;
mod spec;
mod tensor;
mod tensor_map;
pub mod testing;

mod retype;
pub use retype::{retype, retype_mut};

pub use device::{Device, Event, Stream, device_count, driver_present};
pub use dtype::Element;
pub use error::{Error, Result};
pub use grid::Grid;
pub use host::{HostTensor, contiguous_strides};
pub use launch::{Arg, check_cpu_args, launch};
pub use spec::{KernelRef, KernelSpec, ParamSpec, registered_kernels};
pub use tensor::{Tensor, TensorArg};
pub use tile_spec::{DType, Target, TensorMap, Variant};

pub use inventory;
