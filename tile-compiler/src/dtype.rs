//! Types of IR values: an element type ([`DType`], shared with the
//! runtime through `tile-spec`) with a tile shape or none.

use std::fmt;

pub use tile_spec::DType;

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
