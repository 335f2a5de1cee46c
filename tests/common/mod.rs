//! Shared test helpers: random inputs, f64 references, error measures;
//! and the harness of the test binaries that need a GPU ([`harness`]).
#![allow(dead_code)]

pub mod harness;

use tile::{Element, HostTensor, bf16, f16};
use tile_kernels::argmax::Draw;

/// A small deterministic generator (xorshift64*), seeded per test.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn normals(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
}

/// Element types the tests convert to and from f64, with the relative error
/// expected of a kernel computed in f32 and rounded to the type.
pub trait Num: Element {
    const TOL: f64;
    fn of(x: f64) -> Self;
    fn f(self) -> f64;
}

impl Num for f32 {
    const TOL: f64 = 1e-5;
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f(self) -> f64 {
        self as f64
    }
}
impl Num for f16 {
    const TOL: f64 = 2e-3;
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
}
impl Num for bf16 {
    const TOL: f64 = 1e-2;
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
}

impl Num for i32 {
    const TOL: f64 = 0.0;
    fn of(x: f64) -> Self {
        x as i32
    }
    fn f(self) -> f64 {
        self as f64
    }
}

pub fn host<T: Num>(data: &[f64], shape: &[usize]) -> HostTensor<T> {
    HostTensor::from_vec(data.iter().map(|&x| T::of(x)).collect(), shape).unwrap()
}

/// Values as f64, after rounding to `T` (the input the kernel really saw).
pub fn rounded<T: Num>(data: &[f64]) -> Vec<f64> {
    data.iter().map(|&x| T::of(x).f()).collect()
}

pub fn values<T: Num>(t: &HostTensor<T>) -> Vec<f64> {
    t.to_vec().into_iter().map(Num::f).collect()
}

/// ‖got − want‖ / ‖want‖; infinite when any value is not finite.
pub fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    if got.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den.max(1e-300)).sqrt()
}

pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:.3e} over tolerance {tol:.1e}");
}

// ---- f64 references -------------------------------------------------------

/// Each row's largest value and its first position (NaN skipped; a row
/// without a number above −∞ gives −∞ at 0).
pub fn argmax_ref(x: &[f64], cols: usize) -> Vec<(f64, usize)> {
    x.chunks(cols)
        .map(|row| {
            let mut best = (f64::NEG_INFINITY, 0);
            for (i, &v) in row.iter().enumerate() {
                if v > best.0 {
                    best = (v, i);
                }
            }
            best
        })
        .collect()
}

/// Rows of `cols` normals with ties for the largest placed far apart
/// (in other tiles of the kernels), a row of one repeated value and a row
/// of −∞ and NaN, and a row of negative values: what [`argmax_ref`] is
/// checked on.
pub fn argmax_rows(rng: &mut Rng, rows: usize, cols: usize) -> Vec<f64> {
    let mut x = rng.normals(rows * cols, 1.0);
    for (r, row) in x.chunks_mut(cols).enumerate() {
        match r % 5 {
            1 => {
                let (a, b) = (rng.below(cols), rng.below(cols));
                row[a] = 9.0;
                row[b] = 9.0;
            }
            2 => row.fill(0.5),
            3 if cols > 2 => {
                row.fill(f64::NEG_INFINITY);
                row[cols / 2] = f64::NAN;
            }
            // Every value negative: padding read as 0 would win.
            4 => row.iter_mut().for_each(|v| *v -= 100.0),
            _ => {}
        }
    }
    x
}

/// A draw at temperature `t` with top-k and top-p.
pub fn draw(t: f32, top_k: Option<usize>, top_p: Option<f32>) -> Draw {
    Draw {
        temperature: t,
        top_k,
        top_p,
    }
}

/// The probability of each column of `row` under `draw`, in f64: the
/// softmax at its temperature over the columns its top-k keeps (every tie
/// of the k-th, as `transformers`), then its top-p (the fewest largest
/// reaching `p`, with every tie of the last). NaN is never drawn.
pub fn kept_softmax_ref(row: &[f64], d: Draw) -> Vec<f64> {
    let t = d.temperature as f64;
    let top = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mut w: Vec<f64> = row
        .iter()
        .map(|&x| if x.is_nan() { 0.0 } else { ((x - top) / t).exp() })
        .collect();
    let mut order: Vec<f64> = w.clone();
    order.sort_by(|a, b| b.total_cmp(a));
    if let Some(k) = d.top_k.filter(|&k| k < row.len()) {
        let kth = order[k - 1];
        w.iter_mut().filter(|v| **v < kth).for_each(|v| *v = 0.0);
    }
    if let Some(p) = d.top_p {
        let mut kept: Vec<f64> = w.iter().copied().filter(|&v| v > 0.0).collect();
        kept.sort_by(|a, b| b.total_cmp(a));
        let total: f64 = kept.iter().sum();
        let mut sum = 0.0;
        let last = kept
            .iter()
            .find(|&&v| {
                sum += v;
                sum >= p as f64 * total
            })
            .copied()
            .unwrap_or(0.0);
        w.iter_mut().filter(|v| **v < last).for_each(|v| *v = 0.0);
    }
    let total: f64 = w.iter().sum();
    w.iter().map(|v| v / total).collect()
}

/// How often each column of one row of logits `row` (rounded to `T`) is
/// drawn by `gumbel_max_rows` with `d` over `draws` keys, one row each.
pub fn gumbel_counts<T: Num, B: tile::Backend>(on: &B, row: &[f64], draws: usize, d: Draw) -> Vec<usize> {
    let cols = row.len();
    let x: Vec<f64> = (0..draws).flat_map(|_| row.iter().copied()).collect();
    let keys: Vec<u32> = (0..draws as u32).map(|r| r.wrapping_mul(2_654_435_761)).collect();
    let (x, keys) = (
        on.upload(&host::<T>(&x, &[draws, cols])).unwrap(),
        on.upload_slice(&keys, &[draws]).unwrap(),
    );
    let (mut value, mut index) = (on.zeros(&[draws]).unwrap(), on.zeros::<i32>(&[draws]).unwrap());
    tile_kernels::argmax::run_gumbel(on, (&x, &keys), (d, 0), &mut value, &mut index).unwrap();
    let mut counts = vec![0usize; cols];
    for &i in on.download(&index).unwrap().to_vec().iter() {
        counts[i as usize] += 1;
    }
    counts
}

/// `gumbel_counts` against `kept_softmax_ref` for `draws` keys: the
/// largest gap between a column's frequency and its probability, and
/// whether exactly the columns it keeps were drawn (`draws` large enough
/// to draw each).
pub fn gumbel_gap<T: Num, B: tile::Backend>(on: &B, row: &[f64], draws: usize, d: Draw) -> (f64, bool) {
    let counts = gumbel_counts::<T, B>(on, row, draws, d);
    let want = kept_softmax_ref(&rounded::<T>(row), d);
    let gap = (counts.iter().zip(&want))
        .map(|(&c, &p)| (c as f64 / draws as f64 - p).abs())
        .fold(0.0, f64::max);
    let same_support = counts.iter().zip(&want).all(|(&c, &p)| (c > 0) == (p > 0.0));
    (gap, same_support)
}

/// The filtered draws every backend checks: four tokens of probabilities
/// 0.5, 0.25, 0.125, 0.125 at temperature 1 under plain, top-k and top-p
/// draws (ties at the cut kept); a ragged row of logits with ties, −∞ and
/// NaN under top-k, top-p and both, in bf16, f16 and f32, drawing exactly the columns
/// kept; `draws` keys each, the frequencies within 4.5 standard
/// deviations of a probability of ½. Panics with the case that fails.
pub fn gumbel_filters_check<B: tile::Backend>(on: &B, draws: usize) {
    let tol = 4.5 * (0.25 / draws as f64).sqrt();
    let four = [2.0f64.ln(), 1.0f64.ln(), 0.5f64.ln(), 0.5f64.ln()].map(|l| l + 3.0);
    let cases = [
        draw(1.0, None, None),
        draw(0.5, None, None),
        draw(1.0, Some(2), None),
        draw(1.0, Some(3), None),
        draw(1.0, None, Some(0.7)),
        draw(1.0, None, Some(0.8)),
        draw(1.0, Some(3), Some(0.6)),
        draw(1.0, None, Some(0.01)),
        draw(1.0, Some(9), None),
    ];
    for d in cases {
        let (gap, support) = gumbel_gap::<bf16, B>(on, &four, draws, d);
        assert!(gap < tol && support, "{d:?}: gap {gap:.4}, support {support}");
    }
    let mut rng = Rng::new(31);
    // Steps of 1/8 round-trip in bf16: many ties, some at each cut.
    let mut row: Vec<f64> = rng.normals(301, 1.5).iter().map(|v| (v * 8.0).round() / 8.0).collect();
    row[7] = f64::NEG_INFINITY;
    row[100] = f64::NAN;
    for d in [
        draw(1.0, Some(40), None),
        draw(0.7, None, Some(0.5)),
        draw(1.3, Some(60), Some(0.8)),
        draw(8.0, Some(301), None),
    ] {
        let (gap, support) = gumbel_gap::<bf16, B>(on, &row, draws, d);
        assert!(gap < tol && support, "bf16 row, {d:?}: gap {gap:.4}, support {support}");
    }
    let (gap, support) = gumbel_gap::<f16, B>(on, &row, draws, draw(1.0, Some(25), Some(0.9)));
    assert!(gap < tol && support, "f16 row: gap {gap:.4}, support {support}");
    let (gap, support) = gumbel_gap::<f32, B>(on, &row[..64], draws, draw(1.0, Some(10), Some(0.8)));
    assert!(gap < tol && support, "f32 row: gap {gap:.4}, support {support}");
}

pub fn cumsum_ref(x: &[f64], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            row.iter().scan(0.0, |acc, v| {
                *acc += v;
                Some(*acc)
            })
        })
        .collect()
}

pub fn softmax_ref(x: &[f64], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

pub fn layer_norm_ref(x: &[f64], w: &[f64], b: &[f64], cols: usize, eps: f64) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let n = cols as f64;
            let mean = row.iter().sum::<f64>() / n;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            let r = 1.0 / (var + eps).sqrt();
            row.iter()
                .enumerate()
                .map(move |(i, v)| (v - mean) * r * w[i] + b[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

pub fn rms_norm_ref(x: &[f64], w: &[f64], cols: usize, eps: f64) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let r = 1.0 / (ms + eps).sqrt();
            row.iter()
                .enumerate()
                .map(move |(i, v)| v * r * w[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

pub fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

pub fn embedding_ref(tokens: &[i32], positions: &[i32], wte: &[f64], wpe: &[f64], c: usize) -> Vec<f64> {
    tokens
        .iter()
        .zip(positions)
        .flat_map(|(&t, &p)| (0..c).map(move |j| wte[t as usize * c + j] + wpe[p as usize * c + j]))
        .collect()
}

/// `x @ w^T + b` (x: [m, k], w: [n, k]), then tanh-GELU if asked.
/// Blocks of `bm x bn` output tiles over an `m x n` product.
pub fn tiles(m: usize, n: usize, bm: usize, bn: usize) -> u32 {
    (m.div_ceil(bm) * n.div_ceil(bn)) as u32
}

pub fn linear_ref(x: &[f64], w: &[f64], b: &[f64], m: usize, n: usize, k: usize, gelu: bool) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| x[i * k + p] * w[j * k + p]).sum::<f64>() + b[j];
            y[i * n + j] = if gelu { gelu_ref(dot) } else { dot };
        }
    }
    y
}

/// Causal attention over qkv [batch, t, 3c] with `heads` heads into [batch, t, c].
pub fn attention_ref(qkv: &[f64], batch: usize, t: usize, c: usize, heads: usize) -> Vec<f64> {
    let d = c / heads;
    let at = |b: usize, i: usize, col: usize| qkv[(b * t + i) * 3 * c + col];
    let mut out = vec![0.0; batch * t * c];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..t {
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..d)
                            .map(|e| at(b, i, h * d + e) * at(b, j, c + h * d + e))
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let ws: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                let total: f64 = ws.iter().sum();
                for e in 0..d {
                    let v: f64 = ws
                        .iter()
                        .enumerate()
                        .map(|(j, w)| w * at(b, j, 2 * c + h * d + e))
                        .sum();
                    out[(b * t + i) * c + h * d + e] = v / total;
                }
            }
        }
    }
    out
}

pub use tile::testing::SM120_BLOCK_SHARED_BYTES;

/// Runs `f` on each path a GPU may launch: the architecture-specific
/// variants (`wgmma` on Hopper), the portable ones (two tiles per persistent block
/// where a block may have their shared memory), and the portable ones an
/// sm_120 GPU runs, within its 99 KiB per block.
pub fn on_every_path(device: &tile::Device, mut f: impl FnMut()) {
    for (arch_specific, block_shared) in [
        (true, usize::MAX),
        (false, usize::MAX),
        (false, SM120_BLOCK_SHARED_BYTES),
    ] {
        device.use_arch_specific(arch_specific);
        device.limit_block_shared_bytes(block_shared);
        f();
    }
    device.use_arch_specific(true);
    device.limit_block_shared_bytes(usize::MAX);
}

/// On Hopper (sm_90a), asserts that `device` has launched each of the
/// variant entries `entries` (the `wgmma` ones a test means to cover).
pub fn assert_launched_on_sm90a(device: &tile::Device, entries: &[&str]) {
    if device.target() != tile::Target::Sm90a {
        return;
    }
    let launched = device.launched_variants();
    for entry in entries {
        assert!(launched.contains(entry), "{entry} not among {launched:?}");
    }
}

/// The columns of each row's `k` largest values of `x` (rows of `cols`),
/// largest first: NaN above every number, ties in column order.
pub fn topk_ref(x: &[f64], cols: usize, k: usize) -> Vec<Vec<usize>> {
    x.chunks(cols)
        .map(|row| {
            let key = |c: usize| (row[c].is_nan(), if row[c].is_nan() { 0.0 } else { row[c] });
            let mut order: Vec<usize> = (0..cols).collect();
            order.sort_by(|&a, &b| key(b).partial_cmp(&key(a)).unwrap().then(a.cmp(&b)));
            order.truncate(k);
            order
        })
        .collect()
}
