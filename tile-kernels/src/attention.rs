//! Causal self-attention, flash style: each block takes `BQ` queries of one
//! (sequence, head) and streams the keys and values `BK` at a time, keeping a
//! running maximum and sum (online softmax), so scores never go to memory.
//! Both products run on the tensor cores: the scores `q @ k^T`, and `p @ v`
//! with `p` (the softmax's numerators) computed in the loop. Four warps
//! split the queries (the compiler splits rows first when a product's rows
//! are reduced, and takes more warps where four would hold too many
//! accumulators, or for `wgmma`'s 64-row warpgroups), so each row's
//! maximum and sum stay within a warp.
//!
//! `qkv: [B, L, 3C]` holds queries, keys and values of sequences of length
//! `L` side by side (as a fused QKV projection writes them), each split
//! into heads of `D` columns; `out: [B, L, C]`. f32 inputs multiply
//! through tf32.

use crate::shapes::{dims, expect_shapes};
use tile::{Backend, DType, Element, TensorView};

/// `out[b, t, head] = softmax(q k^T * scale, causal) v` for every head.
/// Grid: [`grid`], a block per `BQ` queries of one (sequence, head), taken
/// in groups of `group` query blocks (as [`group_height`] picks it), the last
/// queries' group first, head by head within a group. `BQ` and `BK` as
/// [`tiling`] picks them: heads of 128 take 64 queries per block (a warp's
/// 16 rows of `acc` and `q` then fit its registers), or 128 queries and
/// 128 keys per step on long sequences on Hopper (the compiler then gives
/// each warp 16 rows: eight warps). f32 with 64 keys per step and heads
/// of 64 or more would spill.
#[tile::kernel(
    T = [f32, bf16, f16],
    num_warps = 4,
    configs = [
        (BQ = 64, BK = 32, D = 128),
        (T = [bf16, f16], BQ = 64, BK = 64, D = 128),
        (BQ = 128, BK = 32, D = 32),
        (BQ = 128, BK = 32, D = 64),
        (BQ = 128, BK = 64, D = 32),
        (T = [bf16, f16], BQ = 128, BK = 64, D = 64),
        (T = [bf16, f16], BQ = 128, BK = 128, D = 128),
    ]
)]
pub fn causal_attention<T, const BQ: usize, const BK: usize, const D: usize>(
    qkv: &Tensor<T, { [B, L, 3 * C] }>,
    out: &mut Tensor<T, { [B, L, C] }>,
    heads: i32,
    scale: f32,
    group: i32,
) {
    // The last queries see the most keys: their blocks go first, so the
    // grid ends on short ones.
    let query_blocks = cdiv(L, BQ);
    let [from_last, head] = group_tiles(block_id(0), query_blocks, num_blocks(0) / query_blocks, group);
    let qb = query_blocks - 1 - from_last;
    let b = head / heads;
    let h = head % heads;
    let k_head = heads + h;
    let v_head = 2 * heads + h;
    // Scores in base 2: exp(x * scale) = exp2(x * scale * log2 e).
    let to_base2 = scale * 1.4426950408889634;
    let q = qkv.load([b, qb, h], [1, BQ, D]).reshape([BQ, D]);
    let q_pos = (qb * BQ + arange(BQ)).reshape([BQ, 1]);
    let mut m = full([BQ, 1], f32::NEG_INFINITY);
    let mut l = zeros([BQ, 1]);
    let mut acc = zeros([BQ, D]);
    for j in 0..cdiv((qb + 1) * BQ, BK) {
        let k = qkv.load([b, j, k_head], [1, BK, D]).reshape([BK, D]);
        let v = qkv.load([b, j, v_head], [1, BK, D]).reshape([BK, D]);
        let mut s = mma(q, k.transpose(), zeros([BQ, BK]));
        if (j + 1) * BK > qb * BQ {
            // Keys past some of the block's queries: mask them (causal).
            let k_pos = (j * BK + arange(BK)).reshape([1, BK]);
            s = select(k_pos <= q_pos, s, f32::NEG_INFINITY);
        }
        let m_new = max(m, s.max(1) * to_base2);
        let p = exp2(s * to_base2 - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + p.sum(1);
        acc = mma(p.cast::<T>(), v, acc * alpha);
        m = m_new;
    }
    out.store([b, qb, h], (acc / l).reshape([1, BQ, D]).cast::<T>());
}

/// [`causal_attention`] in IEEE f32, for f32 models run without tf32 (16-bit
/// inputs are widened to f32 first): both products on the CUDA cores, each a broadcast product reduced with
/// `sum` (as [`linear_ffma`](crate::linear::linear_ffma) multiplies), whose
/// `[BQ, BK, D]` tile has 8192 elements. Grid: [`grid`] with `BQ` queries
/// per block (the block order plain: query block, then head).
#[tile::kernel(
    T = [f32, bf16, f16],
    num_warps = 4,
    configs = [(BQ = 16, BK = 16, D = 32), (BQ = 16, BK = 8, D = 64), (BQ = 8, BK = 8, D = 128)]
)]
pub fn causal_attention_ieee<T, const BQ: usize, const BK: usize, const D: usize>(
    qkv: &Tensor<T, { [B, L, 3 * C] }>,
    out: &mut Tensor<T, { [B, L, C] }>,
    heads: i32,
    scale: f32,
) {
    let query_blocks = cdiv(L, BQ);
    let qb = block_id(0) % query_blocks;
    let head = block_id(0) / query_blocks;
    let b = head / heads;
    let h = head % heads;
    let to_base2 = scale * 1.4426950408889634;
    let q = qkv.load([b, qb, h], [1, BQ, D]).reshape([BQ, 1, D]).cast::<f32>();
    let q_pos = (qb * BQ + arange(BQ)).reshape([BQ, 1]);
    let mut m = full([BQ, 1], f32::NEG_INFINITY);
    let mut l = zeros([BQ, 1]);
    let mut acc = zeros([BQ, D]);
    for j in 0..cdiv((qb + 1) * BQ, BK) {
        let k = qkv
            .load([b, j, heads + h], [1, BK, D])
            .reshape([1, BK, D])
            .cast::<f32>();
        let v = qkv
            .load([b, j, 2 * heads + h], [1, BK, D])
            .reshape([1, BK, D])
            .cast::<f32>();
        let mut s = (q * k).sum(2).reshape([BQ, BK]);
        if (j + 1) * BK > qb * BQ {
            let k_pos = (j * BK + arange(BK)).reshape([1, BK]);
            s = select(k_pos <= q_pos, s, f32::NEG_INFINITY);
        }
        let m_new = max(m, s.max(1) * to_base2);
        let p = exp2(s * to_base2 - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + p.sum(1);
        acc = acc * alpha + (p.reshape([BQ, BK, 1]) * v).sum(1).reshape([BQ, D]);
        m = m_new;
    }
    out.store([b, qb, h], (acc / l).reshape([1, BQ, D]).cast::<T>());
}

/// Causal attention of every head of `qkv` into `out` on `on` in IEEE f32
/// ([`causal_attention_ieee`]); shapes as [`sizes`] checks them.
pub fn run_ieee<T: Element, B: Backend>(
    on: &B,
    qkv: &B::Tensor<T>,
    out: &mut B::Tensor<T>,
    heads: usize,
) -> tile::Result<()> {
    let (batch, seq, d) = sizes(qkv.shape(), out.shape(), heads)?;
    let (queries, keys) = match d {
        32 => (16, 16),
        64 => (16, 8),
        _ => (8, 8),
    };
    causal_attention_ieee::launch_with(
        on,
        &[queries, keys, d],
        grid(batch, seq, heads, queries),
        qkv,
        out,
        heads as i32,
        1.0 / (d as f32).sqrt(),
    )
}

/// Queries per block (a [`causal_attention`] `BQ`) for heads of `d`
/// columns with 64 keys per step or fewer: 128, or 64 for heads of 128.
pub fn queries_per_block(d: usize) -> usize {
    if d > 64 { 64 } else { 128 }
}

/// Sequences from which 16-bit heads of 128 take 128 queries per block and
/// 128 keys per step on Hopper ([`tiling`]).
const LONG_SEQUENCE: usize = 2048;

/// `(BQ, BK)` of [`causal_attention`] for `seq` tokens in heads of `d`
/// columns of `T` on `device`: [`queries_per_block`] queries, and 64 keys
/// per step for 16-bit types (fewer, larger steps than 32 at GPT-2's
/// heads), 32 for f32 (64 is not built for heads of 64 or 128).
///
/// 16-bit heads of 128 over 2048 tokens or more take 128
/// queries and 128 keys per step on Hopper's `wgmma` path instead: two
/// warpgroups share each stage of keys and values and read `q` half as
/// often per product (the scores' product is bound by shared memory at 64
/// keys), one block per SM. Below 2048 tokens, blocks of fewer steps pay
/// their loads and stores alone and the smaller tiles win (bench-results/LOG.md).
pub fn tiling<T: Element>(device: &tile::Device, seq: usize, d: usize) -> (usize, usize) {
    tiling_for(T::DTYPE, device.target() == tile::Target::Sm90a, seq, d)
}

/// [`tiling`] for element type `dtype`, on the `wgmma` path or not.
fn tiling_for(dtype: DType, wgmma: bool, seq: usize, d: usize) -> (usize, usize) {
    match dtype {
        DType::F32 => (queries_per_block(d), 32),
        _ if wgmma && d == 128 && seq >= LONG_SEQUENCE => (128, 128),
        _ => (queries_per_block(d), 64),
    }
}

/// The grid for `batch` sequences of `seq` tokens and `heads` heads, with
/// `queries` (a [`causal_attention`] `BQ`) per block: a block per
/// `queries` queries of each (sequence, head).
pub fn grid(batch: usize, seq: usize, heads: usize, queries: usize) -> u32 {
    (batch * heads * seq.div_ceil(queries)) as u32
}

/// Query blocks per group of the grid's order (a [`causal_attention`]
/// `group`) for `batch` sequences of `seq` tokens in `heads` heads of `d`
/// columns of `T` on `device`, tiled `(BQ, BK)`: `group_height_for` with the
/// blocks these kernels are built to run per SM (two, or one with 128 keys
/// per step, whose stages take most of an SM's shared memory). Any group
/// of 1 or more computes the same result.
pub fn group_height<T: Element>(
    device: &tile::Device,
    (batch, seq, heads, d): (usize, usize, usize, usize),
    (queries, keys): (usize, usize),
) -> i32 {
    let per_sm = if keys > 64 { 1 } else { 2 };
    let gpu = (per_sm * device.multiprocessors(), device.l2_bytes());
    let head_bytes = 2 * seq * d * T::DTYPE.bytes();
    group_height_for(gpu, batch * heads, head_bytes, seq.div_ceil(queries))
}

/// The group for `heads` (sequence, head) pairs whose keys and values take
/// `head_bytes` each, in `query_blocks` blocks each, on a GPU that runs
/// `resident` blocks at once and has `l2_bytes` of L2.
///
/// Blocks of one head that run at the same time share its keys and values
/// in L2. Taking groups of query blocks head by head, the blocks running at
/// once span about `resident / group` heads. The group is the smallest for
/// which those heads' keys and values fit in half of L2, or 2 when every
/// head's fit (a head's neighbouring blocks, started together, read the
/// same keys at the same time); at most a quarter of the query blocks, so
/// that the grid still ends on short blocks (bench-results/LOG.md compares it with
/// one head after another).
fn group_height_for((resident, l2_bytes): (usize, usize), heads: usize, head_bytes: usize, query_blocks: usize) -> i32 {
    let budget = (l2_bytes / 2).max(1);
    let spread = if heads * head_bytes <= budget {
        2
    } else {
        (resident * head_bytes).div_ceil(budget)
    };
    spread.min(query_blocks / 4).max(2) as i32
}

/// `(batch, seq, head size)` of attention over `qkv` with `heads` heads
/// into `out`, the shapes checked: `qkv: [B, L, 3C]`, `out: [B, L, C]`,
/// heads of 32, 64 or 128 columns.
pub fn sizes(qkv: &[usize], out: &[usize], heads: usize) -> tile::Result<(usize, usize, usize)> {
    let [batch, seq, three_c] = dims("qkv", qkv)?;
    let c = three_c / 3;
    let from = format!("attention over qkv: [B, L, 3C] = [{batch}, {seq}, {three_c}]");
    expect_shapes(
        &from,
        &[("qkv", qkv, &[batch, seq, 3 * c]), ("out", out, &[batch, seq, c])],
    )?;
    match (heads > 0 && c % heads == 0).then(|| c / heads) {
        Some(d @ (32 | 64 | 128)) => Ok((batch, seq, d)),
        _ => Err(tile::Error::Shape(format!(
            "attention takes heads of 32, 64 or 128 columns: C = {c} in {heads} heads"
        ))),
    }
}

/// Causal attention of every head of `qkv` into `out` on `on`, softmax
/// scale `1 / sqrt(D)`; shapes as [`sizes`] checks them. On a GPU,
/// [`tiling`] and [`group_height`] for its device; on the CPU, the portable
/// path's tiling and groups of one query block (blocks run one at a time
/// there: any order is as good).
pub fn run<T: Element, B: Backend>(
    on: &B,
    qkv: &B::Tensor<T>,
    out: &mut B::Tensor<T>,
    heads: usize,
) -> tile::Result<()> {
    let (batch, seq, d) = sizes(qkv.shape(), out.shape(), heads)?;
    let ((queries, keys), group) = match on.stream().map(|s| s.device()) {
        Some(device) => {
            let tiling = tiling::<T>(device, seq, d);
            (tiling, group_height::<T>(device, (batch, seq, heads, d), tiling))
        }
        None => (tiling_for(T::DTYPE, false, seq, d), 1),
    };
    let scale = 1.0 / (d as f32).sqrt();
    causal_attention::launch_with(
        on,
        &[queries, keys, d],
        grid(batch, seq, heads, queries),
        qkv,
        out,
        heads as i32,
        scale,
        group,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_sequences_of_16_bit_heads_of_128_take_128_queries_and_keys_on_wgmma() {
        for dtype in [DType::BF16, DType::F16] {
            assert_eq!(tiling_for(dtype, true, 2048, 128), (128, 128));
            assert_eq!(tiling_for(dtype, true, 8192, 128), (128, 128));
            // Shorter sequences, other heads, the portable path: 64 keys.
            assert_eq!(tiling_for(dtype, true, 2047, 128), (64, 64));
            assert_eq!(tiling_for(dtype, true, 4096, 64), (128, 64));
            assert_eq!(tiling_for(dtype, false, 4096, 128), (64, 64));
        }
        // f32 (tf32 on mma.sync): 32 keys per step everywhere.
        assert_eq!(tiling_for(DType::F32, true, 4096, 128), (64, 32));
        assert_eq!(tiling_for(DType::F32, false, 100, 32), (128, 32));
    }

    #[test]
    fn groups_keep_the_heads_running_at_once_within_half_of_l2() {
        // An H100: 132 SMs at two blocks each, 50 MiB of L2.
        let h100 = (264, 50 << 20);
        let group = |batch: usize, seq: usize, heads: usize, d: usize, bytes: usize| {
            group_height_for(
                h100,
                batch * heads,
                2 * seq * d * bytes,
                seq.div_ceil(queries_per_block(d)),
            )
        };
        // GPT-2's 12 heads of 64 in bf16, 24 MiB of keys and values: all fit.
        for (batch, seq) in [(8, 1024), (4, 2048), (2, 4096)] {
            assert_eq!(group(batch, seq, 12, 64, 2), 2);
        }
        // 16 heads of 128, 64 MiB: 66 heads at once at 8x1024, 33 at
        // 4x2048, 16.5 at 2x4096.
        assert_eq!(group(8, 1024, 16, 128, 2), 4);
        assert_eq!(group(4, 2048, 16, 128, 2), 8);
        assert_eq!(group(2, 4096, 16, 128, 2), 16);
        // At most a quarter of the query blocks (8 at 8x1024), at least 2.
        assert_eq!(group(8, 1024, 12, 64, 4), 2);
        assert_eq!(group(1, 100, 1, 64, 2), 2);
    }
}
