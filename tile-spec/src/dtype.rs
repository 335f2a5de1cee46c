//! Element types of tiles, tensors and scalars.

use std::fmt;

/// An element type the DSL knows.
///
/// `Bool` is only ever a comparison result inside a kernel (a tile of
/// predicates, consumed by `select`): no tensor holds it and no parameter
/// takes it, so the runtime never sees it in a tensor or scalar argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE single precision.
    F32,
    /// IEEE half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`): f32's exponent, 8 bits of mantissa.
    BF16,
    /// Signed 32-bit integer (wrapping arithmetic).
    I32,
    /// Unsigned 32-bit integer (wrapping arithmetic).
    U32,
    /// A predicate: the result of a comparison, inside kernels only.
    Bool,
}

impl DType {
    /// Parses a Rust type name as written in a kernel signature or turbofish.
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "f32" => DType::F32,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "i32" => DType::I32,
            "u32" => DType::U32,
            "bool" => DType::Bool,
            _ => return None,
        })
    }

    /// The Rust spelling, used in messages and in generated host code.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    /// Size of one element in memory.
    pub fn bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
        }
    }

    /// `f32`, `f16` or `bf16`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// `i32` or `u32`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }

    /// Half-precision types are stored in 16-bit registers and computed in f32.
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for d in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::Bool] {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f64"), None);
        assert_eq!((DType::BF16.bytes(), DType::U32.to_string()), (2, "u32".to_string()));
    }
}
