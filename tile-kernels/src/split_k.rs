//! Linear layers of a few rows (decoding) on the tensor cores, split
//! along K: `y = x @ w^T + b` with `x: [M, K]`, `w: [N, K]`, `b: [N]`,
//! `y: [M, N]`, M up to [`crate::gemv::MAX_ROWS`].
//!
//! From 4 rows, [`crate::gemv`]'s CUDA cores take longer for a layer's products
//! than its weights take to arrive, and the tensor-core kernels of
//! [`crate::matmul`], whose smallest tile is 64×64 over the whole of K,
//! give GPT-2's layers 12 to 48 blocks. These kernels take 16-row tiles
//! and split each tile's K steps among the `S` blocks of a thread-block
//! cluster, whose first block sums their shares through distributed shared
//! memory (`cluster_gather`): split-K with no scratch and no count. The
//! tuner weighs them against the other two in
//! [`crate::matmul::run_linear`].

use crate::gemv::tuned_cold;
use crate::linear::LinearOperands;
use tile::{Backend, Element, Tuned};

/// `y = x @ w^T + b`, then tanh-GELU when `gelu` is 1, on the tensor
/// cores, split along K: the `S` blocks of a cluster each multiply one
/// `[BM, BN]` tile of `y` over their share of the K steps, and the first
/// sums the shares (`cluster_gather`: through distributed shared memory,
/// no scratch in global memory, no count of the blocks done), adds the
/// bias and stores. A tile's blocks are consecutive; the tiles go columns
/// fastest. Each block first asks L2 for its weights (`prefetch`), as
/// [`crate::gemv::gemv`] does.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM) * S,
    key = [M, K, N],
    // f32 multiplies through tf32 (half the K step: the same bytes).
    configs = [
        (T = [f16, bf16], BM = 16, BN = 64, BK = 64, S = 2),
        (T = [f16, bf16], BM = 16, BN = 64, BK = 64, S = 4),
        (T = [f16, bf16], BM = 16, BN = 32, BK = 128, S = 2),
        (T = [f16, bf16], BM = 16, BN = 32, BK = 128, S = 4),
        (T = f32, BM = 16, BN = 64, BK = 32, S = 2),
        (T = f32, BM = 16, BN = 64, BK = 32, S = 4),
        (T = f32, BM = 16, BN = 32, BK = 64, S = 2),
        (T = f32, BM = 16, BN = 32, BK = 64, S = 4),
    ]
)]
pub fn linear_split_k<T, const BM: usize, const BN: usize, const BK: usize, const S: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
) {
    let split = block_id(0) % S;
    let n = block_id(0) / S % cdiv(N, BN);
    let m = block_id(0) / S / cdiv(N, BN);
    let steps = cdiv(cdiv(K, BK), S);
    let first = split * steps;
    let last = min(first + steps, cdiv(K, BK));
    for k in first..last {
        w.prefetch([n, k], [BN, BK]);
    }
    let mut acc = zeros([BM, BN]);
    for k in first..last {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let total = acc.cluster_gather(S).reshape([S, BM, BN]).sum(0).reshape([BM, BN]);
    if split == 0 {
        let out = total + b.load([n], [BN]).cast::<f32>();
        if gelu == 1 {
            y.store([m, n], gelu(out).cast::<T>());
        } else {
            y.store([m, n], out.cast::<T>());
        }
    }
}

/// `y = residual + x @ w^T + b`, as [`linear_split_k`] multiplies;
/// `residual: [M, N]`.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM) * S,
    key = [M, K, N],
    // f32 multiplies through tf32 (half the K step: the same bytes).
    configs = [
        (T = [f16, bf16], BM = 16, BN = 64, BK = 64, S = 2),
        (T = [f16, bf16], BM = 16, BN = 64, BK = 64, S = 4),
        (T = [f16, bf16], BM = 16, BN = 32, BK = 128, S = 2),
        (T = [f16, bf16], BM = 16, BN = 32, BK = 128, S = 4),
        (T = f32, BM = 16, BN = 64, BK = 32, S = 2),
        (T = f32, BM = 16, BN = 64, BK = 32, S = 4),
        (T = f32, BM = 16, BN = 32, BK = 64, S = 2),
        (T = f32, BM = 16, BN = 32, BK = 64, S = 4),
    ]
)]
pub fn linear_split_k_residual<T, const BM: usize, const BN: usize, const BK: usize, const S: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    residual: &Tensor<T, { [M, N] }>,
    y: &mut Tensor<T, { [M, N] }>,
) {
    let split = block_id(0) % S;
    let n = block_id(0) / S % cdiv(N, BN);
    let m = block_id(0) / S / cdiv(N, BN);
    let steps = cdiv(cdiv(K, BK), S);
    let first = split * steps;
    let last = min(first + steps, cdiv(K, BK));
    for k in first..last {
        w.prefetch([n, k], [BN, BK]);
    }
    let mut acc = zeros([BM, BN]);
    for k in first..last {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let total = acc.cluster_gather(S).reshape([S, BM, BN]).sum(0).reshape([BM, BN]);
    if split == 0 {
        let out = total + b.load([n], [BN]).cast::<f32>() + residual.load([m, n], [BM, BN]).cast::<f32>();
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = x @ w^T + b` (then GELU if `gelu`) split along K over a cluster
/// ([`linear_split_k`]), tuned as [`crate::gemv::run`] is; returns the
/// configuration.
pub fn run<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tuned> {
    tuned_cold(on, &linear_split_k::KERNEL, (x, w), |c, w| {
        linear_split_k::run_with(on, c, x, w, b, y, gelu as i32)
    })
}

/// `y = residual + x @ w^T + b` split along K over a cluster
/// ([`linear_split_k_residual`]), tuned as [`crate::gemv::run`] is; returns
/// the configuration.
pub fn run_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    tuned_cold(on, &linear_split_k_residual::KERNEL, (x, w), |c, w| {
        linear_split_k_residual::run_with(on, c, x, w, b, residual, y)
    })
}
