//! Rows of tables picked by index: GPT-2's token plus position embedding,
//! and the gather of chosen rows (the last position of each prompt, say).

use crate::shapes::dims;
use tile::TensorView;

/// `out[i] = wte[tokens[i]] + wpe[positions[i]]`; grid
/// `(tokens, cdiv(channels, BLOCK))`. An id outside its table reads zeros
/// (callers validate ids first).
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 1024])]
pub fn embedding<T, const BLOCK: usize>(
    tokens: &Tensor<i32, { [N] }>,
    positions: &Tensor<i32, { [N] }>,
    wte: &Tensor<T, { [V, C] }>,
    wpe: &Tensor<T, { [P, C] }>,
    out: &mut Tensor<T, { [N, C] }>,
) {
    let i = block_id(0);
    let j = block_id(1);
    let token = wte.load([tokens.get([i]), j], [1, BLOCK]).cast::<f32>();
    let position = wpe.load([positions.get([i]), j], [1, BLOCK]).cast::<f32>();
    out.store([i, j], (token + position).cast::<T>());
}

/// `out[i] = x[rows[i]]`; grid `(rows, cdiv(columns, BLOCK))`. A row index
/// outside `x` reads zeros.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 1024])]
pub fn gather_rows<T, const BLOCK: usize>(
    rows: &Tensor<i32, { [N] }>,
    x: &Tensor<T, { [M, C] }>,
    out: &mut Tensor<T, { [N, C] }>,
) {
    let i = block_id(0);
    let j = block_id(1);
    out.store([i, j], x.load([rows.get([i]), j], [1, BLOCK]));
}

/// The tile width for rows of `columns`.
fn block(columns: usize) -> usize {
    if columns > 512 { 1024 } else { 256 }
}

/// [`embedding`] of `tokens` at `positions` (both `[N]`) into `out: [N, C]`
/// from `wte: [V, C]` and `wpe: [P, C]`.
pub fn run<T: tile::Element, B: tile::Backend>(
    on: &B,
    (tokens, positions): (&B::Tensor<i32>, &B::Tensor<i32>),
    (wte, wpe): (&B::Tensor<T>, &B::Tensor<T>),
    out: &mut B::Tensor<T>,
) -> tile::Result<()> {
    let [n, c] = dims("out", out.shape())?;
    let b = block(c);
    embedding::launch_with(
        on,
        &[b],
        (n as u32, c.div_ceil(b) as u32),
        tokens,
        positions,
        wte,
        wpe,
        out,
    )
}

/// [`gather_rows`]: `out[i] = x[rows[i]]` for `x: [M, C]`, `rows: [N]`,
/// `out: [N, C]`.
pub fn run_gather_rows<T: tile::Element, B: tile::Backend>(
    on: &B,
    rows: &B::Tensor<i32>,
    x: &B::Tensor<T>,
    out: &mut B::Tensor<T>,
) -> tile::Result<()> {
    let [n, c] = dims("out", out.shape())?;
    let b = block(c);
    gather_rows::launch_with(on, &[b], (n as u32, c.div_ceil(b) as u32), rows, x, out)
}
