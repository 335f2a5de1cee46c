//! Every way a launch or a transfer can fail, as a typed error. Arguments are
//! checked before anything reaches the GPU.

use std::fmt;

/// Why a launch, a transfer or opening a device failed.
///
/// Its `Display` text names the kernel and parameter at fault and, where
/// there is one, the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The NVIDIA driver library (libcuda) could not be loaded.
    NoDriver,
    /// The driver loaded but reports no CUDA device.
    NoDevice,
    /// A device index past the number of devices.
    DeviceIndex {
        /// The index asked for.
        index: usize,
        /// How many devices there are.
        count: usize,
    },
    /// The device's compute capability is older than sm_90.
    UnsupportedDevice {
        /// The device's name.
        name: String,
        /// Its compute capability, major version.
        major: i32,
        /// Its compute capability, minor version.
        minor: i32,
    },
    /// A CUDA driver call failed.
    Driver {
        /// The driver function that failed (`cuMemAlloc`, ..).
        call: &'static str,
        /// The driver's description of the error.
        message: String,
    },
    /// The GPU has no room for an allocation.
    OutOfMemory {
        /// The bytes asked for.
        bytes: usize,
    },
    /// A tensor argument has the wrong rank.
    Rank {
        /// The kernel launched.
        kernel: &'static str,
        /// The tensor parameter.
        param: &'static str,
        /// The rank the kernel indexes the tensor with.
        expected: usize,
        /// The rank of the tensor passed.
        found: usize,
    },
    /// Data length, shape or strides that don't fit together.
    Shape(String),
    /// A tensor whose size along a dimension breaks the shape its kernel
    /// declares for it (`&Tensor<T, { [M, N] }>`).
    ShapeContract {
        /// The kernel launched.
        kernel: &'static str,
        /// The tensor parameter.
        param: &'static str,
        /// The shape the kernel declares for it, as written: `[M, N]`.
        declared: String,
        /// The dimension at fault, counted from 0.
        axis: usize,
        /// Its size in the tensor passed.
        found: usize,
        /// The size the declaration asks for there.
        expected: usize,
        /// Where that size comes from: "`N` is `x`'s dimension 1", ...
        because: String,
    },
    /// A tensor whose elements can't be addressed with 32-bit offsets.
    TooLarge {
        /// The kernel launched.
        kernel: &'static str,
        /// The tensor parameter.
        param: &'static str,
        /// The elements the tensor spans: its largest offset plus one.
        max_offset: u64,
    },
    /// A launch grid the GPU can't run.
    Grid {
        /// The kernel launched.
        kernel: &'static str,
        /// What is wrong with the grid.
        reason: String,
    },
    /// Const values that no compiled variant has.
    NotBuilt {
        /// The kernel launched.
        kernel: &'static str,
        /// The const values asked for, in parameter order.
        consts: Vec<i64>,
    },
    /// The variant the arguments need takes more shared memory per block
    /// than the device gives one.
    SharedMemory {
        /// The kernel launched.
        kernel: &'static str,
        /// Bytes of shared memory the variant needs per block.
        needs: usize,
        /// Bytes of shared memory the device gives a block.
        device: usize,
    },
    /// A tensor that lives in another CUDA context than the stream: one of
    /// another [`Device`](crate::Device), even of the same GPU, passed to a
    /// launch, a copy or a download.
    WrongContext {
        /// The kernel launched, or the stream's operation (`Stream::copy`).
        kernel: &'static str,
        /// The tensor parameter.
        param: &'static str,
    },
    /// Arguments that are not what the kernel's parameters take (their
    /// number, a tensor for a scalar, an element type): what only a call
    /// past the generated launchers, which fix the types, can pass.
    Argument {
        /// The kernel launched.
        kernel: &'static str,
        /// What is wrong with the arguments.
        reason: String,
    },
    /// A CPU launch whose block waits (`wait`) for a flag that nothing
    /// left to run would set.
    Deadlock {
        /// The kernel launched.
        kernel: &'static str,
        /// Which flag, and what it holds.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDriver => write!(
                f,
                "the NVIDIA driver (libcuda.so) was not found: install the NVIDIA driver, or run the kernels' CPU versions (launch on `tile::Cpu`)"
            ),
            Error::NoDevice => write!(f, "the NVIDIA driver reports no CUDA device"),
            Error::DeviceIndex { index, count } => {
                write!(
                    f,
                    "device {index} does not exist: this machine has {count} CUDA device(s)"
                )
            }
            Error::UnsupportedDevice { name, major, minor } => write!(
                f,
                "{name} has compute capability {major}.{minor}; tile kernels need sm_90 or newer (Hopper, Blackwell)"
            ),
            Error::Driver { call, message } => write!(f, "CUDA driver call {call} failed: {message}"),
            Error::OutOfMemory { bytes } => write!(
                f,
                "the GPU has no room for {bytes} more bytes: free tensors, or run a smaller problem"
            ),
            Error::Rank {
                kernel,
                param,
                expected,
                found,
            } => write!(
                f,
                "{kernel}: tensor `{param}` has rank {found} but the kernel indexes it with {expected} coordinates"
            ),
            Error::Shape(msg) => f.write_str(msg),
            Error::ShapeContract {
                kernel,
                param,
                declared,
                axis,
                found,
                expected,
                because,
            } => write!(
                f,
                "{kernel}: tensor `{param}` is declared {declared}, so its dimension {axis} must be {expected} ({because}), but it is {found}"
            ),
            Error::TooLarge {
                kernel,
                param,
                max_offset,
            } => write!(
                f,
                "{kernel}: tensor `{param}` spans {max_offset} elements, beyond the 2^31 that kernels address with 32-bit offsets"
            ),
            Error::Grid { kernel, reason } => write!(f, "{kernel}: bad launch grid: {reason}"),
            Error::NotBuilt { kernel, consts } => write!(
                f,
                "{kernel} was not built for const values {consts:?} with these element types: add them to its #[tile::kernel(..)] lists, or take the combination out of its `skip`"
            ),
            Error::SharedMemory { kernel, needs, device } => write!(
                f,
                "{kernel}: the variant these arguments take needs {needs} bytes of shared memory per block, and this device gives a block {device}: use smaller tiles or fewer pipeline stages (`num_stages`)"
            ),
            Error::WrongContext { kernel, param } => write!(
                f,
                "{kernel}: tensor `{param}` was allocated on another device or context than the stream"
            ),
            Error::Argument { kernel, reason } | Error::Deadlock { kernel, reason } => write!(f, "{kernel}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// A failed allocation of `bytes`: `OutOfMemory` where the driver says
    /// so, else the driver's error.
    pub(crate) fn allocation(bytes: usize, e: cudarc::driver::DriverError) -> Error {
        match e.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { bytes },
            _ => Error::driver("cuMemAllocAsync", e),
        }
    }

    pub(crate) fn driver(call: &'static str, e: cudarc::driver::DriverError) -> Error {
        Error::Driver {
            call,
            message: e.to_string(),
        }
    }
}

/// The result of a tile call: `T`, or the [`Error`] that stopped it.
pub type Result<T> = std::result::Result<T, Error>;
