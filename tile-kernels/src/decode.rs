//! Attention for generation with a KV cache: each step computes one query
//! per sequence against every key the sequence has so far, which the
//! caches hold, flash-decoding style.
//!
//! The caches `k_cache, v_cache: [B, S, C]` hold each sequence's keys and
//! values by position, `S` positions each (the cache's capacity).
//! [`kv_write`] copies the keys and values of `qkv: [B, T, 3C]` (queries,
//! keys, values side by side, as the fused QKV projection writes them) into
//! them at rows `start[b] + t`: a prompt at `start = 0`. A decode step's
//! token needs no such launch: [`decode_attention`] appends its key and
//! value as it reads the cache.
//!
//! One query per (sequence, head) reads a whole head of keys and values
//! and does little arithmetic with each: decoding is bound by memory, and
//! one block per (sequence, head) would leave most of a GPU idle at small
//! batches. So [`decode_attention`] splits each (sequence, head)'s keys
//! over `splits` blocks, a thread-block cluster; each computes the
//! softmax-weighted sum of its values with an online softmax, and the
//! cluster's first block gathers them with their log-sum-exps through
//! distributed shared memory (`cluster_gather`) and weighs them by their
//! sums into the output: one launch, where a separate combine kernel
//! would be two, and no round trip through global memory.
//!
//! `pos: [B]` (i32, on the backend) is each sequence's position of the
//! current token, the row its key and value go to: the sequence attends to
//! rows `0..=pos[b]`, ragged across the batch, its own key the last. It is
//! the step's one input besides the tokens: a decode step that advances
//! writes it alone. Being device data, the values are not checked on the
//! host; the kernels clamp them instead: a `pos` of `S` or more attends to
//! the `S` cached keys, and a negative one gives zeros. Rows outside `0..S`
//! are not written.

use crate::shapes::{dims, expect_shapes};
use tile::{Backend, Element, TensorView};

/// `k_cache[b, start[b] + t] = qkv[b, t, C..2C]` and
/// `v_cache[b, start[b] + t] = qkv[b, t, 2C..3C]`: the keys and values of
/// `qkv: [B, T, 3C]` into the caches `[B, S, C]`, at the positions after
/// `start: [B]`. Rows outside the cache (`start[b] + t` not in `0..S`) are
/// dropped by the stores' bounds checks.
///
/// Grid: `(B * cdiv(T, TOKENS), C / BLOCK)`, a block per `BLOCK` columns
/// of `TOKENS` tokens' keys and values; `BLOCK` divides `C` (as
/// [`columns_per_block`] picks it). A block of one warp moving one token
/// spent more time starting than copying.
#[tile::kernel(T = [f32, bf16, f16], BLOCK = [32, 64, 128, 256], TOKENS = [8])]
pub fn kv_write<T, const BLOCK: usize, const TOKENS: usize>(
    qkv: &Tensor<T, { [B, L, 3 * C] }>,
    start: &Tensor<i32, { [B] }>,
    k_cache: &mut Tensor<T, { [B, S, C] }>,
    v_cache: &mut Tensor<T, { [B, S, C] }>,
) {
    let groups = cdiv(L, TOKENS);
    let b = block_id(0) / groups;
    let first = block_id(0) % groups * TOKENS;
    let j = block_id(1);
    // C in tiles: the keys start at column tile `c`, the values at `2 * c`.
    let c = C / BLOCK;
    let row = start.get([b]) + first;
    for i in 0..TOKENS {
        if first + i < L {
            k_cache.store([b, row + i, j], qkv.load([b, first + i, c + j], [1, 1, BLOCK]));
            v_cache.store([b, row + i, j], qkv.load([b, first + i, 2 * c + j], [1, 1, BLOCK]));
        }
    }
}

/// Flash-decoding for each sequence's new token: `out[b, 0, h]` is the
/// softmax-weighted sum of head `h`'s values at rows `0..=pos[b]`, for its query
/// `q = qkv[b, 0, h]` (`qkv: [B, 1, 3C]`) against the keys.
///
/// The `SPLITS` blocks of a (sequence, head) pair form a cluster. Each
/// takes one split of the keys, `BK` at a time with an online softmax,
/// into `Σ p v / Σ p` (`[D]`, f32) with `p = exp(q·k * scale)` over its
/// keys, and `log2 Σ p` (the scores in base 2). The cluster gathers both
/// in its first block (`cluster_gather`), which weighs the splits by
/// `w = exp2(lse - max lse)` into `Σ w partial / Σ w`: no scratch in
/// global memory, no count of the splits done. A sequence without keys
/// gets zeros.
///
/// The token's own key and value, in `qkv`'s second and third thirds, are
/// the sequence's last (row `pos[b]`): the split whose keys hold that
/// row takes them from `qkv` and appends them to the caches, so no launch
/// before this one writes them.
///
/// Grid: `B * heads * SPLITS` blocks along x, a pair's splits consecutive.
/// The sequence's key tiles are dealt out evenly, whole tiles per split; a
/// split left without keys (a short sequence) gives 0 with a log-sum-exp
/// of `-inf`, which the combine weighs 0. Each `[BK, D]` tile has 4096
/// elements: `BK` is 128, 64 and 32 for heads of 32, 64 and 128.
#[tile::kernel(
    T = [f32, bf16, f16],
    num_warps = 4,
    configs = [
        (BK = 128, D = 32, SPLITS = 1), (BK = 128, D = 32, SPLITS = 2), (BK = 128, D = 32, SPLITS = 4), (BK = 128, D = 32, SPLITS = 8),
        (BK = 64, D = 64, SPLITS = 1), (BK = 64, D = 64, SPLITS = 2), (BK = 64, D = 64, SPLITS = 4), (BK = 64, D = 64, SPLITS = 8),
        (BK = 32, D = 128, SPLITS = 1), (BK = 32, D = 128, SPLITS = 2), (BK = 32, D = 128, SPLITS = 4), (BK = 32, D = 128, SPLITS = 8),
    ]
)]
pub fn decode_attention<T, const BK: usize, const D: usize, const SPLITS: usize>(
    qkv: &Tensor<T, { [B, 1, 3 * C] }>,
    k_cache: &mut Tensor<T, { [B, S, C] }>,
    v_cache: &mut Tensor<T, { [B, S, C] }>,
    pos: &Tensor<i32, { [B] }>,
    out: &mut Tensor<T, { [B, 1, C] }>,
    heads: i32,
    scale: f32,
) {
    let pair = block_id(0) / SPLITS;
    let split = block_id(0) % SPLITS;
    let b = pair / heads;
    let h = pair % heads;
    // While the previous kernel runs, L2 is asked for the split's first
    // tiles of keys and values, located by a row read before the wait: a
    // hint read, which a stale row only sends astray (the guide's chapter 11).
    let early_tiles = cdiv(max(0, min(pos.get([b]), S - 1) + 1), BK);
    let early_first = split * cdiv(early_tiles, SPLITS);
    if early_first < early_tiles {
        k_cache.prefetch([b, early_first, h], [1, BK, D]);
        v_cache.prefetch([b, early_first, h], [1, BK, D]);
    }
    // The new token's row; the sequence's keys, at most the cache's capacity.
    let row = pos.get([b]);
    let keys = max(0, min(row, S - 1) + 1);
    let per_split = cdiv(cdiv(keys, BK), SPLITS);
    let first = split * per_split;
    let last = min(first + per_split, cdiv(keys, BK));
    // Scores in base 2, the scale folded into the query:
    // exp(q·k * scale) = exp2(q·k * scale * log2 e).
    let q = qkv.load([b, 0, h], [1, 1, D]).reshape([1, D]).cast::<f32>() * (scale * f32::consts::LOG2_E);
    // The new token's key and value: head h of qkv's keys, then values.
    let k_new = qkv.load([b, 0, heads + h], [1, 1, D]);
    let v_new = qkv.load([b, 0, 2 * heads + h], [1, 1, D]);
    let mut m = full([1, 1], f32::NEG_INFINITY);
    let mut l = zeros([1, 1]);
    let mut acc = zeros([1, D]);
    for j in first..last {
        let mut k = k_cache.load([b, j, h], [1, BK, D]).reshape([BK, D]).cast::<f32>();
        let mut v = v_cache.load([b, j, h], [1, BK, D]).reshape([BK, D]).cast::<f32>();
        if j == row / BK {
            // The tile holding the new token's row, not yet in the caches.
            let new_row = (j * BK + arange(BK)).reshape([BK, 1]) == row;
            k = select(new_row, k_new.reshape([1, D]).cast::<f32>(), k);
            v = select(new_row, v_new.reshape([1, D]).cast::<f32>(), v);
        }
        let mut s = (k * q).sum(1); // [BK, 1]
        if (j + 1) * BK > keys {
            // The sequence's last tile: keys past its end are masked.
            let k_pos = (j * BK + arange(BK)).reshape([BK, 1]);
            s = select(k_pos < keys, s, f32::NEG_INFINITY);
        }
        let m_new = max(m, s.max(0));
        let p = exp2(s - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + p.sum(0);
        acc = acc * alpha + (p * v).sum(0);
        m = m_new;
    }
    if 0 <= row && row < keys && first <= row / BK && row / BK < last {
        // This split's keys hold the new row: the one block that appends it.
        k_cache.store([b, row, h], k_new);
        v_cache.store([b, row, h], v_new);
    }
    // l is 1 or more once a key was seen (the largest score's p is 1), and
    // 0 in a split without keys, whose partial is 0 and log-sum-exp -inf.
    let partials = select(l > 0.0, acc / l, 0.0).cluster_gather(SPLITS); // [SPLITS, D]
    let log_sums = (m + log2(l)).cluster_gather(SPLITS); // [SPLITS, 1]
    if split == 0 {
        let top = log_sums.max(0);
        let w = exp2(log_sums - top);
        let mixed = select(top > f32::NEG_INFINITY, (w * partials).sum(0) / w.sum(0), 0.0);
        out.store([b, 0, h], mixed.reshape([1, 1, D]).cast::<T>());
    }
}

/// The most splits [`decode_attention`] takes: the blocks of a cluster.
pub const MAX_SPLITS: usize = 8;

/// Key tiles each split takes at least, in a full cache. One: the combine
/// is one more round trip, within the cluster, while each tile a split
/// reads after its first is another, and a decode step at a small batch
/// waits on its slowest block.
const MIN_STEPS_PER_SPLIT: usize = 1;

/// Keys per step (a [`decode_attention`] `BK`) for heads of `d` columns:
/// tiles of keys and of values of 4096 elements.
pub fn keys_per_step(d: usize) -> usize {
    4096 / d
}

/// Tokens a [`kv_write`] block copies.
const KV_TOKENS: usize = 8;

/// A [`kv_write`] `BLOCK` for rows of `c` columns: the largest power of two
/// up to 256 that divides `c`, `None` unless 32 does (the narrowest built).
pub fn columns_per_block(c: usize) -> Option<usize> {
    let block = (1 << c.trailing_zeros().min(8)) as usize;
    (c > 0 && block >= 32).then_some(block)
}

/// Splits per (sequence, head) for `pairs` (sequence, head) pairs over a
/// cache of `capacity` positions, `keys` per step, on a GPU of `sms`
/// multiprocessors: enough blocks for two waves of one block per SM, as
/// long as each split keeps [`MIN_STEPS_PER_SPLIT`] steps of a full cache;
/// a power of two from 1 to [`MAX_SPLITS`], at most that.
fn splits_for(pairs: usize, capacity: usize, keys: usize, sms: usize) -> usize {
    let to_fill = (2 * sms).div_ceil(pairs.max(1));
    let most = capacity.div_ceil(MIN_STEPS_PER_SPLIT * keys);
    let n = to_fill.min(most).clamp(1, MAX_SPLITS);
    1 << n.ilog2()
}

/// `(batch, head size)` of decode attention, the shapes checked:
/// `qkv: [B, 1, 3C]`, `k_cache` and `v_cache: [B, S, C]`, `pos: [B]`,
/// `out: [B, 1, C]`, and `C` in `heads` heads of 32, 64 or 128 columns.
pub fn sizes(
    qkv: &[usize],
    (k_cache, v_cache): (&[usize], &[usize]),
    pos: &[usize],
    out: &[usize],
    heads: usize,
) -> tile::Result<(usize, usize)> {
    let [batch, capacity, c] = dims("k_cache", k_cache)?;
    let from = format!("decode attention over k_cache: [B, S, C] = [{batch}, {capacity}, {c}]");
    expect_shapes(
        &from,
        &[
            ("v_cache", v_cache, &[batch, capacity, c]),
            ("qkv", qkv, &[batch, 1, 3 * c]),
            ("pos", pos, &[batch]),
            ("out", out, &[batch, 1, c]),
        ],
    )?;
    Ok((batch, head_size(c, heads)?))
}

/// The columns of each of `heads` heads in `c` channels: 32, 64 or 128
/// (the head sizes built).
fn head_size(c: usize, heads: usize) -> tile::Result<usize> {
    match (heads > 0 && c.is_multiple_of(heads)).then(|| c / heads) {
        Some(d @ (32 | 64 | 128)) => Ok(d),
        _ => Err(tile::Error::Shape(format!(
            "decode attention takes heads of 32, 64 or 128 columns: C = {c} in {heads} heads"
        ))),
    }
}

/// The splits per (sequence, head) [`attention`] takes for attention over
/// `k_cache: [B, S, C]` in `heads` heads on `on`: on a GPU, enough blocks
/// for two waves over its multiprocessors while each split keeps a step
/// of a full cache, up to [`MAX_SPLITS`]; on the CPU one (blocks run one
/// at a time there). Pick them once per batch and reuse them every step.
pub fn splits<T: Element, B: Backend>(on: &B, k_cache: &B::Tensor<T>, heads: usize) -> tile::Result<usize> {
    let [batch, capacity, c] = dims("k_cache", k_cache.shape())?;
    let d = head_size(c, heads)?;
    Ok(match on.stream() {
        Some(s) => splits_for(batch * heads, capacity, keys_per_step(d), s.device().multiprocessors()),
        None => 1,
    })
}

/// `out[b, 0] = softmax(q k^T / sqrt(D)) v` for every head, with `q` the
/// query of `qkv[b, 0]` and `k`, `v` the keys and values of the caches at
/// rows `0..=pos[b]`, the last of them (row `pos[b]`) the token's own from
/// `qkv`, which this appends to the caches; on `on`, shapes as [`sizes`]
/// checks them, each (sequence, head)'s keys in `splits` splits (a power
/// of two up to [`MAX_SPLITS`], as [`splits`] picks them). `pos` is
/// clamped to the cache (module docs). One launch, [`decode_attention`].
pub fn attention<T: Element, B: Backend>(
    on: &B,
    qkv: &B::Tensor<T>,
    (k_cache, v_cache): (&mut B::Tensor<T>, &mut B::Tensor<T>),
    pos: &B::Tensor<i32>,
    out: &mut B::Tensor<T>,
    heads: usize,
    splits: usize,
) -> tile::Result<()> {
    let caches = (k_cache.shape(), v_cache.shape());
    let (batch, d) = sizes(qkv.shape(), caches, pos.shape(), out.shape(), heads)?;
    if !(splits.is_power_of_two() && splits <= MAX_SPLITS) {
        return Err(tile::Error::Shape(format!(
            "decode attention takes 1, 2, 4 or {MAX_SPLITS} splits, not {splits}"
        )));
    }
    let scale = 1.0 / (d as f32).sqrt();
    decode_attention::launch_with(
        on,
        &[keys_per_step(d), d, splits],
        ((batch * heads * splits) as u32, 1),
        qkv,
        k_cache,
        v_cache,
        pos,
        out,
        heads as i32,
        scale,
    )
}

/// The keys and values of `qkv: [B, T, 3C]` into `k_cache, v_cache: [B, S, C]`
/// at rows `start[b] + t` ([`kv_write`]), on `on`. `C` must be a multiple
/// of 32 (every head size built is). Rows outside `0..S` are not written.
pub fn write_kv<T: Element, B: Backend>(
    on: &B,
    qkv: &B::Tensor<T>,
    k_cache: &mut B::Tensor<T>,
    v_cache: &mut B::Tensor<T>,
    start: &B::Tensor<i32>,
) -> tile::Result<()> {
    let [batch, _, c] = dims("k_cache", k_cache.shape())?;
    let [_, seq, _] = dims("qkv", qkv.shape())?;
    let block = columns_per_block(c)
        .ok_or_else(|| tile::Error::Shape(format!("writing the KV cache takes C a multiple of 32, not {c}")))?;
    let grid = ((batch * seq.div_ceil(KV_TOKENS)) as u32, (c / block) as u32);
    kv_write::launch_with(on, &[block, KV_TOKENS], grid, qkv, start, k_cache, v_cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_blocks_are_the_largest_power_of_two_dividing_c_up_to_256() {
        assert_eq!(columns_per_block(768), Some(256));
        assert_eq!(columns_per_block(96), Some(32));
        assert_eq!(columns_per_block(128), Some(128));
        assert_eq!(columns_per_block(4096), Some(256));
        for c in [0, 16, 48, 100] {
            assert_eq!(columns_per_block(c), None);
        }
    }

    #[test]
    fn splits_fill_two_waves_while_each_keeps_a_step() {
        // An H100's 132 SMs, GPT-2's 12 heads of 64 (64 keys per step).
        // Batch 1 with 1024 positions: 22 splits would fill two waves, a
        // cluster takes 8.
        assert_eq!(splits_for(12, 1024, 64, 132), 8);
        // gpt2-xl's 25 heads: 11 would fill two waves, the power of two below.
        assert_eq!(splits_for(25, 1024, 64, 132), 8);
        // Batch 16: 192 pairs, 2 splits fill two waves.
        assert_eq!(splits_for(16 * 12, 1024, 64, 132), 2);
        // A large batch fills the GPU alone.
        assert_eq!(splits_for(32 * 12, 32768, 64, 132), 1);
        // A short cache: each split keeps a step (3 steps: 2 splits).
        assert_eq!(splits_for(1, 192, 64, 132), 2);
        // A tiny cache: one split.
        assert_eq!(splits_for(1, 10, 128, 132), 1);
        assert_eq!(splits_for(1, 0, 128, 132), 1);
    }
}
