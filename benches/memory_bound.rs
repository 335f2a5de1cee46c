//! Achieved bandwidth of the memory-bound library kernels as a fraction of a
//! device-to-device copy measured in the same run, plus the first-launch
//! latency (module load). Run on a GPU:
//!
//! ```text
//! cargo bench --bench memory_bound            # here, or the built binary on the GPU machine
//! python3 benches/torch_memory_bound.py      # PyTorch on the same shapes, same GPU
//! ```
//!
//! Bytes counted: every input read once and every output written once.
//! Each measurement is the median over many launches, rotating between
//! buffer sets so the data never sits in L2. Also a histogram of 2^26
//! values into 1024 bins by `atomic_add` (bytes: the values read), against
//! `torch.bincount` in the PyTorch script.

mod common;

use common::{gpu_stream, median_ms, random};
use std::time::Instant;
use tile::{Element, Stream, Tensor, bf16};
use tile_kernels::{elementwise, norm, scan, softmax};

const SETS: usize = 4;
const REPS: usize = 40;

/// Median milliseconds over `REPS` runs, run `i` on buffer set `i % SETS`.
fn rotating(s: &Stream, mut f: impl FnMut(usize)) -> f64 {
    median_ms(s, REPS, |i| f(i % SETS))
}

fn row(name: &str, dtype: &str, rows: usize, cols: usize, ms: f64, bytes: f64, copy_gbs: f64) {
    let gbs = bytes / ms / 1e6;
    println!(
        "{name:<12} {dtype:<5} {rows:>5}x{cols:<5} {:>9.1} us {:>7.0} GB/s {:>6.1}% of copy",
        ms * 1e3,
        gbs,
        100.0 * gbs / copy_gbs
    );
}

fn bench<T: Element>(s: &Stream, dtype: &str, rows: usize, cols: usize, of: impl Fn(f32) -> T + Copy) {
    let shape = [rows, cols];
    let n = (rows * cols) as f64;
    let eb = std::mem::size_of::<T>() as f64;
    let xs: Vec<Tensor<T>> = (0..SETS)
        .map(|i| random(s, &shape, i as u64 + 1, -2.0, 2.0, of))
        .collect();
    let mut ys: Vec<Tensor<T>> = (0..SETS).map(|_| s.zeros(&shape).unwrap()).collect();
    let w = random(s, &[cols], 99, -2.0, 2.0, of);
    let b = random(s, &[cols], 98, -2.0, 2.0, of);

    let copy_ms = rotating(s, |i| s.copy(&xs[i], &mut ys[i]).unwrap());
    let copy_gbs = 2.0 * n * eb / copy_ms / 1e6;
    row("copy", dtype, rows, cols, copy_ms, 2.0 * n * eb, copy_gbs);

    let ms = rotating(s, |i| softmax::run(s, &xs[i], &mut ys[i]).unwrap());
    row("softmax", dtype, rows, cols, ms, 2.0 * n * eb, copy_gbs);

    let ms = rotating(s, |i| {
        norm::run_layer_norm(s, &xs[i], &w, &b, &mut ys[i], 1e-5).unwrap()
    });
    row("layer_norm", dtype, rows, cols, ms, 2.0 * n * eb, copy_gbs);

    let ms = rotating(s, |i| norm::run_rms_norm(s, &xs[i], &w, &mut ys[i], 1e-5).unwrap());
    row("rms_norm", dtype, rows, cols, ms, 2.0 * n * eb, copy_gbs);

    let ms = rotating(s, |i| scan::run(s, &xs[i], &mut ys[i]).unwrap());
    row("cumsum", dtype, rows, cols, ms, 2.0 * n * eb, copy_gbs);

    let flat_x: Vec<Tensor<T>> = xs.into_iter().map(|t| t.reshape(&[rows * cols]).unwrap()).collect();
    let mut flat_y: Vec<Tensor<T>> = ys.into_iter().map(|t| t.reshape(&[rows * cols]).unwrap()).collect();
    let grid = (rows * cols).div_ceil(4096) as u32;
    let ms = rotating(s, |i| {
        elementwise::gelu::launch::<T, 4096, _>(s, grid, &flat_x[i], &mut flat_y[i]).unwrap()
    });
    row("gelu", dtype, rows, cols, ms, 2.0 * n * eb, copy_gbs);
}

/// Counts of `x`'s values per bin, one `[B]` tile per block, every value
/// added atomically into its bin (values outside the bins dropped).
#[tile::kernel(B = [4096])]
fn histogram<const B: usize>(x: &Tensor<i32, { [N] }>, counts: &mut Tensor<u32, { [BINS] }>) {
    let i = block_id(0);
    counts.atomic_add([x.load([i], [B]).pad(-1)], full([B], 1u32));
}

/// 2^26 values into 1024 bins, uniform: the GPU time and the values' read
/// bandwidth.
fn bench_histogram(s: &Stream) {
    let (n, bins) = (1usize << 26, 1024);
    let xs: Vec<Tensor<i32>> = (0..SETS)
        .map(|i| random(s, &[n], i as u64 + 7, 0.0, bins as f32, |v| v as i32))
        .collect();
    let mut counts: Vec<Tensor<u32>> = (0..SETS).map(|_| s.zeros(&[bins]).unwrap()).collect();
    let grid = n.div_ceil(4096) as u32;
    let ms = rotating(s, |i| {
        histogram::launch::<4096, _>(s, grid, &xs[i], &mut counts[i]).unwrap()
    });
    println!(
        "histogram    i32   2^26 into {bins} bins {:>9.1} us {:>7.0} GB/s",
        ms * 1e3,
        4.0 * n as f64 / ms / 1e6
    );
}

fn main() {
    let Some(s) = gpu_stream("memory_bound bench") else {
        return;
    };

    // First launch of a variant loads its module (the driver compiles the PTX).
    let x = s.zeros::<f32>(&[64, 1024]).unwrap();
    let mut y = s.zeros::<f32>(&[64, 1024]).unwrap();
    let t0 = Instant::now();
    softmax::softmax::launch::<f32, 1024, _>(&s, 64, &x, &mut y).unwrap();
    s.synchronize().unwrap();
    let first = t0.elapsed();
    let t1 = Instant::now();
    softmax::softmax::launch::<f32, 1024, _>(&s, 64, &x, &mut y).unwrap();
    s.synchronize().unwrap();
    let second = t1.elapsed();
    println!("first launch (module load + launch + sync): {first:.2?}; second launch: {second:.2?}\n");

    for (rows, cols) in [(8192, 8192), (8192, 768)] {
        bench::<f32>(&s, "f32", rows, cols, |x| x);
        bench::<bf16>(&s, "bf16", rows, cols, bf16::from_f32);
        println!();
    }
    bench_histogram(&s);
}
