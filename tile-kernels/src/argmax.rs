//! Each row's largest value and its position: greedy decoding's pick, on
//! the GPU, so that a step downloads one token per sequence instead of
//! its logits.

use tile::Element;
use tile::prelude::*;

/// `value[r] = max x[r]` and `index[r]` its first position, `BLOCK`
/// columns at a time, one row per block. NaN is skipped, as `max` skips
/// it; a row of NaN and −∞ gives −∞ at position 0.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 4096])]
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
    let block = if cols > 1024 { 4096 } else { 1024 };
    argmax_rows::launch_with(on, &[block], rows as u32, x, value, index)
}
