//! Matrix products on the tensor cores: `c = a @ b` with `a: [M, K]`,
//! `b: [K, N]`, row-major, accumulated in f32 (`mma`), stored as `T`.
//!
//! Each kernel declares its configurations and its tuning, so its module
//! has `run` (the configuration tuned for the problem's size class on a
//! GPU, the first on the CPU; see `tile::autotune`) and `run_with` (one
//! configuration). [`run`], [`run_linear`], [`run_linear_residual`] and
//! [`run_batched`] check that the operands' shapes agree
//! (`tile::Error::Shape` naming the one that does not) and call them.

use crate::shapes::{dims, expect_shapes};
use tile::{Backend, Element, TensorView, Tuned};

/// `(x, w, b)` of a linear layer on backend `B`.
pub type LinearOperands<'a, B, T> = (
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
);

/// `c = a @ b` with the configuration tuned for this problem class; returns it.
pub fn run<T: Element, B: Backend>(
    on: &B,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    let ([m, k], [_, n]) = (dims("a", a.shape())?, dims("b", b.shape())?);
    let from = format!("c = a @ b with a: [M, K] = [{m}, {k}]");
    expect_shapes(&from, &[("b", b.shape(), &[k, n]), ("c", c.shape(), &[m, n])])?;
    matmul::run(on, a, b, c)
}

/// Checks `y = [residual +] x @ w^T + b`'s shapes against each other.
pub(crate) fn linear_shapes<V: TensorView>((x, w, b): (&V, &V, &V), residual: Option<&V>, y: &V) -> tile::Result<()> {
    let ([m, k], [n, _]) = (dims("x", x.shape())?, dims("w", w.shape())?);
    let from = format!("y = x @ w^T + b with x: [M, K] = [{m}, {k}], w: [N, K] = [{n}, ..]");
    let (nk, n1, mn) = ([n, k], [n], [m, n]);
    let mut tensors = vec![("w", w.shape(), &nk[..]), ("b", b.shape(), &n1[..])];
    tensors.extend(residual.map(|r| ("residual", r.shape(), &mn[..])));
    tensors.push(("y", y.shape(), &mn));
    expect_shapes(&from, &tensors)
}

/// `y = x @ w^T + b` (then GELU if `gelu`), tuned; returns the configuration.
pub fn run_linear<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    w: &B::Tensor<T>,
    b: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tuned> {
    linear_shapes((x, w, b), None, y)?;
    linear::run(on, x, w, b, y, gelu as i32)
}

/// `y = residual + x @ w^T + b`, tuned; returns the configuration.
pub fn run_linear_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    linear_shapes((x, w, b), Some(residual), y)?;
    linear_residual::run(on, x, w, b, residual, y)
}

/// `c[i] = a[i] @ b[i]` for `a: [B, M, K]`, `b: [B, K, N]`, tuned (the
/// batch's size class in the key); returns the configuration.
pub fn run_batched<T: Element, B: Backend>(
    on: &B,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    let ([batch, m, k], [_, _, n]) = (dims("a", a.shape())?, dims("b", b.shape())?);
    let from = format!("c[i] = a[i] @ b[i] with a: [B, M, K] = [{batch}, {m}, {k}]");
    expect_shapes(
        &from,
        &[("b", b.shape(), &[batch, k, n]), ("c", c.shape(), &[batch, m, n])],
    )?;
    batched_matmul::run(on, a, b, c)
}

/// `c = a @ b`. A 1-D grid, a block per output tile; `group_tiles` hands
/// consecutive blocks the tiles of `8 * BN / BM` tile-rows column by
/// column, so a wave of blocks shares operand tiles in L2. A group spans
/// 8·BN rows of `a` whatever the tile's shape: wide tiles, of which a wave
/// covers fewer columns, take taller groups. The linear layers below group
/// alike.
///
/// The configurations are `run`'s tuning candidates, the longer K-step
/// first where two share a tile (the choice when a grid fills less than a
/// wave: the most blocks, the first of those). Not built: f32 with a K-step
/// of 64, whose fragments would spill registers, and 128x64 tiles, which
/// the tuner chose on no shape.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = cdiv(a.shape(0), BM) * cdiv(b.shape(1), BN),
    key = [a.shape(0), a.shape(1), b.shape(1)],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn matmul<T, const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) {
    let [m, n] = group_tiles(block_id(0), cdiv(a.shape(0), BM), cdiv(b.shape(1), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<T>());
}

/// `y = x @ w^T + b`, then tanh-GELU when `gelu` is 1: a linear layer with
/// `x: [M, K]`, `w: [N, K]` (PyTorch's layout, read transposed in place),
/// `b: [N]`, `y: [M, N]`. Built and tuned as [`matmul`] is.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = cdiv(x.shape(0), BM) * cdiv(w.shape(0), BN),
    key = [x.shape(0), x.shape(1), w.shape(0)],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn linear<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    y: &mut Tensor<T>,
    gelu: i32,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(x.shape(0), BM), cdiv(w.shape(0), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(x.shape(1), BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = residual + x @ w^T + b`: a projection fused with the residual
/// connection after it. Shapes as [`linear`]; `residual: [M, N]`.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = cdiv(x.shape(0), BM) * cdiv(w.shape(0), BN),
    key = [x.shape(0), x.shape(1), w.shape(0)],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 64, BK = 64),
        (BM = 128, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn linear_residual<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    residual: &Tensor<T>,
    y: &mut Tensor<T>,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(x.shape(0), BM), cdiv(w.shape(0), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(x.shape(1), BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>() + residual.load([m, n], [BM, BN]).cast::<f32>();
    y.store([m, n], out.cast::<T>());
}

/// `c[i] = a[i] @ b[i]` for a batch: `a: [B, M, K]`, `b: [B, K, N]`,
/// `c: [B, M, N]`. Grid: the output tiles of one product along x, the batch along y.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = (cdiv(a.shape(1), BM) * cdiv(b.shape(2), BN), a.shape(0)),
    key = [a.shape(0), a.shape(1), a.shape(2), b.shape(2)],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 64, BK = 64),
        (BM = 128, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn batched_matmul<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &mut Tensor<T>,
) {
    let batch = block_id(1);
    let tiles_n = cdiv(b.shape(2), BN);
    let m = block_id(0) / tiles_n;
    let n = block_id(0) % tiles_n;
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(2), BK) {
        let x = a.load([batch, m, k], [1, BM, BK]).reshape([BM, BK]);
        let y = b.load([batch, k, n], [1, BK, BN]).reshape([BK, BN]);
        acc = mma(x, y, acc);
    }
    c.store([batch, m, n], acc.reshape([1, BM, BN]).cast::<T>());
}
