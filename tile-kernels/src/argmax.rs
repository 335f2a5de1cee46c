//! Each row's largest value and its position: greedy decoding's pick, on
//! the GPU, so that a step downloads one token per sequence instead of
//! its logits. And the same of the row scaled by `1 / T` plus Gumbel
//! noise ([`gumbel_max_rows`]): the Gumbel-max trick, whose position is a
//! sample of `softmax(x / T)`, temperature sampling without a sort.

use tile::Element;
use tile::prelude::*;

/// `value[r] = max x[r]` and `index[r]` its first position, `BLOCK`
/// columns at a time, one row per block. NaN is skipped, as `max` skips
/// it; a row of NaN and −∞ gives −∞ at position 0.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 16384], num_warps = 16)]
pub fn argmax_rows<T, const BLOCK: usize>(
    x: &Tensor<T, { [M, N] }>,
    value: &mut Tensor<f32, { [M] }>,
    index: &mut Tensor<i32, { [M] }>,
) {
    let row = block_id(0);
    let mut best = full([1, 1], f32::NEG_INFINITY);
    let mut at = zeros([1, 1]).cast::<i32>();
    for j in 0..cdiv(N, BLOCK) {
        let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
        let m = t.max(1);
        // Strictly larger: on a tie the earlier tile's position stays.
        let larger = m > best;
        at = select(larger, t.argmax(1) + j * BLOCK as i32, at);
        best = select(larger, m, best);
    }
    value.store([row], best.reshape([1]));
    index.store([row], at.reshape([1]));
}

/// Each row of `x: [rows, cols]`'s largest value into `value: [rows]` and
/// its first position into `index: [rows]`.
pub fn run<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    value: &mut B::Tensor<f32>,
    index: &mut B::Tensor<i32>,
) -> tile::Result<()> {
    let (rows, cols) = crate::softmax::rows_cols(x.shape())?;
    let block = if cols > 1024 { 16384 } else { 1024 };
    argmax_rows::launch_with(on, &[block], rows as u32, x, value, index)
}

/// `index[r]` = the position of the largest `x[r, c] / T + g(key[r], first + c)`,
/// `value[r]` that largest; `g` is Gumbel noise, `-ln(-ln u)` with `u` in
/// (0, 1) from a hash of the row's key and the column's number counted from
/// `first` (a rank's first vocabulary column, for a vocabulary split over
/// ranks): the position is a sample of `softmax(x[r] / T)`, the same for a
/// key whichever block or rank holds the column. `inv_t` is `1 / T`.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 16384], num_warps = 16)]
pub fn gumbel_max_rows<T, const BLOCK: usize>(
    x: &Tensor<T, { [M, N] }>,
    key: &Tensor<u32, { [M] }>,
    value: &mut Tensor<f32, { [M] }>,
    index: &mut Tensor<i32, { [M] }>,
    inv_t: f32,
    first: i32,
) {
    let row = block_id(0);
    let k = full([1, 1], key.get([row]));
    let mut best = full([1, 1], f32::NEG_INFINITY);
    let mut at = zeros([1, 1]).cast::<i32>();
    for j in 0..cdiv(N, BLOCK) {
        let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
        let column = (first + j * BLOCK as i32 + arange(BLOCK))
            .cast::<u32>()
            .reshape([1, BLOCK]);
        // lowbias32 (Wellons) of the column, mixed with the key, again.
        let mut h = column;
        for _ in 0..2 {
            h = h ^ (h >> 16);
            h = h * 0x7feb352d;
            h = h ^ (h >> 15);
            h = h * 0x846ca68b;
            h = h ^ (h >> 16);
            h = h ^ k;
        }
        let u = ((h >> 8).cast::<f32>() + 0.5) * (1.0 / 16777216.0);
        let s = t * inv_t - log(-log(u));
        let m = s.max(1);
        let larger = m > best;
        at = select(larger, s.argmax(1) + j * BLOCK as i32, at);
        best = select(larger, m, best);
    }
    value.store([row], best.reshape([1]));
    index.store([row], at.reshape([1]));
}

/// A sample of `softmax(x[r] / T)` per row of `x: [rows, cols]`, by
/// [`gumbel_max_rows`] with `key: [rows]`: its position into `index` and
/// its perturbed score into `value` (a split vocabulary takes the rank
/// with the largest). `first` numbers the columns from that.
pub fn run_gumbel<T: Element, B: Backend>(
    on: &B,
    (x, key): (&B::Tensor<T>, &B::Tensor<u32>),
    (temperature, first): (f32, usize),
    value: &mut B::Tensor<f32>,
    index: &mut B::Tensor<i32>,
) -> tile::Result<()> {
    let (rows, cols) = crate::softmax::rows_cols(x.shape())?;
    let block = if cols > 1024 { 16384 } else { 1024 };
    let grid = rows as u32;
    let first = first as i32;
    gumbel_max_rows::launch_with(on, &[block], grid, x, key, value, index, 1.0 / temperature, first)
}
