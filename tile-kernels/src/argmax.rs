//! Each row's largest value and its position: greedy decoding's pick, on
//! the GPU, so that a step downloads one token per sequence instead of
//! its logits. And the same of the row scaled by `1 / T` plus Gumbel
//! noise ([`gumbel_max_rows`]): the Gumbel-max trick, whose position is a
//! sample of `softmax(x / T)`, temperature sampling without a sort; top-k
//! and top-p first find their thresholds by bisection over the logits'
//! order, without a sort either.

use tile::Element;
use tile::prelude::*;

/// `value[r] = max x[r]` and `index[r]` its first position, `BLOCK`
/// columns at a time, one row per block. NaN is skipped, as `max` skips
/// it; a row of NaN and −∞ gives −∞ at position 0.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024], num_warps = 16)]
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

/// [`argmax_rows`] for long rows, a block per `BLOCK` columns of a row
/// (grid `M * cdiv(N, BLOCK)`), the columns' blocks fastest: each writes
/// its columns' largest value and first position into `part_value`,
/// `part_index` (`[M, P]`, `P` at least `cdiv(N, BLOCK)`; the columns
/// past that are not read), and the row's
/// last block to finish (counted in `arrived[r]`, which must hold 0, and
/// is left at 0) reduces them, `PARTS` at a time. A row at one block per
/// SM would read its columns one tile after another; these blocks read
/// theirs at once.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024], PARTS = [64], num_warps = 4)]
pub fn argmax_split<T, const BLOCK: usize, const PARTS: usize>(
    x: &Tensor<T, { [M, N] }>,
    part_value: &mut Tensor<f32, { [M, P] }>,
    part_index: &mut Tensor<i32, { [M, P] }>,
    arrived: &mut Tensor<i32, { [M] }>,
    value: &mut Tensor<f32, { [M] }>,
    index: &mut Tensor<i32, { [M] }>,
) {
    let parts = cdiv(N, BLOCK);
    let row = block_id(0) / parts;
    let j = block_id(0) % parts;
    let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
    part_value.store([row, j], t.max(1).reshape([1, 1]));
    part_index.store([row, j], (t.argmax(1) + j * BLOCK as i32).reshape([1, 1]));
    if arrived.fetch_add([row], 1) == parts - 1 {
        let mut best = full([1, 1], f32::NEG_INFINITY);
        let mut at = zeros([1, 1]).cast::<i32>();
        for c in 0..cdiv(parts, PARTS) {
            let v = part_value.load([row, c], [1, PARTS]);
            let v = select(c * PARTS + arange(PARTS) < parts, v, f32::NEG_INFINITY);
            let m = v.max(1).reshape([1, 1]);
            // Of the parts holding the largest, the first column: each
            // part's position is its own first.
            let first = select(v == m, part_index.load([row, c], [1, PARTS]), i32::MAX).min(1);
            // Strictly larger: on a tie the earlier parts' position stays.
            let larger = m > best;
            at = select(larger, first.reshape([1, 1]), at);
            best = select(larger, m, best);
        }
        value.store([row], best.reshape([1]));
        index.store([row], at.reshape([1]));
        arrived.store([row], zeros::<i32>([1]));
    }
}

/// The columns [`argmax_rows`] and each block of [`argmax_split`] take.
const BLOCK: usize = 1024;

/// [`run`]'s scratch for rows of `[rows, cols]`: [`argmax_split`]'s parts
/// and counts (none for rows of 1,024 columns or fewer). Make it once
/// for a shape and reuse it (a decode cache holds one): the counts are
/// left at 0 by every launch, and a step recorded as a graph then
/// allocates and clears nothing.
pub struct ArgmaxScratch<B: Backend> {
    /// `[rows, P]`, `P` the parts rounded up to 4 (rows of whole 16 bytes,
    /// for the variant with vector accesses); `None` for short rows.
    parts: Option<(B::Tensor<f32>, B::Tensor<i32>)>,
    /// `[rows]`: blocks arrived, 0 between launches.
    arrived: B::Tensor<i32>,
}

impl<B: Backend> ArgmaxScratch<B> {
    /// Scratch for rows of `[rows, cols]`.
    pub fn new(on: &B, rows: usize, cols: usize) -> tile::Result<Self> {
        let parts = (cols > BLOCK)
            .then(|| {
                let scratch = [rows, cols.div_ceil(BLOCK).next_multiple_of(4)];
                Ok::<_, tile::Error>((on.zeros(&scratch)?, on.zeros(&scratch)?))
            })
            .transpose()?;
        Ok(ArgmaxScratch {
            parts,
            arrived: on.zeros(&[rows])?,
        })
    }
}

/// Each row of `x: [rows, cols]`'s largest value into `value: [rows]` and
/// its first position into `index: [rows]`: rows of more than 1,024
/// columns by [`argmax_split`], with `scratch` (made for `x`'s shape),
/// shorter ones by [`argmax_rows`].
pub fn run<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    scratch: &mut ArgmaxScratch<B>,
    value: &mut B::Tensor<f32>,
    index: &mut B::Tensor<i32>,
) -> tile::Result<()> {
    let (rows, cols) = crate::softmax::rows_cols(x.shape())?;
    if cols <= BLOCK {
        return argmax_rows::launch_with(on, &[BLOCK], rows as u32, x, value, index);
    }
    let parts = cols.div_ceil(BLOCK);
    let ArgmaxScratch {
        parts: Some((part_value, part_index)),
        arrived,
    } = scratch
    else {
        return Err(tile::Error::Shape(format!(
            "argmax over rows of {cols} columns needs scratch made for more than {BLOCK} columns"
        )));
    };
    if part_value.shape()[1] < parts {
        return Err(tile::Error::Shape(format!(
            "argmax over rows of {cols} columns needs scratch of {parts} parts a row, not {}",
            part_value.shape()[1]
        )));
    }
    let grid = (rows * parts) as u32;
    let consts = [BLOCK, 64];
    argmax_split::launch_with(on, &consts, grid, x, part_value, part_index, arrived, value, index)
}

/// `index[r]` = the position of the largest `x[r, c] / T + g(key[r], first + c)`
/// among the columns top-k and top-p keep, `value[r]` that largest; `g`
/// is Gumbel noise, `-ln(-ln u)` with `u` in (0, 1) from a hash of the
/// row's key and the column's number counted from `first` (a rank's first
/// vocabulary column, for a vocabulary split over ranks): the position is
/// a sample of the kept columns' `softmax(x[r] / T)`, the same for a key
/// whichever block or rank holds the column. `inv_t` is `1 / T`.
///
/// Top-k keeps the columns whose logit is at least the `top_k`-th largest
/// (every tie of it: `transformers`' rule), then top-p the fewest largest
/// of those whose probabilities sum to `top_p` or more, with every tie of
/// the last; `top_k` of `N` or more and `top_p` of 1 or more keep every
/// column. Both are thresholds found by bisection over keys: a logit's
/// bits made to sort as unsigned integers, cut to their top `bits` (what
/// `T` holds: 32, 20 for f16, 16 for bf16). The largest key that leaves
/// `top_k` columns above it, or `top_p` of the kept probability, is built
/// two bits a pass (three trial keys counted at once); each trial is compared as the
/// float it stands for: `x` is above key `k` exactly when `x` exceeds
/// `f(k)`, the float whose bits are `k` with the cut bits set, unsorted.
/// NaN logits are never drawn; a row with none above −∞ gives −∞ at
/// position 0.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 4096], num_warps = 16)]
pub fn gumbel_max_rows<T, const BLOCK: usize>(
    x: &Tensor<T, { [M, N] }>,
    key: &Tensor<u32, { [M] }>,
    value: &mut Tensor<f32, { [M] }>,
    index: &mut Tensor<i32, { [M] }>,
    inv_t: f32,
    first: i32,
    top_k: i32,
    top_p: f32,
    bits: i32,
) {
    let row = block_id(0);
    let tiles = cdiv(N, BLOCK);
    let cut = (32 - bits).cast::<u32>();
    let low = (1u32 << cut) - 1;
    // A column is kept when its key is above `floor`.
    let mut floor = zeros::<u32>([1, 1]);
    if top_k < N {
        for b in 0..bits / 2 {
            let digit = (bits - 2 - 2 * b).cast::<u32>();
            let k1 = (floor | (1u32 << digit)) << cut | low;
            let k2 = (floor | (2u32 << digit)) << cut | low;
            let k3 = (floor | (3u32 << digit)) << cut | low;
            let f1 = select(k1 >= 0x80000000, k1 & 0x7fffffff, min(!k1, 0xff800000)).bitcast::<f32>();
            let f2 = select(k2 >= 0x80000000, k2 & 0x7fffffff, min(!k2, 0xff800000)).bitcast::<f32>();
            let f3 = select(k3 >= 0x80000000, k3 & 0x7fffffff, min(!k3, 0xff800000)).bitcast::<f32>();
            // Each column's three comparisons, in bytes of one count.
            let mut above = zeros::<i32>([1, BLOCK]);
            for j in 0..tiles {
                let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
                above += select(t > f1, 1, 0) + select(t > f2, 256, 0) + select(t > f3, 65536, 0);
            }
            let c1 = (above & 255).sum(1) >= top_k;
            let c2 = ((above >> 8) & 255).sum(1) >= top_k;
            let c3 = (above >> 16).sum(1) >= top_k;
            let d = select(c3, 3u32, select(c2, 2u32, select(c1, 1u32, 0u32)));
            floor = floor | (d << digit);
        }
    }
    if top_p < 1.0 {
        // The kept columns' weights exp((x - max) / T) and their sum.
        let kf = floor << cut | low;
        let kept = select(kf >= 0x80000000, kf & 0x7fffffff, min(!kf, 0xff800000)).bitcast::<f32>();
        let mut top = full([1, 1], f32::NEG_INFINITY);
        for j in 0..tiles {
            top = max(
                top,
                x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>().max(1),
            );
        }
        let mut total = zeros([1, BLOCK]);
        for j in 0..tiles {
            let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
            total += select(t > kept, exp((t - top) * inv_t), 0.0);
        }
        let target = total.sum(1) * top_p;
        let mut nucleus = zeros::<u32>([1, 1]);
        for b in 0..bits / 2 {
            let digit = (bits - 2 - 2 * b).cast::<u32>();
            let k1 = max(nucleus | (1u32 << digit), floor) << cut | low;
            let k2 = max(nucleus | (2u32 << digit), floor) << cut | low;
            let k3 = max(nucleus | (3u32 << digit), floor) << cut | low;
            let f1 = select(k1 >= 0x80000000, k1 & 0x7fffffff, min(!k1, 0xff800000)).bitcast::<f32>();
            let f2 = select(k2 >= 0x80000000, k2 & 0x7fffffff, min(!k2, 0xff800000)).bitcast::<f32>();
            let f3 = select(k3 >= 0x80000000, k3 & 0x7fffffff, min(!k3, 0xff800000)).bitcast::<f32>();
            let mut m1 = zeros([1, BLOCK]);
            let mut m2 = zeros([1, BLOCK]);
            let mut m3 = zeros([1, BLOCK]);
            for j in 0..tiles {
                let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
                let w = exp((t - top) * inv_t);
                m1 += select(t > f1, w, 0.0);
                m2 += select(t > f2, w, 0.0);
                m3 += select(t > f3, w, 0.0);
            }
            let d = select(
                m3.sum(1) >= target,
                3u32,
                select(m2.sum(1) >= target, 2u32, select(m1.sum(1) >= target, 1u32, 0u32)),
            );
            nucleus = nucleus | (d << digit);
        }
        floor = max(floor, nucleus);
    }
    let kf = floor << cut | low;
    let kept = select(kf >= 0x80000000, kf & 0x7fffffff, min(!kf, 0xff800000)).bitcast::<f32>();
    let k = full([1, 1], key.get([row]));
    let mut best = full([1, 1], f32::NEG_INFINITY);
    let mut at = zeros([1, 1]).cast::<i32>();
    for j in 0..tiles {
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
        let s = select(t > kept, t * inv_t - log(-log(u)), f32::NEG_INFINITY);
        let m = s.max(1);
        let larger = m > best;
        at = select(larger, s.argmax(1) + j * BLOCK as i32, at);
        best = select(larger, m, best);
    }
    value.store([row], best.reshape([1]));
    index.store([row], at.reshape([1]));
}

/// What a draw on the backend keeps and at which temperature
/// ([`run_gumbel`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Draw {
    /// Divides the logits: finite, above 0, with a finite inverse.
    pub temperature: f32,
    /// Keep the columns at least as large as the `k`-th largest (`k ≥ 1`).
    pub top_k: Option<usize>,
    /// Then the fewest largest whose probabilities sum to `p` or more,
    /// with every tie of the last (`p` in (0, 1]).
    pub top_p: Option<f32>,
}

impl Draw {
    /// Whether top-k or top-p leave columns out, which takes the whole row.
    pub fn filters(&self) -> bool {
        self.top_k.is_some() || self.top_p.is_some()
    }

    /// A temperature, top-k or top-p out of its range is
    /// [`tile::Error::Argument`].
    pub fn check(&self) -> tile::Result<()> {
        let bad = |reason: String| {
            Err(tile::Error::Argument {
                kernel: "gumbel_max_rows",
                reason,
            })
        };
        let t = self.temperature;
        if !(t > 0.0 && (1.0 / t).is_finite()) {
            return bad(format!(
                "temperature {t} can't be sampled: it needs to be above 0 with a finite 1 / T"
            ));
        }
        if self.top_k == Some(0) {
            return bad("top-k 0 keeps no column: give 1 or more".into());
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad(format!("top-p {p} is outside (0, 1]"));
        }
        Ok(())
    }
}

/// A sample of `softmax(x[r] / T)` over the columns `draw` keeps, per row
/// of `x: [rows, cols]`, by [`gumbel_max_rows`] with `key: [rows]`: its
/// position into `index` and its perturbed score into `value` (a split
/// vocabulary takes the rank with the largest; top-k and top-p need the
/// whole row). `first` numbers the columns from that. A temperature,
/// top-k or top-p out of its range is an error ([`Draw::check`]).
pub fn run_gumbel<T: Element, B: Backend>(
    on: &B,
    (x, key): (&B::Tensor<T>, &B::Tensor<u32>),
    (draw, first): (Draw, usize),
    value: &mut B::Tensor<f32>,
    index: &mut B::Tensor<i32>,
) -> tile::Result<()> {
    draw.check()?;
    let Draw {
        temperature,
        top_k,
        top_p,
    } = draw;
    let (rows, cols) = crate::softmax::rows_cols(x.shape())?;
    // Top-p holds three running sums a column: tiles of 4,096 (as fast
    // as 16,384 for a plain draw).
    let block = if cols > 1024 { 4096 } else { 1024 };
    let top_k = top_k.map_or(cols, |k| k.min(cols)) as i32;
    let bits = match T::DTYPE {
        tile::DType::F16 => 20,
        tile::DType::BF16 => 16,
        _ => 32,
    };
    let (grid, inv_t, first, top_p) = (rows as u32, 1.0 / temperature, first as i32, top_p.unwrap_or(1.0));
    gumbel_max_rows::launch_with(
        on,
        &[block],
        grid,
        x,
        key,
        value,
        index,
        inv_t,
        first,
        top_k,
        top_p,
        bits,
    )
}

/// `y[r, c] = x[r, c - first]` where that column exists, else 0: a rank's
/// columns of logits placed in the whole vocabulary's row, so that an
/// all-reduce's sum gives every rank the whole row (for a draw that needs
/// it: top-k, top-p).
#[tile::kernel(T = [f32, f16, bf16], num_warps = 4)]
pub fn place_columns<T>(x: &Tensor<T, { [M, K] }>, y: &mut Tensor<T, { [M, N] }>, first: i32) {
    let row = block_id(0);
    let j = block_id(1);
    let c = (j * 1024 - first + arange(1024)).reshape([1, 1024]);
    y.store([row, j], x.gather([row, c]));
}

/// [`place_columns`]: `x: [rows, k]` into `y: [rows, n]` from column `first`.
pub fn place<T: Element, B: Backend>(on: &B, x: &B::Tensor<T>, y: &mut B::Tensor<T>, first: usize) -> tile::Result<()> {
    let (rows, cols) = crate::softmax::rows_cols(y.shape())?;
    let grid = (rows as u32, cols.div_ceil(1024) as u32);
    place_columns::launch(on, grid, x, y, first as i32)
}
