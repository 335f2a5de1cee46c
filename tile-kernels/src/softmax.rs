//! Row-wise softmax over `[rows, cols]`.
//!
//! [`softmax`] holds whole rows in one tile (`BLOCK >= cols`); short rows
//! share a block ([`rows_per_block`]) so that each block moves enough bytes.
//! [`softmax_online`] streams rows of any length through `BLOCK`-wide tiles,
//! one row per block, keeping a running maximum and sum (the online
//! softmax), then writes a second pass. [`run`] picks between them.

use tile::Element;
use tile::prelude::*;

/// `y[r] = exp(x[r] - max x[r]) / sum exp(x[r] - max x[r])` for
/// [`rows_per_block`]`(BLOCK)` rows per block.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [32, 128, 512, 1024, 2048, 4096, 8192])]
pub fn softmax<T, const BLOCK: usize>(x: &Tensor<T, { [M, N] }>, y: &mut Tensor<T, { [M, N] }>) {
    let rows = max(1, 4096 / BLOCK);
    let r = block_id(0);
    let t = x.load([r, 0], [rows, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
    let e = exp(t - t.max(1));
    y.store([r, 0], (e * (1.0 / e.sum(1))).cast::<T>());
}

/// Rows per block of the tile kernels that hold whole rows: `max(1, 4096 / BLOCK)`.
pub fn rows_per_block(block: usize) -> usize {
    (4096 / block).max(1)
}

/// The same for rows of any length, `BLOCK` columns at a time, one row per block.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 2048])]
pub fn softmax_online<T, const BLOCK: usize>(x: &Tensor<T, { [M, N] }>, y: &mut Tensor<T, { [M, N] }>) {
    let row = block_id(0);
    let tiles = cdiv(N, BLOCK);
    let mut m = full([1, 1], f32::NEG_INFINITY);
    let mut l = zeros([1, 1]);
    for j in 0..tiles {
        let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
        let m_new = max(m, t.max(1));
        l = l * exp(m - m_new) + exp(t - m_new).sum(1);
        m = m_new;
    }
    let inv = 1.0 / l;
    for j in 0..tiles {
        let t = x.load([row, j], [1, BLOCK]).cast::<f32>();
        y.store([row, j], (exp(t - m) * inv).cast::<T>());
    }
}

/// Softmax of every row of `x` into `y` (both `[rows, cols]`) on `on`: one
/// pass when a row fits a tile of at most 8192 elements, the online form
/// otherwise.
pub fn run<T: Element, B: Backend>(on: &B, x: &B::Tensor<T>, y: &mut B::Tensor<T>) -> tile::Result<()> {
    let (rows, cols) = rows_cols(x.shape())?;
    let block = match cols.next_power_of_two() {
        0..=32 => 32,
        64 | 128 => 128,
        256 | 512 => 512,
        n => n,
    };
    if block > 8192 {
        return softmax_online::launch_with(on, &[2048], rows as u32, x, y);
    }
    softmax::launch_with(on, &[block], rows.div_ceil(rows_per_block(block)) as u32, x, y)
}

/// `(rows, cols)` of a 2-D shape (no rows: a launch that runs nothing).
pub(crate) fn rows_cols(shape: &[usize]) -> tile::Result<(usize, usize)> {
    match shape {
        [r, c] => Ok((*r, *c)),
        _ => Err(tile::Error::Shape(format!(
            "expected a [rows, cols] tensor, got shape {shape:?}"
        ))),
    }
}
