//! The tile kernel library. Every kernel is written in the DSL and compiled
//! to PTX at build time; each is a module with `launch` (GPU), `cpu` (the
//! reference version) and `KERNEL` (its PTX and parameters).
//!
//! Tensors are row-major. Element-wise kernels take 1-D tensors (reshape a
//! contiguous tensor to `[len]` first); row kernels take `[rows, cols]` and
//! run one block per row.

pub mod attention;
pub mod elementwise;
pub mod embedding;
pub mod linear;
pub mod matmul;
pub mod norm;
mod shapes;
pub mod softmax;

/// Every kernel of this library (also listed by `tile::registered_kernels`).
pub fn kernels() -> [&'static tile::KernelSpec; 15] {
    [
        &matmul::matmul::KERNEL,
        &matmul::linear::KERNEL,
        &matmul::linear_residual::KERNEL,
        &matmul::batched_matmul::KERNEL,
        &attention::causal_attention::KERNEL,
        &linear::linear_ffma::KERNEL,
        &elementwise::add::KERNEL,
        &elementwise::scale::KERNEL,
        &elementwise::residual_add::KERNEL,
        &elementwise::gelu::KERNEL,
        &embedding::embedding::KERNEL,
        &norm::layer_norm::KERNEL,
        &norm::rms_norm::KERNEL,
        &softmax::softmax::KERNEL,
        &softmax::softmax_online::KERNEL,
    ]
}
