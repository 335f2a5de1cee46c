//! Element types of tiles, tensors and scalars.

use std::fmt;

/// An element type the DSL knows. `Bool` exists only as the result of
/// comparisons (tiles of predicates); tensors never hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    U32,
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

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

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

/// The type of an IR value: a block-uniform scalar, or a tile with a
/// compile-time shape (every dimension a power of two).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ty {
    pub dtype: DType,
    /// `None` for scalars.
    pub shape: Option<Vec<usize>>,
}

impl Ty {
    pub fn scalar(dtype: DType) -> Ty {
        Ty { dtype, shape: None }
    }

    pub fn tile(dtype: DType, shape: Vec<usize>) -> Ty {
        Ty {
            dtype,
            shape: Some(shape),
        }
    }

    pub fn is_scalar(&self) -> bool {
        self.shape.is_none()
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shape {
            None => write!(f, "{}", self.dtype),
            Some(shape) => write!(f, "tile {}{:?}", self.dtype, shape),
        }
    }
}
