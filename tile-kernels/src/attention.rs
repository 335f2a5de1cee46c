//! Causal self-attention, flash style: each block takes `BQ` queries of one
//! (sequence, head) and streams the keys and values `BK` at a time, keeping a
//! running maximum and sum (online softmax), so scores never go to memory.
//!
//! `qkv: [B, T, 3C]` holds queries, keys and values side by side (as a fused
//! QKV projection writes them), each split into heads of `D` columns;
//! `out: [B, T, C]`. Scores and products use the CUDA cores.

/// `out[b, t, head] = softmax(q k^T * scale, causal) v` for every head.
/// Grid: `(cdiv(T, BQ), B * heads)`.
#[tile::kernel(T = [f32, bf16], BQ = [16], BK = [16], D = [32, 64])]
pub fn causal_attention<T, const BQ: usize, const BK: usize, const D: usize>(
    qkv: &Tensor<T>,
    out: &mut Tensor<T>,
    heads: i32,
    scale: f32,
) {
    let qb = block_id(0);
    let b = block_id(1) / heads;
    let h = block_id(1) % heads;
    // Scores in base 2: exp(s) = exp2(s * log2 e).
    let q = qkv.load([b, qb, h], [1, BQ, D]).cast::<f32>().reshape([BQ, 1, D]) * (scale * 1.4426950408889634);
    let q_pos = (qb * BQ + arange(BQ)).reshape([BQ, 1]);
    let mut m = full([BQ, 1], f32::NEG_INFINITY);
    let mut l = zeros([BQ, 1]);
    let mut acc = zeros([BQ, D]);
    for j in 0..cdiv((qb + 1) * BQ, BK) {
        let k = qkv
            .load([b, j, heads + h], [1, BK, D])
            .cast::<f32>()
            .reshape([1, BK, D]);
        let v = qkv
            .load([b, j, 2 * heads + h], [1, BK, D])
            .cast::<f32>()
            .reshape([1, BK, D]);
        let k_pos = (j * BK + arange(BK)).reshape([1, BK]);
        let s = select(k_pos <= q_pos, (q * k).sum(2).reshape([BQ, BK]), f32::NEG_INFINITY);
        let m_new = max(m, s.max(1));
        let p = exp2(s - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + p.sum(1);
        acc = acc * alpha + (p.reshape([BQ, BK, 1]) * v).sum(1).reshape([BQ, D]);
        m = m_new;
    }
    out.store([b, qb, h], (acc / l).reshape([1, BQ, D]).cast::<T>());
}

/// The grid for `batch` sequences of `seq` tokens and `heads` heads.
pub fn grid(batch: usize, seq: usize, heads: usize) -> (u32, u32) {
    (seq.div_ceil(16) as u32, (batch * heads) as u32)
}
