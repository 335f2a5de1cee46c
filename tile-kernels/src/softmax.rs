//! Row-wise softmax over `[rows, cols]`, one block per row.
//!
//! [`softmax`] holds the whole row in one tile (`BLOCK >= cols`);
//! [`softmax_online`] streams rows of any length through `BLOCK`-wide tiles,
//! keeping a running maximum and sum (the online softmax), then writes a
//! second pass. [`run`] picks between them.

use tile::prelude::*;

/// `y[r] = exp(x[r] - max x[r]) / sum exp(x[r] - max x[r])`, row in one tile.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [32, 128, 512, 1024, 2048, 4096, 8192])]
pub fn softmax<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let row = block_id(0);
    let t = x.load([row, 0], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
    let e = exp(t - t.max(1));
    y.store([row, 0], (e / e.sum(1)).cast::<T>());
}

/// The same for rows of any length, `BLOCK` columns at a time.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 2048])]
pub fn softmax_online<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let row = block_id(0);
    let tiles = cdiv(x.shape(1), BLOCK);
    let mut m = full([1, 1], f32::NEG_INFINITY);
    let mut l = zeros([1, 1]);
    for j in 0..tiles {
        let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
        let m_new = max(m, t.max(1));
        l = l * exp(m - m_new) + exp(t - m_new).sum(1);
        m = m_new;
    }
    for j in 0..tiles {
        let t = x.load([row, j], [1, BLOCK]).cast::<f32>();
        y.store([row, j], (exp(t - m) / l).cast::<T>());
    }
}

/// Softmax of every row of `x` into `y` (both `[rows, cols]`): one pass when
/// a row fits a tile of at most 8192 elements, the online form otherwise.
pub fn run<T: tile::Element>(stream: &Stream, x: &Tensor<T>, y: &mut Tensor<T>) -> tile::Result<()> {
    let (rows, cols) = rows_cols(x.shape())?;
    let grid = rows as u32;
    match cols.next_power_of_two().max(32) {
        32 => softmax::launch::<T, 32>(stream, grid, x, y),
        128 => softmax::launch::<T, 128>(stream, grid, x, y),
        64 | 256 | 512 => softmax::launch::<T, 512>(stream, grid, x, y),
        1024 => softmax::launch::<T, 1024>(stream, grid, x, y),
        2048 => softmax::launch::<T, 2048>(stream, grid, x, y),
        4096 => softmax::launch::<T, 4096>(stream, grid, x, y),
        8192 => softmax::launch::<T, 8192>(stream, grid, x, y),
        _ => softmax_online::launch::<T, 2048>(stream, grid, x, y),
    }
}

/// `(rows, cols)` of a 2-D shape.
pub(crate) fn rows_cols(shape: &[usize]) -> tile::Result<(usize, usize)> {
    match shape {
        [r, c] if *r > 0 => Ok((*r, *c)),
        _ => Err(tile::Error::Shape(format!(
            "expected a [rows, cols] tensor with at least one row, got shape {shape:?}"
        ))),
    }
}
