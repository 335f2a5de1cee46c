//! Linear layers: `y = x @ w^T + b` with `x: [M, K]`, `w: [N, K]` (the
//! PyTorch `Linear` layout), `b: [N]`, `y: [M, N]`.
//!
//! This version multiplies on the CUDA cores: each K-step forms the
//! `[BM, BN, BK]` product of two tiles and reduces it, which needs nothing
//! beyond element-wise arithmetic and `sum`, and stays exact in f32. The
//! tensor cores (`mma`) run the same layer in `matmul::linear`, which the
//! GPT uses, and is the faster of the two on large layers (BENCHMARKS.md);
//! the GPT runs these where an f32 model is asked not to use tf32.

use crate::shapes::dims;
use tile::{Backend, Element, TensorView};

/// `(x, w, b)` of a linear layer on backend `B`.
pub type LinearOperands<'a, B, T> = (
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
);

/// `y = x @ w^T + b`, then GELU (tanh form) when `gelu` is 1.
/// Grid: `(cdiv(N, BN), cdiv(M, BM))`.
#[tile::kernel(T = [f32, bf16, f16], BM = [16], BN = [64], BK = [8])]
pub fn linear_ffma<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
) {
    let n = block_id(0);
    let m = block_id(1);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(K, BK) {
        let xs = x.load([m, k], [BM, BK]).cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + (xs * ws).sum(2).reshape([BM, BN]);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = residual + x @ w^T + b`, as [`linear_ffma`] multiplies.
/// Grid: `(cdiv(N, BN), cdiv(M, BM))`.
#[tile::kernel(T = [f32, bf16, f16], BM = [16], BN = [64], BK = [8])]
pub fn linear_residual_ffma<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    residual: &Tensor<T, { [M, N] }>,
    y: &mut Tensor<T, { [M, N] }>,
) {
    let n = block_id(0);
    let m = block_id(1);
    let mut acc = residual.load([m, n], [BM, BN]).cast::<f32>() + b.load([n], [BN]).cast::<f32>();
    for k in 0..cdiv(K, BK) {
        let xs = x.load([m, k], [BM, BK]).cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + (xs * ws).sum(2).reshape([BM, BN]);
    }
    y.store([m, n], acc.cast::<T>());
}

/// The grid for `y: [M, N]`.
pub fn grid(m: usize, n: usize) -> (u32, u32) {
    (n.div_ceil(64) as u32, m.div_ceil(16) as u32)
}

/// `y = x @ w^T + b` ([`linear_ffma`]), then GELU where `gelu`, on `on`.
pub fn run<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    w: &B::Tensor<T>,
    b: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<()> {
    let [m, n] = dims("y", y.shape())?;
    linear_ffma::launch_with(on, &[16, 64, 8], grid(m, n), x, w, b, y, gelu as i32)
}

/// `y = residual + x @ w^T + b` ([`linear_residual_ffma`]) on `on`.
pub fn run_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<()> {
    let [m, n] = dims("y", y.shape())?;
    linear_residual_ffma::launch_with(on, &[16, 64, 8], grid(m, n), x, w, b, residual, y)
}
