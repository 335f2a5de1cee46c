//! What the tile compiler and the runtime share, defined once: element
//! types ([`DType`]), PTX targets ([`Target`]) and the description of one
//! compiled PTX entry ([`Variant`], with its [`TensorMap`]s and its text,
//! [`Ptx`]), and the tuning a kernel declares ([`Tuning`]: sizes computed
//! at launch).
//!
//! The compiler builds these values with owned data; the code
//! `#[tile::kernel]` expands to writes them as `static`s with borrowed data
//! (hence [`Cow`](std::borrow::Cow)), which the runtime reads to choose and
//! launch a variant. No dependencies beyond `std`.

mod dtype;
mod ptx;
mod target;
mod tuning;
mod variant;

pub use dtype::DType;
pub use ptx::{Packed, Ptx};
pub use target::Target;
pub use tuning::{Size, SizeArgs, SizeError, SizeOp, Tuning};
pub use variant::{TensorMap, Variant};
