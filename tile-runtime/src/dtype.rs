//! The Rust types tensors hold, each with its [`DType`] (defined once, in
//! `tile-spec`, for the compiler and the runtime).

use std::fmt;
use tile_spec::DType;

/// A type tensors can hold.
pub trait Element:
    Copy
    + Default
    + PartialEq
    + fmt::Debug
    + Send
    + Sync
    + 'static
    + cudarc::driver::DeviceRepr
    + cudarc::driver::ValidAsZeroBits
{
    /// The element type's tag, as kernel parameters and variants name it.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for u32 {
    const DTYPE: DType = DType::U32;
}
