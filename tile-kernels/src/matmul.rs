//! Matrix products on the tensor cores: `c = a @ b` with `a: [M, K]`,
//! `b: [K, N]`, row-major, accumulated in f32 (`mma`), stored as `T`.
//!
//! [`run`], [`run_linear`], [`run_linear_residual`] and [`run_batched`]
//! pick the tile shape by autotuning (see `tile::autotune`): the first
//! problem of each size class on a GPU times the candidates, later ones
//! reuse the choice. They, and the `launch_*_tile`
//! functions that run one tile shape, check that the operands' shapes
//! agree (`tile::Error::Shape` naming the one that does not) before
//! anything is launched.

use crate::shapes::{dims, expect_shapes};
use std::fmt;
use tile::autotune::{size_class, tune};
use tile::{Backend, Element, KernelSpec, TensorView};

/// A tile shape the kernels below are built with, `BM x BN x BK` (one
/// specialization), its blocks launched in pairs that share operand tiles
/// or not (`tile::Grid::in_pairs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub pairs: bool,
}

impl Tile {
    /// `bm x bn x bk`, blocks not in pairs.
    pub const fn new(bm: usize, bn: usize, bk: usize) -> Tile {
        Tile {
            bm,
            bn,
            bk,
            pairs: false,
        }
    }

    /// The const parameters' values that select this tile's specialization.
    fn consts(self) -> [usize; 3] {
        [self.bm, self.bn, self.bk]
    }

    /// The grid for an output of `m x n`: [`blocks`], in pairs for a paired tile.
    fn grid(self, m: usize, n: usize) -> tile::Grid {
        let grid = tile::Grid::from(blocks(m, n, self.bm, self.bn));
        if self.pairs { grid.in_pairs() } else { grid }
    }
}

impl fmt::Display for Tile {
    /// "128x256x64", or "128x256x64 pairs": the name the tuner caches.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let pairs = if self.pairs { " pairs" } else { "" };
        f.pad(&format!("{}x{}x{}{pairs}", self.bm, self.bn, self.bk))
    }
}

/// A linear layer's input, weights and bias, `(x, w, b)`, on backend `B`.
pub type LinearOperands<'a, B, T> = (
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
    &'a <B as Backend>::Tensor<T>,
);

/// The tiles `kernel` is built with for element type `T`, widest first:
/// its attribute's lists, less the combinations it skips; then, in pairs,
/// those with a variant whose blocks run in pairs (f32 operands on
/// sm_90a: faster on some problems, an LM head, slower on others,
/// squares, so the tuner decides).
fn built_tiles<T: Element>(kernel: &KernelSpec) -> Vec<Tile> {
    let types = [T::DTYPE];
    let mut tiles: Vec<Tile> = kernel
        .specializations(&types)
        .iter()
        .map(|c| Tile::new(c[0] as usize, c[1] as usize, c[2] as usize))
        .collect();
    tiles.sort_by_key(|t| std::cmp::Reverse((t.bn, t.bm, t.bk)));
    let paired: Vec<Tile> = tiles
        .iter()
        .filter(|t| kernel.pairs_blocks(&types, &t.consts().map(|c| c as i64)))
        .map(|&t| Tile { pairs: true, ..t })
        .collect();
    tiles.extend(paired);
    tiles
}

/// The tiles [`matmul`] (and [`linear`], built alike) is built with for
/// `T`: what [`run`] tunes over.
pub fn tiles<T: Element>() -> Vec<Tile> {
    built_tiles::<T>(&matmul::KERNEL)
}

/// Of `tiles`, those worth timing on `on`: paired ones only on an sm_90a
/// GPU, the one target with paired variants; elsewhere (the CPU included)
/// they would run as their unpaired twins and be timed twice.
fn candidates<B: Backend>(tiles: Vec<Tile>, on: &B) -> Vec<Tile> {
    let pairs = on.stream().is_some_and(|s| s.device().target() == tile::Target::Sm90a);
    tiles.into_iter().filter(|t| pairs || !t.pairs).collect()
}

/// `c = a @ b` on `on` with `tile` (one of [`tiles`]; another is a
/// `tile::Error::NotBuilt`).
pub fn launch_tile<T: Element, B: Backend>(
    on: &B,
    tile: Tile,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<()> {
    let (m, _, n) = matmul_sizes(a, b, c)?;
    matmul::launch_with(on, &tile.consts(), tile.grid(m, n), a, b, c)
}

/// `y = x @ w^T + b` (GELU after if `gelu`) on `on` with `tile` (one of [`tiles`]).
pub fn launch_linear_tile<T: Element, B: Backend>(
    on: &B,
    tile: Tile,
    (x, w, b): LinearOperands<B, T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<()> {
    let (m, _, n) = linear_sizes((x, w, b), None, y)?;
    linear::launch_with(on, &tile.consts(), tile.grid(m, n), x, w, b, y, gelu as i32)
}

/// Of `tiles`, those worth timing for `batch` outputs `m x n` on a GPU of
/// `multiprocessors` SMs (`None`: the CPU). When even the smallest tile's
/// grid is under one wave (fewer blocks than SMs), every block runs at
/// once and takes one K-loop's time, which a smaller tile shortens: the
/// smallest tile (the longest K-step of those) is the choice, untimed.
/// (The GPT's layers are such products: launches of a few microseconds
/// that timing told apart by noise only, at a cost of 4 s on the first
/// `generate`, H100.) On the CPU, where every tile computes the same
/// result and nothing is timed, the smallest too: it pads the least.
fn worth_timing(tiles: Vec<Tile>, (batch, m, n): (usize, usize, usize), multiprocessors: Option<usize>) -> Vec<Tile> {
    let smallest = tiles
        .iter()
        .filter(|t| !t.pairs)
        .min_by_key(|t| (t.bm * t.bn, std::cmp::Reverse(t.bk)))
        .copied();
    let under_a_wave = |t: Tile| multiprocessors.is_none_or(|sms| batch * (blocks(m, n, t.bm, t.bn) as usize) < sms);
    match smallest {
        Some(t) if under_a_wave(t) => vec![t],
        _ => tiles,
    }
}

/// `(m, k, n)` of `c = a @ b`, the operands' shapes checked against each other.
fn matmul_sizes(a: &impl TensorView, b: &impl TensorView, c: &impl TensorView) -> tile::Result<(usize, usize, usize)> {
    let ([m, k], [_, n]) = (dims("a", a.shape())?, dims("b", b.shape())?);
    let from = format!("c = a @ b with a: [M, K] = [{m}, {k}]");
    expect_shapes(&from, &[("b", b.shape(), &[k, n]), ("c", c.shape(), &[m, n])])?;
    Ok((m, k, n))
}

/// `(m, k, n)` of `y = [residual +] x @ w^T + b`, the shapes checked.
fn linear_sizes<V: TensorView>(
    (x, w, b): (&V, &V, &V),
    residual: Option<&V>,
    y: &V,
) -> tile::Result<(usize, usize, usize)> {
    let ([m, k], [n, _]) = (dims("x", x.shape())?, dims("w", w.shape())?);
    let from = format!("y = x @ w^T + b with x: [M, K] = [{m}, {k}], w: [N, K] = [{n}, ..]");
    let (nk, n1, mn) = ([n, k], [n], [m, n]);
    let mut tensors = vec![("w", w.shape(), &nk[..]), ("b", b.shape(), &n1[..])];
    tensors.extend(residual.map(|r| ("residual", r.shape(), &mn[..])));
    tensors.push(("y", y.shape(), &mn));
    expect_shapes(&from, &tensors)?;
    Ok((m, k, n))
}

/// `(batch, (m, k, n))` of `c[i] = a[i] @ b[i]`, the shapes checked.
fn batched_sizes(
    a: &impl TensorView,
    b: &impl TensorView,
    c: &impl TensorView,
) -> tile::Result<(usize, (usize, usize, usize))> {
    let ([batch, m, k], [_, _, n]) = (dims("a", a.shape())?, dims("b", b.shape())?);
    let from = format!("c[i] = a[i] @ b[i] with a: [B, M, K] = [{batch}, {m}, {k}]");
    expect_shapes(
        &from,
        &[("b", b.shape(), &[batch, k, n]), ("c", c.shape(), &[batch, m, n])],
    )?;
    Ok((batch, (m, k, n)))
}

/// Tunes `launch` on `on` over `kernel`'s tiles for `batch` products
/// `m x k x n` of `T` (the key: the kernel's name, the dtype and the size
/// classes, the batch's only for a batched kernel, `Some(batch)`), runs the
/// fastest and returns it.
fn tuned<T: Element, B: Backend>(
    on: &B,
    kernel: &KernelSpec,
    batch: Option<usize>,
    (m, k, n): (usize, usize, usize),
    launch: impl FnMut(Tile) -> tile::Result<()>,
) -> tile::Result<Tile> {
    let batch_class = batch.map_or(String::new(), |b| format!("{}x", size_class(b)));
    let key = format!(
        "{}|{}|{batch_class}{}x{}x{}",
        kernel.name,
        T::DTYPE,
        size_class(m),
        size_class(k),
        size_class(n)
    );
    let tiles = candidates(built_tiles::<T>(kernel), on);
    let outputs = (batch.unwrap_or(1), m, n);
    let multiprocessors = on.stream().map(|s| s.device().multiprocessors());
    tune(on, &key, &worth_timing(tiles, outputs, multiprocessors), launch)
}

/// `c = a @ b` on `on` with the tile shape tuned for this problem class;
/// returns that tile (one of [`tiles`]).
pub fn run<T: Element, B: Backend>(
    on: &B,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<Tile> {
    let sizes = matmul_sizes(a, b, c)?;
    tuned::<T, B>(on, &matmul::KERNEL, None, sizes, |tile| launch_tile(on, tile, a, b, c))
}

/// `y = x @ w^T + b` (then GELU if `gelu`) on `on` with the tile shape
/// tuned for this problem class; returns that tile.
pub fn run_linear<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    w: &B::Tensor<T>,
    b: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
    gelu: bool,
) -> tile::Result<Tile> {
    let sizes = linear_sizes((x, w, b), None, y)?;
    tuned::<T, B>(on, &linear::KERNEL, None, sizes, |tile| {
        launch_linear_tile(on, tile, (x, w, b), y, gelu)
    })
}

/// `y = residual + x @ w^T + b` on `on` with `tile` (one
/// [`linear_residual`] is built with; another is a `tile::Error::NotBuilt`).
pub fn launch_linear_residual_tile<T: Element, B: Backend>(
    on: &B,
    tile: Tile,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<()> {
    let (m, _, n) = linear_sizes((x, w, b), Some(residual), y)?;
    linear_residual::launch_with(on, &tile.consts(), tile.grid(m, n), x, w, b, residual, y)
}

/// `y = residual + x @ w^T + b` on `on` with the tile shape tuned for this
/// problem class; returns that tile.
pub fn run_linear_residual<T: Element, B: Backend>(
    on: &B,
    (x, w, b): LinearOperands<B, T>,
    residual: &B::Tensor<T>,
    y: &mut B::Tensor<T>,
) -> tile::Result<Tile> {
    let sizes = linear_sizes((x, w, b), Some(residual), y)?;
    tuned::<T, B>(on, &linear_residual::KERNEL, None, sizes, |tile| {
        launch_linear_residual_tile(on, tile, (x, w, b), residual, y)
    })
}

/// `c[i] = a[i] @ b[i]` on `on` with `tile` (one [`batched_matmul`] is built with).
pub fn launch_batched_tile<T: Element, B: Backend>(
    on: &B,
    tile: Tile,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<()> {
    let (batch, (m, _, n)) = batched_sizes(a, b, c)?;
    let grid = tile::Grid {
        y: batch as u32,
        ..tile.grid(m, n)
    };
    batched_matmul::launch_with(on, &tile.consts(), grid, a, b, c)
}

/// `c[i] = a[i] @ b[i]` for `a: [B, M, K]`, `b: [B, K, N]` on `on`, with
/// the tile shape tuned for this problem class (the batch's included);
/// returns that tile.
pub fn run_batched<T: Element, B: Backend>(
    on: &B,
    a: &B::Tensor<T>,
    b: &B::Tensor<T>,
    c: &mut B::Tensor<T>,
) -> tile::Result<Tile> {
    let (batch, sizes) = batched_sizes(a, b, c)?;
    tuned::<T, B>(on, &batched_matmul::KERNEL, Some(batch), sizes, |tile| {
        launch_batched_tile(on, tile, a, b, c)
    })
}

/// `c = a @ b`. A 1-D grid of [`blocks`] blocks; `group_tiles` hands
/// consecutive blocks the tiles of `8 * BN / BM` tile-rows column by
/// column, so a wave of blocks shares operand tiles in L2. A group spans
/// 8·BN rows of `a` whatever the tile's shape: wide tiles, of which a wave
/// covers fewer columns, take taller groups. The linear layers below group
/// alike (GPT-2's LM head as `linear`, 64x256 tiles in groups of 32
/// tile-rows: +4% on an H100 against groups of 8).
///
/// The specializations are [`run`]'s tuning candidates ([`tiles`]). Not
/// built: f32 with a K-step of 64, whose fragments would spill registers,
/// and 128x64 tiles, which the tuner chose on no shape, on either path
/// (H100, BENCHMARKS.md).
#[tile::kernel(
    T = [f16, bf16, f32],
    configs = [
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
    ]
)]
pub fn matmul<T, const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) {
    let [m, n] = group_tiles(block_id(0), cdiv(a.shape(0), BM), cdiv(b.shape(1), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<T>());
}

/// Blocks to launch for `c: [m, n]` with `bm x bn` tiles.
pub fn blocks(m: usize, n: usize, bm: usize, bn: usize) -> u32 {
    (m.div_ceil(bm) * n.div_ceil(bn)) as u32
}

/// `y = x @ w^T + b`, then tanh-GELU when `gelu` is 1: a linear layer with
/// `x: [M, K]`, `w: [N, K]` (PyTorch's layout, read transposed in place),
/// `b: [N]`, `y: [M, N]`. Grid: [`blocks`]`(M, N, BM, BN)`. Built as
/// [`matmul`] is, for [`run_linear`] to tune.
#[tile::kernel(
    T = [f16, bf16, f32],
    configs = [
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
    ]
)]
pub fn linear<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    y: &mut Tensor<T>,
    gelu: i32,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(x.shape(0), BM), cdiv(w.shape(0), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(x.shape(1), BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>();
    if gelu == 1 {
        let inner = 0.7978845608028654 * (out + 0.044715 * out * out * out);
        y.store([m, n], (0.5 * out * (1.0 + tanh(inner))).cast::<T>());
    } else {
        y.store([m, n], out.cast::<T>());
    }
}

/// `y = residual + x @ w^T + b`: a projection fused with the residual
/// connection after it. Shapes as [`linear`]; `residual: [M, N]`.
#[tile::kernel(
    T = [f16, bf16, f32],
    configs = [
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 128, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 64, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
    ]
)]
pub fn linear_residual<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    residual: &Tensor<T>,
    y: &mut Tensor<T>,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(x.shape(0), BM), cdiv(w.shape(0), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(x.shape(1), BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    let out = acc + b.load([n], [BN]).cast::<f32>() + residual.load([m, n], [BM, BN]).cast::<f32>();
    y.store([m, n], out.cast::<T>());
}

/// `c[i] = a[i] @ b[i]` for a batch: `a: [B, M, K]`, `b: [B, K, N]`,
/// `c: [B, M, N]`. Grid: `(blocks(M, N, BM, BN), B)`.
#[tile::kernel(
    T = [f16, bf16, f32],
    configs = [
        (BM = 64, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 64, BK = 64),
        (BM = 64, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 64, BN = 256, BK = 64),
        (BM = 128, BN = 64, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 64, BK = 64),
        (BM = 128, BN = 128, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 128, BK = 64),
        (BM = 128, BN = 256, BK = 32),
        (T = [f16, bf16], BM = 128, BN = 256, BK = 64),
    ]
)]
pub fn batched_matmul<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &mut Tensor<T>,
) {
    let batch = block_id(1);
    let tiles_n = cdiv(b.shape(2), BN);
    let m = block_id(0) / tiles_n;
    let n = block_id(0) % tiles_n;
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(2), BK) {
        let x = a.load([batch, m, k], [1, BM, BK]).reshape([BM, BK]);
        let y = b.load([batch, k, n], [1, BK, BN]).reshape([BK, BN]);
        acc = mma(x, y, acc);
    }
    c.store([batch, m, n], acc.reshape([1, BM, BN]).cast::<T>());
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile::bf16;

    #[test]
    fn tiles_are_the_attributes_specializations_widest_first() {
        let names = |tiles: Vec<Tile>| tiles.iter().map(Tile::to_string).collect::<Vec<_>>();
        let bn_bm = ["256x128", "256x64", "128x128", "128x64", "64x64"];
        // 16-bit: every listed combination, none in pairs.
        let want: Vec<String> = bn_bm
            .iter()
            .flat_map(|s| {
                let (bn, bm) = s.split_once('x').unwrap();
                [64, 32].map(|bk| format!("{bm}x{bn}x{bk}"))
            })
            .collect();
        assert_eq!(names(tiles::<bf16>()), want);
        // f32: no K-step of 64 (skipped), and each tile again in pairs
        // (its `wgmma` variants run blocks in clusters of two).
        let once: Vec<String> = want.iter().filter(|t| t.ends_with("x32")).cloned().collect();
        let twice: Vec<String> = once
            .iter()
            .cloned()
            .chain(once.iter().map(|t| format!("{t} pairs")))
            .collect();
        assert_eq!(names(tiles::<f32>()), twice);
        assert_eq!(built_tiles::<f32>(&linear::KERNEL), tiles::<f32>());
        // Under one wave of 64x64 blocks, only the smallest tile (longest
        // K-step) is a candidate; from one wave on, all are.
        assert_eq!(
            names(worth_timing(tiles::<bf16>(), (1, 128, 512), Some(132))),
            ["64x64x64"]
        );
        assert_eq!(names(worth_timing(tiles::<f32>(), (1, 7, 87), Some(132))), ["64x64x32"]);
        assert_eq!(worth_timing(tiles::<f32>(), (1, 768, 768), Some(132)), tiles::<f32>());
        // A batch of small products can fill a wave.
        assert_eq!(worth_timing(tiles::<f32>(), (12, 128, 512), Some(132)), tiles::<f32>());
        // The CPU times nothing: the smallest tile, whatever the problem.
        assert_eq!(names(worth_timing(tiles::<f32>(), (12, 768, 768), None)), ["64x64x32"]);
        assert_eq!(
            format!(
                "{:>18}|",
                Tile {
                    pairs: true,
                    ..Tile::new(64, 128, 32)
                }
            ),
            "   64x128x32 pairs|"
        );
    }
}
