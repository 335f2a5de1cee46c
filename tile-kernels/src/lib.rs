//! The tile kernel library. Every kernel is written in the DSL and compiled
//! to PTX at build time; each is a module with `launch_with` and `launch`
//! (on a GPU stream or `tile::Cpu`, the reference version) and `KERNEL`
//! (its PTX, parameters and CPU version), registered with
//! `tile::registered_kernels()` in every program that links this library
//! (`use tile_kernels as _;` links it where nothing else names it).
//! The `run*` wrappers pick the specialization and grid for a problem,
//! generic over the backend.
//!
//! Tensors are row-major. Element-wise kernels take 1-D tensors (reshape a
//! contiguous tensor to `[len]` first); row kernels take `[rows, cols]` and
//! run one block per row.

pub mod argmax;
pub mod attention;
pub mod collective;
pub mod decode;
pub mod elementwise;
pub mod embedding;
pub mod gemv;
pub mod linear;
pub mod matmul;
pub mod norm;
pub mod scan;
mod shapes;
pub mod softmax;
pub mod split_k;
pub mod topk;
