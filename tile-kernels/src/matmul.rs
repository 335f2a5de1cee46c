//! Matrix products on the tensor cores: `c = a @ b` with `a: [M, K]`,
//! `b: [K, N]`, row-major, accumulated in f32 (`mma`), stored as `T`.
//!
//! Each kernel declares its configurations and its tuning, so its module
//! has `run` (the configuration tuned for the problem's size class on a
//! GPU, the first on the CPU; see `tile::autotune`) and `run_with` (one
//! configuration). Each declares its operands' shapes, which are checked
//! before anything is tuned or launched (`tile::Error::ShapeContract`
//! names the operand and dimension that disagree): a tile's masks would
//! otherwise compute a partial product. [`run`], [`run_linear`],
//! [`run_linear_residual`] and [`run_batched`] call them; for linear
//! layers of up to [`gemv::MAX_ROWS`] rows, the tuner also weighs
//! [`crate::gemv`]'s kernels: the CUDA cores', and the tensor cores' split
//! along K over a cluster.

use crate::linear::LinearOperands;
use crate::norm::LayerNormOperands;
use crate::{gemv, split_k};
use tile::{Backend, Element, TensorView, Tuned};

/// `c = a @ b` with the configuration tuned for this problem class; returns it.
pub fn run<T: Element, B: Backend>(
    on: &B,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    matmul::run(on, a, b, c)
}

/// The configuration a tuned linear layer ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearTile {
    /// A tile of [`linear`] or [`linear_residual`], on the tensor cores.
    TensorCores(Tuned),
    /// A tile of [`gemv::gemv`] or [`gemv::gemv_residual`], for a few rows.
    Gemv(Tuned),
    /// A tile of [`split_k::linear_split_k`] or
    /// [`split_k::linear_split_k_residual`], for a few rows.
    SplitK(Tuned),
}

impl std::fmt::Display for LinearTile {
    /// The tile as the tuner names it (`64x128x64`), `gemv ` or `split-K `
    /// before a few-row kernel's tile.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinearTile::TensorCores(t) => f.pad(&t.to_string()),
            LinearTile::Gemv(t) => f.pad(&format!("gemv {t}")),
            LinearTile::SplitK(t) => f.pad(&format!("split-K {t}")),
        }
    }
}

/// `y = x @ w^T + b` (then GELU if `gelu`), tuned; returns the configuration.
/// Up to [`gemv::MAX_ROWS`] rows, the tuner weighs [`gemv::gemv`]'s and
/// [`split_k::linear_split_k`]'s best tiles against [`linear`]'s.
pub fn run_linear<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    w: &B::Tensor<T>,
    b: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<LinearTile> {
    few_rows_or_not::<T, B>(on, ("linear", x, w), y, |family, w, y| match family {
        Family::Gemv => gemv::run(on, (x, w, b), y, gelu),
        Family::SplitK => split_k::run(on, (x, w, b), y, gelu),
        Family::TensorCores => linear::run(on, x, w, b, y, gelu as i32),
    })
}

/// `y = residual + x @ w^T + b`, tuned as [`run_linear`] is; returns the configuration.
pub fn run_linear_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<LinearTile> {
    few_rows_or_not::<T, B>(on, ("linear_residual", x, w), y, |family, w, y| match family {
        Family::Gemv => gemv::run_residual(on, (x, w, b), residual, y),
        Family::SplitK => split_k::run_residual(on, (x, w, b), residual, y),
        Family::TensorCores => linear_residual::run(on, x, w, b, residual, y),
    })
}

/// `y = layer_norm(x) @ w^T + b` (then GELU if `gelu`), `norm` being the
/// LayerNorm's `(x, weight, bias, eps)` and `fold` its [`gemv::NormFold`]
/// into `(w, b)`: the LayerNorm kernel into `normed` (`[M, K]`, scratch
/// the caller holds, so that a pass allocates and clears nothing), then
/// [`linear`]'s tuned tile; or, up to [`gemv::MAX_ROWS`] rows,
/// [`gemv::gemv_layer_norm`] (the LayerNorm folded into the product, one
/// launch), or the LayerNorm kernel then [`split_k::linear_split_k`], where
/// the tuner finds it faster. Returns the product's configuration.
pub fn run_layer_norm_linear<T: Element, B: Backend>(
    on: &B,
    norm: LayerNormOperands<B, T>,
    (w, b, fold): (&B::Tensor<T>, &B::Tensor<T>, &gemv::NormFold<B>),
    y: &mut B::Tensor<T>,
    gelu: bool,
    normed: &mut B::Tensor<T>,
) -> tile::Result<LinearTile> {
    let (x, ln_w, ln_b, eps) = norm;
    few_rows_or_not::<T, B>(on, ("layer_norm_linear", x, w), y, |family, w, y| match family {
        Family::Gemv => gemv::run_layer_norm(on, (x, ln_w, eps), (w, fold), y, gelu),
        product => {
            crate::norm::run_layer_norm(on, x, ln_w, ln_b, normed, eps)?;
            match product {
                Family::SplitK => split_k::run(on, (normed, w, b), y, gelu),
                _ => linear::run(on, normed, w, b, y, gelu as i32),
            }
        }
    })
}

/// Runs the [`Family::TensorCores`] kernel (`run` runs a family's tuned
/// tile into `y`), or, where `x: [M, K]` has at most [`gemv::MAX_ROWS`]
/// rows, whichever family the tuner finds faster for the problem class of
/// `layer` (the name it is tuned under) with weights `w: [N, K]`, timed
/// with the weights cold (spares of `w`'s shape, which `run` takes in its
/// place), as a decode step reads them. The key names the families, so
/// a build that offers another tunes again. The tensor cores come first,
/// which the CPU runs untimed: their CPU version's large tiles run faster
/// there than `gemv`'s.
fn few_rows_or_not<T: Element, B: Backend>(
    on: &B,
    (layer, x, w): (&str, &B::Tensor<T>, &B::Tensor<T>),
    y: &mut B::Tensor<T>,
    mut run: impl FnMut(Family, &B::Tensor<T>, &mut B::Tensor<T>) -> tile::Result<Tuned>,
) -> tile::Result<LinearTile> {
    let (m, k, n) = match (x.shape(), w.shape()) {
        (&[m, k], &[n, _]) if m <= gemv::MAX_ROWS => (m, k, n),
        // More rows, or not a layer (the tensor-core kernel's checks say what is wrong).
        _ => return run(Family::TensorCores, w, y).map(|t| Family::TensorCores.ran(t)),
    };
    let families = [Family::TensorCores, Family::Gemv, Family::SplitK];
    let classes = [m, k, n].map(|d| tile::autotune::size_class(d).to_string());
    let names: Vec<String> = families.iter().map(Family::to_string).collect();
    let key = format!(
        "{}::few_rows|{layer}|{}|{}|{}",
        module_path!(),
        T::DTYPE.name(),
        classes.join("x"),
        names.join(",")
    );
    let mut ran = None;
    // Timed with the weights cold, as a decode step reads them.
    let spares = (w.shape(), || on.zeros::<T>(w.shape()));
    tile::autotune::tune_cold(on, &key, &families, spares, |family, spare| {
        ran = Some(family.ran(run(family, spare.unwrap_or(w), y)?));
        Ok(())
    })?;
    Ok(ran.expect("the tuner runs its choice last"))
}

/// The kernels a few-row linear layer can run, as the tuner names them.
#[derive(Clone, Copy)]
enum Family {
    Gemv,
    SplitK,
    TensorCores,
}

impl Family {
    /// The configuration `tuned` of this family, as a [`LinearTile`].
    fn ran(self, tuned: Tuned) -> LinearTile {
        match self {
            Family::Gemv => LinearTile::Gemv(tuned),
            Family::SplitK => LinearTile::SplitK(tuned),
            Family::TensorCores => LinearTile::TensorCores(tuned),
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::Gemv => "gemv",
            Family::SplitK => "split-K",
            Family::TensorCores => "tensor cores",
        })
    }
}

/// `c[i] = a[i] @ b[i]` for `a: [B, M, K]`, `b: [B, K, N]`, tuned (the
/// batch's size class in the key); returns the configuration.
pub fn run_batched<T: Element, B: Backend>(
    on: &B,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<Tuned> {
    batched_matmul::run(on, a, b, c)
}

/// `c = a @ b`. A 1-D grid, a block per output tile; `group_tiles` hands
/// consecutive blocks the tiles of `8 * BN / BM` tile-rows column by
/// column, so a wave of blocks shares operand tiles in L2. A group spans
/// 8·BN rows of `a` whatever the tile's shape: wide tiles, of which a wave
/// covers fewer columns, take taller groups. The linear layers below group
/// alike.
///
/// The configurations are `run`'s tuning candidates, the longer K-step
/// first where two share a tile (the choice when a grid fills less than a
/// wave: the most blocks, the first of those). Not built: f32 with a K-step
/// of 64, whose fragments would spill registers, and 128x64 tiles, which
/// the tuner chose on no shape.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = cdiv(M, BM) * cdiv(N, BN),
    key = [M, K, N],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn matmul<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T, { [M, K] }>,
    b: &Tensor<T, { [K, N] }>,
    c: &mut Tensor<T, { [M, N] }>,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(M, BM), cdiv(N, BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(K, BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<T>());
}

/// `y = x @ w^T + b`, then tanh-GELU when `gelu` is 1: a linear layer with
/// `x: [M, K]`, `w: [N, K]` (PyTorch's layout, read transposed in place),
/// `b: [N]`, `y: [M, N]`. Built and tuned as [`matmul`] is.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = cdiv(M, BM) * cdiv(N, BN),
    key = [M, K, N],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn linear<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    y: &mut Tensor<T, { [M, N] }>,
    gelu: i32,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(M, BM), cdiv(N, BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(K, BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        y.store([m, n], gelu(out).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = residual + x @ w^T + b`: a projection fused with the residual
/// connection after it. Shapes as [`linear`]; `residual: [M, N]`.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = cdiv(M, BM) * cdiv(N, BN),
    key = [M, K, N],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 64, BK = 64),
        (BM = 128, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn linear_residual<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    b: &Tensor<T, { [N] }>,
    residual: &Tensor<T, { [M, N] }>,
    y: &mut Tensor<T, { [M, N] }>,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(M, BM), cdiv(N, BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(K, BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>() + residual.load([m, n], [BM, BN]).cast::<f32>();
    y.store([m, n], out.cast::<T>());
}

/// `c[i] = a[i] @ b[i]` for a batch: `a: [B, M, K]`, `b: [B, K, N]`,
/// `c: [B, M, N]`. Grid: the output tiles of one product along x, the batch along y.
#[tile::kernel(
    T = [f16, bf16, f32],
    grid = (cdiv(M, BM) * cdiv(N, BN), B),
    key = [B, M, K, N],
    configs = [
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 64, BK = 64),
        (BM = 128, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 256, BK = 32),
    ]
)]
pub fn batched_matmul<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T, { [B, M, K] }>,
    b: &Tensor<T, { [B, K, N] }>,
    c: &mut Tensor<T, { [B, M, N] }>,
) {
    let batch = block_id(1);
    let tiles_n = cdiv(N, BN);
    let m = block_id(0) / tiles_n;
    let n = block_id(0) % tiles_n;
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(K, BK) {
        let x = a.load([batch, m, k], [1, BM, BK]).reshape([BM, BK]);
        let y = b.load([batch, k, n], [1, BK, BN]).reshape([BK, BN]);
        acc = mma(x, y, acc);
    }
    c.store([batch, m, n], acc.reshape([1, BM, BN]).cast::<T>());
}
