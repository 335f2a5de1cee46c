//! Token plus position embedding, GPT-2 style.

/// `out[i] = wte[tokens[i]] + wpe[i % seq_len]` for the flattened
/// `(batch, position)` index `i`; grid `(tokens, cdiv(channels, BLOCK))`.
/// A token id outside the table reads zeros (callers validate ids first).
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 1024])]
pub fn embedding<T, const BLOCK: usize>(
    tokens: &Tensor<i32>,
    wte: &Tensor<T>,
    wpe: &Tensor<T>,
    out: &mut Tensor<T>,
    seq_len: i32,
) {
    let i = block_id(0);
    let j = block_id(1);
    let token = wte.load([tokens.get([i]), j], [1, BLOCK]).cast::<f32>();
    let position = wpe.load([i % seq_len, j], [1, BLOCK]).cast::<f32>();
    out.store([i, j], (token + position).cast::<T>());
}
