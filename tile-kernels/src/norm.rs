//! Row normalizations over `[rows, cols]`, whole rows in one `BLOCK`-wide
//! tile (`BLOCK >= cols`), [`rows_per_block`] rows per block. Statistics are
//! computed in f32, LayerNorm's of f32 rows of the values less the row's
//! first (a row with a large offset keeps its precision). [`run_layer_norm`] and
//! [`run_rms_norm`] pick the tile width for the rows; the kernels' declared
//! shapes are checked at launch.

use crate::softmax::{rows_cols, rows_per_block};
use tile::Element;
use tile::prelude::*;

/// `(x, weight, bias, eps)` of a LayerNorm on backend `B`.
pub type LayerNormOperands<'a, B, T> = (
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
    f32,
);

/// LayerNorm: `y = (x - mean) / sqrt(var + eps) * weight + bias`, with
/// the statistics of the values less the row's first where `SHIFT` is 1
/// (f32 rows; [`run_layer_norm`] picks it).
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 512, 1024, 2048, 4096, 8192], SHIFT = [0, 1])]
pub fn layer_norm<T, const BLOCK: usize, const SHIFT: usize>(
    x: &Tensor<T, { [M, N] }>,
    weight: &Tensor<T, { [N] }>,
    bias: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    eps: f32,
) {
    let rows = max(1, 4096 / BLOCK);
    let r = block_id(0);
    let n = N as f32;
    let t = x.load([r, 0], [rows, BLOCK]).cast::<f32>();
    let mut shifted = t;
    if SHIFT == 1 {
        // An f32 value or sum rounds at the scale of the row, which with a
        // large offset dwarfs its spread (the mean itself may not be an
        // f32): the statistics are taken of the values less the row's
        // first, exact near it (`mean` is theirs). Padding, taken as
        // `first`, adds nothing to `mean`.
        let first = x.load([r, 0], [rows, 1]).cast::<f32>();
        shifted = select(arange(BLOCK) < N, t, first) - first;
    }
    // Two passes over registers; each padded column adds `mean²` to the
    // squares, taken back out.
    let mean = shifted.sum(1) / n;
    let centered = shifted - mean;
    let squares = (centered * centered).sum(1) - (BLOCK as f32 - n) * mean * mean;
    let rstd = rsqrt(max(squares, 0.0) / n + eps);
    let w = weight.load([0], [BLOCK]).cast::<f32>();
    let b = bias.load([0], [BLOCK]).cast::<f32>();
    y.store([r, 0], (centered * rstd * w + b).cast::<T>());
}

/// RMSNorm: `y = x / sqrt(mean(x^2) + eps) * weight`.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 512, 1024, 2048, 4096, 8192])]
pub fn rms_norm<T, const BLOCK: usize>(
    x: &Tensor<T, { [M, N] }>,
    weight: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    eps: f32,
) {
    let rows = max(1, 4096 / BLOCK);
    let r = block_id(0);
    let t = x.load([r, 0], [rows, BLOCK]).cast::<f32>();
    let rstd = rsqrt((t * t).sum(1) / N as f32 + eps);
    let w = weight.load([0], [BLOCK]).cast::<f32>();
    y.store([r, 0], (t * rstd * w).cast::<T>());
}

/// The tile width for rows of `cols` elements: the next power of two, at
/// least 256 (the narrowest built); `Error::NotBuilt` past 8192.
fn block_for(cols: usize) -> usize {
    cols.next_power_of_two().max(256)
}

/// `(BLOCK, grid)` of a normalization of `x: [rows, cols]`.
fn block_and_grid(x: &[usize]) -> tile::Result<(usize, u32)> {
    let (rows, cols) = rows_cols(x)?;
    let block = block_for(cols);
    Ok((block, rows.div_ceil(rows_per_block(block)) as u32))
}

/// LayerNorm of every row of `x: [rows, cols]` into `y` on `on`, with
/// `weight` and `bias` of `[cols]`.
pub fn run_layer_norm<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    weight: &B::Tensor<T>,
    bias: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
    eps: f32,
) -> tile::Result<()> {
    let (block, grid) = block_and_grid(x.shape())?;
    // 16-bit values are exact in f32 and coarse: the f32 sums of a row
    // round far below their spacing, so they need no shift.
    let shift = (T::DTYPE == tile::DType::F32) as usize;
    layer_norm::launch_with(on, &[block, shift], grid, x, weight, bias, y, eps)
}

/// RMSNorm of every row of `x: [rows, cols]` into `y` on `on`, with
/// `weight` of `[cols]`.
pub fn run_rms_norm<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    weight: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
    eps: f32,
) -> tile::Result<()> {
    let (block, grid) = block_and_grid(x.shape())?;
    rms_norm::launch_with(on, &[block], grid, x, weight, y, eps)
}
