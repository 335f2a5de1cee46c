//! Linear layers of a few rows (decoding: one row per sequence), as
//! matrix–vector products on the CUDA cores: `y = x @ w^T + b` with
//! `x: [M, K]`, `w: [N, K]`, `b: [N]`, `y: [M, N]`, M up to [`MAX_ROWS`].
//!
//! At such M a layer is bound by reading `w` once. The tensor-core kernels
//! of [`crate::matmul`] tile 64 rows and 64 or more columns, which leaves
//! most SMs idle on GPT-2's 768-column layers; these kernels give each
//! block a few columns and the whole of K, so every SM streams weights:
//! `BN` rows of `w` in `[BN, BK]` tiles along K, multiplied element-wise
//! into a `[BM, BN, BK / R]` accumulator, each element summing `R` of a K
//! step's products (a thread's own: `R` is at most its 16-byte piece), and
//! summed along K once, at the end. A long `BK` gives each thread several
//! independent loads in flight, which is what streams weights when a layer
//! has few blocks per SM; `R = 8` keeps the accumulator small enough for a
//! step as long as a gpt2-xl row. The layout pass gives a block's threads
//! pieces of every row (its warps split K, not the rows), so that the row
//! of `x` is loaded once a block, and the plan declares the occupancy that
//! keeps a step's loads in flight together (`tile-compiler`'s
//! `plan/streaming.rs`). The
//! tuner picks `BN` and `BK` per size class of `[M, K, N]`, and `BM` among
//! those that take every row in one block ([`run`]), timing them with the
//! weights cold, as a decode step reads them (`tile::autotune::tune_cold`). Each block first asks
//! L2 for its weights (`prefetch`): that runs while the previous kernel on
//! the stream ends, since the weights are no kernel's output.
//! Products and sums are in f32, so f32 layers are IEEE f32 here. From
//! 4 rows the tensor cores split along K ([`crate::split_k`]) are often
//! faster: each weight is multiplied as many times as there are rows.

use crate::linear::LinearOperands;
use tile::autotune::{size_class, tune_cold};
use tile::{Backend, Element, KernelSpec, TensorView, Tuned};

/// The most rows for which [`crate::matmul::run_linear`] and
/// [`crate::matmul::run_linear_residual`] weigh these kernels against the
/// tensor cores' (which win above it).
pub const MAX_ROWS: usize = 16;

/// `y = x @ w^T + b`, then tanh-GELU when `gelu` is 1. A block per `BN`
/// columns of `BM` rows, the columns fastest.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM),
    key = [M, K, N],
    configs = [
        (BM = 1, BN = 1, BK = 4096, R = 1),
        (BM = 1, BN = 2, BK = 2048, R = 1),
        (BM = 1, BN = 2, BK = 1024, R = 1),
        (BM = 1, BN = 4, BK = 1024, R = 1),
        (BM = 1, BN = 8, BK = 512, R = 1),
        (BM = 1, BN = 16, BK = 256, R = 1),
        (T = [f16, bf16], BM = 1, BN = 2, BK = 4096, R = 8),
        (T = [f16, bf16], BM = 1, BN = 4, BK = 2048, R = 8),
        (T = [f16, bf16], BM = 1, BN = 8, BK = 1024, R = 8),
        (BM = 2, BN = 2, BK = 1024, R = 1),
        (BM = 2, BN = 4, BK = 1024, R = 1),
        (BM = 4, BN = 1, BK = 1024, R = 1),
        (BM = 4, BN = 2, BK = 1024, R = 1),
        (BM = 4, BN = 4, BK = 512, R = 1),
        (BM = 8, BN = 2, BK = 512, R = 1),
        (BM = 16, BN = 2, BK = 256, R = 1),
        (BM = 16, BN = 4, BK = 128, R = 1),
    ]
)]
pub fn gemv<T, const BM: usize, const BN: usize, const BK: usize, const R: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
) {
    let n = block_id(0) % cdiv(N, BN);
    let m = block_id(0) / cdiv(N, BN);
    for k in 0..cdiv(K, BK) {
        w.prefetch([n, k], [BN, BK]);
    }
    let mut acc = zeros([BM, BN, BK / R]);
    for k in 0..cdiv(K, BK) {
        let xs = x.load([m, k], [BM, BK]).cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + (xs * ws).reshape([BM, BN, BK / R, R]).sum(3).reshape([BM, BN, BK / R]);
    }
    let out = acc.sum(2).reshape([BM, BN]) + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = residual + x @ w^T + b`, as [`gemv`] multiplies; `residual: [M, N]`.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM),
    key = [M, K, N],
    configs = [
        (BM = 1, BN = 1, BK = 4096, R = 1),
        (BM = 1, BN = 2, BK = 2048, R = 1),
        (BM = 1, BN = 2, BK = 1024, R = 1),
        (BM = 1, BN = 4, BK = 1024, R = 1),
        (BM = 1, BN = 8, BK = 512, R = 1),
        (BM = 1, BN = 16, BK = 256, R = 1),
        (T = [f16, bf16], BM = 1, BN = 2, BK = 4096, R = 8),
        (T = [f16, bf16], BM = 1, BN = 4, BK = 2048, R = 8),
        (T = [f16, bf16], BM = 1, BN = 8, BK = 1024, R = 8),
        (BM = 2, BN = 2, BK = 1024, R = 1),
        (BM = 2, BN = 4, BK = 1024, R = 1),
        (BM = 4, BN = 1, BK = 1024, R = 1),
        (BM = 4, BN = 2, BK = 1024, R = 1),
        (BM = 4, BN = 4, BK = 512, R = 1),
        (BM = 8, BN = 2, BK = 512, R = 1),
        (BM = 16, BN = 2, BK = 256, R = 1),
        (BM = 16, BN = 4, BK = 128, R = 1),
    ]
)]
pub fn gemv_residual<T, const BM: usize, const BN: usize, const BK: usize, const R: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    residual: &Tensor<T, { [M, N] }>,
    y: &mut Tensor<T, { [M, N] }>,
) {
    let n = block_id(0) % cdiv(N, BN);
    let m = block_id(0) / cdiv(N, BN);
    for k in 0..cdiv(K, BK) {
        w.prefetch([n, k], [BN, BK]);
    }
    let mut acc = zeros([BM, BN, BK / R]);
    for k in 0..cdiv(K, BK) {
        let xs = x.load([m, k], [BM, BK]).cast::<f32>().reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + (xs * ws).reshape([BM, BN, BK / R, R]).sum(3).reshape([BM, BN, BK / R]);
    }
    let out =
        acc.sum(2).reshape([BM, BN]) + b.load([n], [BN]).cast::<f32>() + residual.load([m, n], [BM, BN]).cast::<f32>();
    y.store([m, n], out.cast::<T>());
}

/// `y = layer_norm(x) @ w^T + b`, then tanh-GELU when `gelu` is 1, in one
/// pass over K. The LayerNorm's affine (`ln_w`, and its bias through
/// `shift`) is folded into the product ([`NormFold`]): each block
/// multiplies `t·ln_w` into its accumulator, `t` the row less its first
/// value (the statistics `norm::layer_norm` takes), while it sums `t` and
/// `t²`, and applies the statistics once, at the end:
/// `y = rstd·(acc − mean·scale) + shift`. No reduction stands between a
/// block's first loads and its products.
///
/// `R` is how many of a K step's products each accumulator element sums:
/// 1 keeps `[BM, BN, BK]` partial sums, the fewest instructions a step;
/// `BK` sums each row's step at once (a warp's shuffles), the fewest
/// registers, which is what lets a block take 8 rows of `w`: twice the
/// bytes in flight a thread, which the larger layers (gpt2-xl's) need.
#[tile::kernel(
    T = [f16, bf16, f32],
    num_warps = 4,
    grid = cdiv(N, BN) * cdiv(M, BM),
    key = [M, K, N],
    // Tiles that assemble without spills on every target: the statistics'
    // sums stay live through the product loop, and ptxas spills some of
    // `gemv`'s tiles with them (`1x8x512`, in 16-bit types only).
    configs = [
        (BM = 1, BN = 4, BK = 1024, R = 1),
        (BM = 1, BN = 8, BK = 1024, R = 1024),
        (BM = 1, BN = 8, BK = 1024, R = 8),
        (T = f32, BM = 1, BN = 8, BK = 512, R = 1),
        (BM = 2, BN = 4, BK = 512, R = 1),
        (BM = 4, BN = 2, BK = 512, R = 1),
        (BM = 8, BN = 2, BK = 512, R = 1),
        (BM = 16, BN = 2, BK = 256, R = 1),
        (BM = 16, BN = 4, BK = 128, R = 1),
    ]
)]
pub fn gemv_layer_norm<T, const BM: usize, const BN: usize, const BK: usize, const R: usize>(
    x: &Tensor<T, { [M, K] }>,
    ln_w: &Tensor<T, { [K] }>,
    w: &Tensor<T, { [N, K] }>,
    scale: &Tensor<f32, { [N] }>,
    shift: &Tensor<f32, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
    eps: f32,
) {
    let n = block_id(0) % cdiv(N, BN);
    let m = block_id(0) / cdiv(N, BN);
    for k in 0..cdiv(K, BK) {
        w.prefetch([n, k], [BN, BK]);
    }
    let first = x.load([m, 0], [BM, 1]).cast::<f32>();
    let mut sum = zeros([BM, BK]);
    let mut squares = zeros([BM, BK]);
    let mut acc = zeros([BM, BN, BK / R]);
    for k in 0..cdiv(K, BK) {
        let t = x.load([m, k], [BM, BK]).cast::<f32>() - first;
        let t = select(k * BK + arange(BK) < K, t, 0.0);
        sum = sum + t;
        squares = squares + t * t;
        let xs = (t * ln_w.load([k], [BK]).cast::<f32>()).reshape([BM, 1, BK]);
        let ws = w.load([n, k], [BN, BK]).cast::<f32>().reshape([1, BN, BK]);
        acc = acc + (xs * ws).reshape([BM, BN, BK / R, R]).sum(3).reshape([BM, BN, BK / R]);
    }
    let mean = sum.sum(1) / K as f32;
    let rstd = rsqrt(max(squares.sum(1) / K as f32 - mean * mean, 0.0) + eps);
    let scale = scale.load([n], [BN]).reshape([1, BN]);
    let out = (acc.sum(2).reshape([BM, BN]) - mean * scale) * rstd + shift.load([n], [BN]);
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// A LayerNorm's affine folded into the linear layer after it, for
/// [`gemv_layer_norm`]. With `h = (x − μ)·rstd·γ + β`,
/// `h @ w^T + b = rstd·((x − μ)·γ @ w^T) + β @ w^T + b`
/// `= rstd·((x·γ) @ w^T − μ·scale) + shift`, where `scale = γ @ w^T` and
/// `shift = β @ w^T + b` depend on the weights alone: computed once, in
/// f32, when the weights are loaded. It belongs to the LayerNorm and the
/// linear it was made from.
pub struct NormFold<B: Backend> {
    /// `[N]`: `γ @ w^T`.
    pub scale: B::Tensor<f32>,
    /// `[N]`: `β @ w^T + b`.
    pub shift: B::Tensor<f32>,
}

/// `scale[n] = Σ_k ln_w[k]·w[n, k]` and `shift[n] = b[n] + Σ_k ln_b[k]·w[n, k]`
/// in f32: [`NormFold`]'s constants, `BN` rows of `w` a block.
#[tile::kernel(T = [f16, bf16, f32], BN = [4], BK = [256], num_warps = 4)]
pub fn fold_layer_norm<T, const BN: usize, const BK: usize>(
    ln_w: &Tensor<T, { [K] }>,
    ln_b: &Tensor<T, { [K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    scale: &mut Tensor<f32, { [N] }>,
    shift: &mut Tensor<f32, { [N] }>,
) {
    let n = block_id(0);
    let mut g = zeros([BN, BK]);
    let mut c = zeros([BN, BK]);
    for k in 0..cdiv(K, BK) {
        let ws = w.load([n, k], [BN, BK]).cast::<f32>();
        g = g + ws * ln_w.load([k], [BK]).cast::<f32>();
        c = c + ws * ln_b.load([k], [BK]).cast::<f32>();
    }
    scale.store([n], g.sum(1).reshape([BN]));
    shift.store([n], c.sum(1).reshape([BN]) + b.load([n], [BN]).cast::<f32>());
}

impl<B: Backend> NormFold<B> {
    /// The fold of the LayerNorm `(ln_w, ln_b)` into the linear `(w, b)`,
    /// `w: [N, K]`.
    pub fn new<T: Element>(
        on: &B,
        (ln_w, ln_b): (&B::Tensor<T>, &B::Tensor<T>),
        (w, b): (&B::Tensor<T>, &B::Tensor<T>),
    ) -> tile::Result<Self> {
        let n = w.shape().first().copied().unwrap_or(0);
        let (mut scale, mut shift) = (on.zeros(&[n])?, on.zeros(&[n])?);
        fold_layer_norm::launch_with(
            on,
            &[4, 256],
            n.div_ceil(4) as u32,
            ln_w,
            ln_b,
            w,
            b,
            &mut scale,
            &mut shift,
        )?;
        Ok(NormFold { scale, shift })
    }
}

/// `y = x @ w^T + b` (then GELU if `gelu`), tuned among the tiles whose
/// blocks take every row of `x`; returns the configuration.
pub fn run<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tuned> {
    tuned_cold(on, &gemv::KERNEL, (x, w), |c, w| {
        gemv::run_with(on, c, x, w, b, y, gelu as i32)
    })
}

/// `y = residual + x @ w^T + b`, tuned as [`run`] is; returns the configuration.
pub fn run_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    tuned_cold(on, &gemv_residual::KERNEL, (x, w), |c, w| {
        gemv_residual::run_with(on, c, x, w, b, residual, y)
    })
}

/// `run(configuration, w)` tuned among `kernel`'s tiles whose blocks take
/// every row of `x` ([`whole_rows`]), timed with the weights `w` cold
/// ([`tune_cold`]: the timed launches take spare tensors of `w`'s shape in
/// its place). A decode step finds its weights in DRAM, not in L2, and the
/// tiles that stream them fastest from DRAM are not the fastest from L2.
/// Returns the configuration.
pub(crate) fn tuned_cold<T: Element, B: Backend>(
    on: &B,
    kernel: &KernelSpec,
    (x, w): (&B::Tensor<T>, &B::Tensor<T>),
    mut run: impl FnMut(Tuned, &B::Tensor<T>) -> tile::Result<()>,
) -> tile::Result<Tuned> {
    let (candidates, key) = whole_rows::<T>(kernel, x.shape(), w.shape());
    let spares = (w.shape(), || on.zeros::<T>(w.shape()));
    tune_cold(on, &key, &candidates, spares, |c, spare| run(c, spare.unwrap_or(w)))
}

/// The configurations of `kernel` for `x: [M, K]` and `w: [N, K]` whose
/// blocks take all M rows (`BM` ≥ M; all for more rows than any `BM`),
/// and the tuning key: the kernel, the element type and the size classes
/// of M, K and N. Blocks that split the rows would each read the weights.
fn whole_rows<T: Element>(kernel: &KernelSpec, x: &[usize], w: &[usize]) -> (Vec<Tuned>, String) {
    let all = kernel.candidates(&[T::DTYPE], false);
    let m = x.first().copied().unwrap_or(0) as i64;
    let whole: Vec<Tuned> = all.iter().copied().filter(|c| c.consts[0] >= m).collect();
    let sizes = [x.first(), x.get(1), w.first()].map(|d| size_class(d.copied().unwrap_or(0)).to_string());
    let key = format!("{}|{}|{}", kernel.module_path, T::DTYPE.name(), sizes.join("x"));
    (if whole.is_empty() { all } else { whole }, key)
}

/// `y = layer_norm(x) @ w^T + b` (then GELU if `gelu`) in one kernel,
/// [`gemv_layer_norm`], tuned as [`run`] is: `(x, ln_w, eps)` of the
/// LayerNorm, `w` and `fold` the LayerNorm's [`NormFold`] into `(w, b)`.
/// Returns the configuration.
pub fn run_layer_norm<T: Element, B: Backend>(
    on: &B,
    (x, ln_w, eps): (&B::Tensor<T>, &B::Tensor<T>, f32),
    (w, fold): (&B::Tensor<T>, &NormFold<B>),
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tuned> {
    tuned_cold(on, &gemv_layer_norm::KERNEL, (x, w), |c, w| {
        gemv_layer_norm::run_with(on, c, x, ln_w, w, &fold.scale, &fold.shift, y, gelu as i32, eps)
    })
}
