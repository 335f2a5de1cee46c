//! Shared by the benches: CUDA-event timing, random inputs, a fresh
//! tuning cache, cuBLAS's product, and the GPT-2 benches' prompts and
//! wall-clock medians.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys};
use std::path::PathBuf;
use tile::{Element, Stream, Tensor};

/// A stream on the first GPU, after printing its name and architecture;
/// `None` (after one line saying so) without a GPU.
pub fn gpu_stream(bench: &str) -> Option<Stream> {
    let device = tile::testing::gpu_or_skip(bench)?;
    let (major, minor) = device.compute_capability();
    println!("{} (sm_{major}{minor})", device.name());
    Some(device.stream())
}

/// Milliseconds of GPU time between events recorded on `s` before and
/// after `f` (the work `f` queues on `s`, and any gap in which `s` waits
/// for the host).
pub fn gpu_ms(s: &Stream, f: impl FnOnce()) -> f64 {
    let start = s.record().unwrap();
    f();
    let end = s.record().unwrap();
    start.elapsed_ms(&end).unwrap() as f64
}

/// Median milliseconds of `reps` runs of `f(i)` (after one warm-up run),
/// each timed with events on `s`; `i` counts the runs, for rotating inputs.
#[allow(dead_code)] // the benches that take their own medians, not criterion's
pub fn median_ms(s: &Stream, reps: usize, mut f: impl FnMut(usize)) -> f64 {
    f(0);
    let mut times: Vec<f64> = (0..reps).map(|i| gpu_ms(s, || f(i))).collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[reps / 2]
}

/// A tensor of `shape` filled with values uniform in `[lo, hi)` (xorshift, seeded).
pub fn random<T: Element>(
    s: &Stream,
    shape: &[usize],
    seed: u64,
    lo: f32,
    hi: f32,
    of: impl Fn(f32) -> T,
) -> Tensor<T> {
    let n: usize = shape.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data: Vec<T> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            of(lo + (x >> 40) as f32 / (1u64 << 24) as f32 * (hi - lo))
        })
        .collect();
    s.upload_slice(&data, shape).unwrap()
}

/// A tuning cache fresh to this process (`TILE_CACHE_DIR`, a temporary
/// directory removed on drop): kernels tune as a program's first call
/// does, not from the choices of an earlier run.
#[allow(dead_code)] // the benches that tune products
pub struct FreshTuneCache(PathBuf);

#[allow(dead_code)]
impl FreshTuneCache {
    /// # Safety
    ///
    /// Sets an environment variable: call it while this is the only thread,
    /// before anything reads the variable.
    pub unsafe fn new(bench: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tile-{bench}-bench-{}", std::process::id()));
        // SAFETY: the caller's.
        unsafe { std::env::set_var("TILE_CACHE_DIR", &dir) };
        Self(dir)
    }
}

impl Drop for FreshTuneCache {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// cuBLAS on the same row-major problem: c^T = b^T a^T in column-major
/// terms; with `b_rows_are_n`, `b` is `[N, K]` and c = a @ b^T.
#[allow(dead_code)] // the benches against cuBLAS
pub fn cublas<T: Element>(
    blas: &CudaBlas,
    (a, b, b_rows_are_n): (&Tensor<T>, &Tensor<T>, bool),
    c: &mut Tensor<T>,
    one: T,
    zero: T,
) where
    CudaBlas: Gemm<T>,
{
    let (m, k) = (a.shape()[0] as i32, a.shape()[1] as i32);
    let (n, transa, lda) = if b_rows_are_n {
        (b.shape()[0] as i32, sys::cublasOperation_t::CUBLAS_OP_T, k)
    } else {
        (
            b.shape()[1] as i32,
            sys::cublasOperation_t::CUBLAS_OP_N,
            b.shape()[1] as i32,
        )
    };
    let cfg = GemmConfig {
        transa,
        transb: sys::cublasOperation_t::CUBLAS_OP_N,
        m: n,
        n: m,
        k,
        alpha: one,
        lda,
        ldb: k,
        beta: zero,
        ldc: n,
    };
    unsafe { blas.gemm(cfg, b.as_cudarc(), a.as_cudarc(), c.as_cudarc_mut()) }.unwrap();
}

/// `batch` different prompts of `len` token ids below `vocab`, as the
/// GPT-2 benches' Python baselines make them.
#[allow(dead_code)] // the GPT-2 benches
pub fn prompts(batch: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    let vocab = vocab as u32;
    (0..batch)
        .map(|b| {
            (0..len)
                .map(|i| (i as u32 * 7919 + b as u32 * 104_729) % vocab)
                .collect()
        })
        .collect()
}

/// Median wall-clock milliseconds of `reps` runs of `f`, after two that
/// tune and warm up.
#[allow(dead_code)] // the GPT-2 benches
pub fn median_wall_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..reps + 2)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .skip(2)
        .collect();
    times.sort_by(f64::total_cmp);
    times[reps / 2]
}
