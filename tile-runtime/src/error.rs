//! Every way a launch or a transfer can fail, as a typed error. Arguments are
//! checked before anything reaches the GPU.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The NVIDIA driver library (libcuda) could not be loaded.
    NoDriver,
    /// The driver loaded but reports no CUDA device.
    NoDevice,
    /// A device index past the number of devices.
    DeviceIndex { index: usize, count: usize },
    /// The device's compute capability is older than sm_90.
    UnsupportedDevice { name: String, major: i32, minor: i32 },
    /// A CUDA driver call failed.
    Driver { call: &'static str, message: String },
    /// A tensor argument has the wrong rank.
    Rank {
        kernel: &'static str,
        param: &'static str,
        expected: usize,
        found: usize,
    },
    /// Data length, shape or strides that don't fit together.
    Shape(String),
    /// A tensor whose elements can't be addressed with 32-bit offsets.
    TooLarge {
        kernel: &'static str,
        param: &'static str,
        max_offset: u64,
    },
    /// A launch grid the GPU can't run.
    Grid { kernel: &'static str, reason: String },
    /// Const values that no compiled variant has.
    NotBuilt { kernel: &'static str, consts: Vec<i64> },
    /// The variant the arguments need takes more shared memory per block
    /// than the device gives one.
    SharedMemory {
        kernel: &'static str,
        needs: usize,
        device: usize,
    },
    /// A tensor that lives in another CUDA context than the stream.
    WrongContext { kernel: &'static str, param: &'static str },
    /// Arguments that are not what the kernel's parameters take (their
    /// number, a tensor for a scalar, an element type): what only a call
    /// past the generated launchers, which fix the types, can pass.
    Argument { kernel: &'static str, reason: String },
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
                "{kernel}: tensor `{param}` was allocated on another device or context than the launch stream"
            ),
            Error::Argument { kernel, reason } => write!(f, "{kernel}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub(crate) fn driver(call: &'static str, e: cudarc::driver::DriverError) -> Error {
        Error::Driver {
            call,
            message: e.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
