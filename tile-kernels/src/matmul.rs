//! Matrix products on the tensor cores: `c = a @ b` with `a: [M, K]`,
//! `b: [K, N]`, row-major, accumulated in f32 (`mma`), stored as `T`.
//!
//! [`run`] and [`run_linear`] pick the tile shape by autotuning (see
//! `tile::autotune`): the first problem of each size class on a GPU times the
//! candidates, later ones reuse the choice.

use tile::autotune::{size_class, tune};
use tile::{Element, Stream, Tensor};

/// The tile shapes (`BMxBNxBK`) the tuned entry points choose from.
pub const TILES: [&str; 10] = [
    "128x256x64",
    "128x256x32",
    "64x256x64",
    "64x256x32",
    "128x128x64",
    "128x128x32",
    "64x128x64",
    "64x128x32",
    "64x64x64",
    "64x64x32",
];

/// The f32 tiles again, launched in pairs of blocks that share operand
/// tiles (`tile::Grid::in_pairs`; sm_90a): faster on some problems (an LM
/// head), slower on others (squares), so the tuner decides.
const PAIRED_TILES: [&str; 5] = [
    "128x256x32 pairs",
    "64x256x32 pairs",
    "128x128x32 pairs",
    "64x128x32 pairs",
    "64x64x32 pairs",
];

/// The tiles built for element type `T`: for f32 (tf32) operands, no
/// K-step of 64, where their fragments would spill registers (the kernels
/// skip those combinations), and each launched in pairs too.
pub fn tiles<T: Element>() -> Vec<&'static str> {
    if T::DTYPE != tile::DType::F32 {
        return TILES.to_vec();
    }
    TILES
        .into_iter()
        .filter(|t| !t.ends_with("x64"))
        .chain(PAIRED_TILES)
        .collect()
}

/// The tiles worth timing on `stream`'s device: [`tiles`], less the paired
/// ones where no variant runs blocks in pairs (every target but sm_90a),
/// which would launch as their unpaired twins and be timed twice.
fn candidates<T: Element>(stream: &Stream) -> Vec<&'static str> {
    let pairs = stream.device().target() == tile::Target::Sm90a;
    tiles::<T>()
        .into_iter()
        .filter(|t| pairs || !t.ends_with(" pairs"))
        .collect()
}

/// The grid of `blocks` blocks, in pairs for a tile named "... pairs".
fn grid(tile: &str, blocks: u32) -> tile::Grid {
    let grid = tile::Grid::from(blocks);
    if tile.ends_with(" pairs") {
        grid.in_pairs()
    } else {
        grid
    }
}

/// Launches `$kernel` with the tile named `$tile` (one of [`tiles`]; an
/// unknown name is the smallest tile) on a grid of [`blocks`] for `$m x $n`,
/// in pairs for a name ending in " pairs".
macro_rules! launch_with_tile {
    ($tile:expr, $kernel:ident::<$T:ty>, $stream:expr, ($m:expr, $n:expr), $($arg:expr),*) => {{
        let t: &str = $tile;
        let on = |bm, bn| grid(t, blocks($m, $n, bm, bn));
        match t.trim_end_matches(" pairs") {
            "128x256x64" => $kernel::launch::<$T, 128, 256, 64>($stream, on(128, 256), $($arg),*),
            "128x256x32" => $kernel::launch::<$T, 128, 256, 32>($stream, on(128, 256), $($arg),*),
            "64x256x64" => $kernel::launch::<$T, 64, 256, 64>($stream, on(64, 256), $($arg),*),
            "64x256x32" => $kernel::launch::<$T, 64, 256, 32>($stream, on(64, 256), $($arg),*),
            "128x128x64" => $kernel::launch::<$T, 128, 128, 64>($stream, on(128, 128), $($arg),*),
            "128x128x32" => $kernel::launch::<$T, 128, 128, 32>($stream, on(128, 128), $($arg),*),
            "64x128x64" => $kernel::launch::<$T, 64, 128, 64>($stream, on(64, 128), $($arg),*),
            "64x128x32" => $kernel::launch::<$T, 64, 128, 32>($stream, on(64, 128), $($arg),*),
            "64x64x64" => $kernel::launch::<$T, 64, 64, 64>($stream, on(64, 64), $($arg),*),
            _ => $kernel::launch::<$T, 64, 64, 32>($stream, on(64, 64), $($arg),*),
        }
    }};
}

/// `c = a @ b` with one of [`tiles`] (an unknown name is the smallest tile).
pub fn launch_tile<T: Element>(
    stream: &Stream,
    tile: &str,
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &mut Tensor<T>,
) -> tile::Result<()> {
    let (m, n) = (a.shape()[0], b.shape().get(1).copied().unwrap_or(0));
    launch_with_tile!(tile, matmul::<T>, stream, (m, n), a, b, c)
}

/// `y = x @ w^T + b` (GELU after if `gelu`) with one of [`tiles`].
pub fn launch_linear_tile<T: Element>(
    stream: &Stream,
    tile: &str,
    (x, w, b): (&Tensor<T>, &Tensor<T>, &Tensor<T>),
    y: &mut Tensor<T>,
    gelu: bool,
) -> tile::Result<()> {
    let (m, n) = (x.shape()[0], w.shape()[0]);
    launch_with_tile!(tile, linear::<T>, stream, (m, n), x, w, b, y, gelu as i32)
}

fn dims(shape: &[usize], rank: usize, what: &str) -> tile::Result<Vec<usize>> {
    if shape.len() != rank {
        return Err(tile::Error::Shape(format!(
            "{what} must have rank {rank}, got shape {shape:?}"
        )));
    }
    Ok(shape.to_vec())
}

/// `c = a @ b` with the tile shape tuned for this problem class; returns
/// that tile's name (one of [`tiles`]).
pub fn run<T: Element>(stream: &Stream, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> tile::Result<&'static str> {
    let (sa, sb) = (dims(a.shape(), 2, "a")?, dims(b.shape(), 2, "b")?);
    let (m, k, n) = (sa[0], sa[1], sb[1]);
    let key = format!(
        "matmul|{}|{}x{}x{}",
        T::DTYPE,
        size_class(m),
        size_class(k),
        size_class(n)
    );
    tune(stream, &key, &candidates::<T>(stream), |tile| {
        launch_tile(stream, tile, a, b, c)
    })
}

/// `y = x @ w^T + b` (then GELU if `gelu`) with the tile shape tuned for
/// this problem class; returns that tile's name.
pub fn run_linear<T: Element>(
    stream: &Stream,
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    y: &mut Tensor<T>,
    gelu: bool,
) -> tile::Result<&'static str> {
    let (sx, sw) = (dims(x.shape(), 2, "x")?, dims(w.shape(), 2, "w")?);
    let (m, k, n) = (sx[0], sx[1], sw[0]);
    let key = format!(
        "linear|{}|{}x{}x{}",
        T::DTYPE,
        size_class(m),
        size_class(k),
        size_class(n)
    );
    tune(stream, &key, &candidates::<T>(stream), |tile| {
        launch_linear_tile(stream, tile, (x, w, b), y, gelu)
    })
}

/// `c = a @ b`. A 1-D grid of [`blocks`] blocks; `group_tiles` hands
/// consecutive blocks the tiles of `8 * BN / BM` tile-rows column by
/// column, so a wave of blocks shares operand tiles in L2. A group spans
/// 8·BN rows of `a` whatever the tile's shape: wide tiles, of which a wave
/// covers fewer columns, take taller groups. The linear layers below group
/// alike (GPT-2's LM head as `linear`, 64x256 tiles in groups of 32
/// tile-rows: +4% on an H100 against groups of 8).
#[tile::kernel(
    T = [f16, bf16, f32],
    BM = [64, 128],
    BN = [64, 128, 256],
    BK = [32, 64],
    skip = [(T = f32, BK = 64)]
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
/// `b: [N]`, `y: [M, N]`. Grid: [`blocks`]`(M, N, BM, BN)`.
#[tile::kernel(
    T = [f16, bf16, f32],
    BM = [64, 128],
    BN = [64, 128, 256],
    BK = [32, 64],
    skip = [(T = f32, BK = 64)]
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
    BM = [64, 128],
    BN = [64, 128, 256],
    BK = [32, 64],
    skip = [(T = f32, BN = 256), (T = f32, BK = 64)]
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
    BM = [64, 128],
    BN = [64, 128, 256],
    BK = [32, 64],
    skip = [(T = f32, BK = 64)]
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
