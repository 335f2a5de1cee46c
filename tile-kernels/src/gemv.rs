//! Linear layers of a few rows (decoding: one row per sequence), as
//! matrix–vector products on the CUDA cores: `y = x @ w^T + b` with
//! `x: [M, K]`, `w: [N, K]`, `b: [N]`, `y: [M, N]`, M up to [`MAX_ROWS`].
//!
//! At such M a layer is bound by reading `w` once. The tensor-core kernels
//! of [`crate::matmul`] tile 64 rows and 64 or more columns, which leaves
//! most SMs idle on GPT-2's 768-column layers; these kernels give each
//! block a few columns and the whole of K, so every SM streams weights:
//! `BN` rows of `w` in `[BN, BK]` tiles along K, multiplied element-wise
//! into a `[BM, BN, BK]` accumulator that is summed along K once, at the
//! end. A long `BK` gives each thread several independent loads in flight,
//! which is what streams weights when a layer has few blocks per SM. The
//! tuner picks `BN` and `BK` per size class of `[M, K, N]`, and `BM` among
//! those that take every row in one block ([`run`]). Each block first asks
//! L2 for its weights (`prefetch`): that runs while the previous kernel on
//! the stream ends, since the weights are no kernel's output.
//! Products and sums are in f32, so f32 layers are IEEE f32 here.

use crate::matmul::LinearOperands;
use crate::norm::LayerNormOperands;
use tile::autotune::{size_class, tune};
use tile::{Backend, Element, KernelSpec, TensorView, Tuned};

/// The most rows for which [`crate::matmul::run_linear`] and
/// [`crate::matmul::run_linear_residual`] weigh these kernels against the
/// tensor cores' (which win above it).
pub const MAX_ROWS: usize = 16;

/// `y = x @ w^T + b`, then tanh-GELU when `gelu` is 1. A block per `BN`
/// columns of `BM` rows, the columns fastest.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM),
    key = [M, K, N],
    configs = [
        (BM = 1, BN = 2, BK = 1024),
        (BM = 1, BN = 4, BK = 1024),
        (BM = 1, BN = 8, BK = 512),
        (BM = 1, BN = 16, BK = 256),
        (BM = 2, BN = 2, BK = 1024),
        (BM = 2, BN = 4, BK = 1024),
        (BM = 4, BN = 1, BK = 1024),
        (BM = 4, BN = 2, BK = 1024),
        (BM = 4, BN = 4, BK = 512),
        (BM = 8, BN = 2, BK = 512),
        (BM = 16, BN = 2, BK = 256),
        (BM = 16, BN = 4, BK = 128),
    ]
)]
pub fn gemv<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
) {
    let n = block_id(0) % cdiv(N, BN);
    let m = block_id(0) / cdiv(N, BN);
    for k in 0..cdiv(K, BK) {
        w.prefetch([n, k], [BN, BK]);
    }
    let mut acc = zeros([BM, BN, BK]);
    for k in 0..cdiv(K, BK) {
        let xs = x.load([m, k], [BM, BK]).cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + xs * ws;
    }
    let out = acc.sum(2).reshape([BM, BN]) + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = residual + x @ w^T + b`, as [`gemv`] multiplies; `residual: [M, N]`.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM),
    key = [M, K, N],
    configs = [
        (BM = 1, BN = 2, BK = 1024),
        (BM = 1, BN = 4, BK = 1024),
        (BM = 1, BN = 8, BK = 512),
        (BM = 1, BN = 16, BK = 256),
        (BM = 2, BN = 2, BK = 1024),
        (BM = 2, BN = 4, BK = 1024),
        (BM = 4, BN = 1, BK = 1024),
        (BM = 4, BN = 2, BK = 1024),
        (BM = 4, BN = 4, BK = 512),
        (BM = 8, BN = 2, BK = 512),
        (BM = 16, BN = 2, BK = 256),
        (BM = 16, BN = 4, BK = 128),
    ]
)]
pub fn gemv_residual<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    residual: &Tensor<T, { [M, N] }>,
    y: &mut Tensor<T, { [M, N] }>,
) {
    let n = block_id(0) % cdiv(N, BN);
    let m = block_id(0) / cdiv(N, BN);
    for k in 0..cdiv(K, BK) {
        w.prefetch([n, k], [BN, BK]);
    }
    let mut acc = zeros([BM, BN, BK]);
    for k in 0..cdiv(K, BK) {
        let xs = x.load([m, k], [BM, BK]).cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + xs * ws;
    }
    let out =
        acc.sum(2).reshape([BM, BN]) + b.load([n], [BN]).cast::<f32>() + residual.load([m, n], [BM, BN]).cast::<f32>();
    y.store([m, n], out.cast::<T>());
}

/// `y = layer_norm(x) @ w^T + b`, then tanh-GELU when `gelu` is 1: a
/// LayerNorm (`ln_w`, `ln_b`, `eps`; its output rounded to `T`, as the
/// separate kernel stores it) in the prologue of [`gemv`]. Each block
/// takes its rows' statistics first, of the values less each row's first,
/// as `norm::layer_norm` does, in one pass over K: sums of the shifted
/// values and of their squares, reduced across the block once.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM),
    key = [M, K, N],
    // The tiles of `gemv` that assemble without spills on every target
    // with the LayerNorm's registers added (sm_100a's ptxas spills the others).
    configs = [
        (BM = 1, BN = 4, BK = 1024),
        (BM = 1, BN = 8, BK = 512),
        (BM = 2, BN = 4, BK = 1024),
        (BM = 8, BN = 2, BK = 512),
        (BM = 16, BN = 2, BK = 256),
        (BM = 16, BN = 4, BK = 128),
    ]
)]
pub fn gemv_layer_norm<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    ln_w: &Tensor<T, { [K] }>,
    ln_b: &Tensor<T, { [K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
    eps: f32,
) {
    let n = block_id(0) % cdiv(N, BN);
    let m = block_id(0) / cdiv(N, BN);
    for k in 0..cdiv(K, BK) {
        w.prefetch([n, k], [BN, BK]);
    }
    let first = x.load([m, 0], [BM, 1]).cast::<f32>();
    let mut sum = zeros([BM, BK]);
    let mut squares = zeros([BM, BK]);
    for k in 0..cdiv(K, BK) {
        let t = x.load([m, k], [BM, BK]).cast::<f32>() - first;
        let t = select(k * BK + arange(BK) < K, t, 0.0);
        sum = sum + t;
        squares = squares + t * t;
    }
    let mean = sum.sum(1) / K as f32;
    let rstd = rsqrt(max(squares.sum(1) / K as f32 - mean * mean, 0.0) + eps);
    let mut acc = zeros([BM, BN, BK]);
    for k in 0..cdiv(K, BK) {
        // Less the row's first, then the mean of that: `first + mean`
        // would round at the scale of the row.
        let xk = (x.load([m, k], [BM, BK]).cast::<f32>() - first - mean) * rstd;
        let h = xk * ln_w.load([k], [BK]).cast::<f32>() + ln_b.load([k], [BK]).cast::<f32>();
        let xs = h.cast::<T>().cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + xs * ws;
    }
    let out = acc.sum(2).reshape([BM, BN]) + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = x @ w^T + b` (then GELU if `gelu`), tuned among the tiles whose
/// blocks take every row of `x`; returns the configuration.
pub fn run<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tuned> {
    let (candidates, key) = whole_rows::<T>(&gemv::KERNEL, x.shape(), w.shape());
    tune(on, &key, &candidates, |c| {
        gemv::run_with(on, c, x, w, b, y, gelu as i32)
    })
}

/// `y = residual + x @ w^T + b`, tuned as [`run`] is; returns the configuration.
pub fn run_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    let (candidates, key) = whole_rows::<T>(&gemv_residual::KERNEL, x.shape(), w.shape());
    tune(on, &key, &candidates, |c| {
        gemv_residual::run_with(on, c, x, w, b, residual, y)
    })
}

/// The configurations of `kernel` for `x: [M, K]` and `w: [N, K]` whose
/// blocks take all M rows (`BM` ≥ M; all for more rows than any `BM`),
/// and the tuning key: the kernel, the element type and the size classes
/// of M, K and N. Blocks that split the rows would each read the weights:
/// the tuner, whose launches find them in L2, would not see that cost.
fn whole_rows<T: Element>(kernel: &KernelSpec, x: &[usize], w: &[usize]) -> (Vec<Tuned>, String) {
    let all = kernel.candidates(&[T::DTYPE], false);
    let m = x.first().copied().unwrap_or(0) as i64;
    let whole: Vec<Tuned> = all.iter().copied().filter(|c| c.consts[0] >= m).collect();
    let sizes = [x.first(), x.get(1), w.first()].map(|d| size_class(d.copied().unwrap_or(0)).to_string());
    let key = format!("{}|{}|{}", kernel.module_path, T::DTYPE.name(), sizes.join("x"));
    (if whole.is_empty() { all } else { whole }, key)
}

/// `y = layer_norm(x) @ w^T + b` (then GELU if `gelu`) in one kernel,
/// [`gemv_layer_norm`], tuned as [`run`] is; `norm` is the LayerNorm's
/// `(x, weight, bias, eps)`. Returns the configuration.
pub fn run_layer_norm<T: Element, B: Backend>(
    on: &B,
    (x, ln_w, ln_b, eps): LayerNormOperands<B, T>,
    (w, b): (&B::Tensor<T>, &B::Tensor<T>),
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tuned> {
    let (candidates, key) = whole_rows::<T>(&gemv_layer_norm::KERNEL, x.shape(), w.shape());
    tune(on, &key, &candidates, |c| {
        gemv_layer_norm::run_with(on, c, x, ln_w, ln_b, w, b, y, gelu as i32, eps)
    })
}
