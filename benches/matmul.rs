//! Our tensor-core matmul against cuBLAS, same inputs, same process, same
//! GPU: TFLOP/s and the ratio, for bf16, f16 and tf32 (f32 inputs).
//!
//! ```text
//! cargo bench --no-run            # then run the printed benches/matmul binary on the GPU machine
//! ```
//!
//! Shapes are M x K x N (`c[M, N] = a[M, K] @ b[K, N]`, row-major): squares,
//! and GPT-2 124M's at B*T = 8192. Our kernel is timed for each listed tile
//! shape and the best is reported (the specialization a tuner would pick).
//! Then as a linear layer, `y = x @ w^T + b` with `w: [N, K]` (PyTorch's
//! layout), against cuBLAS's NT product: tf32 on every shape, bf16 and f16
//! on the LM head, which GPT-2 computes that way (its 50257-column output
//! rows are not 16-byte aligned, but `x` and `w`'s are).
//! Arguments filter the cases: `matmul "bf16 4096x"` runs only those.
//! `--sm120-blocks` keeps the portable path to the variants whose blocks
//! fit the 99 KiB of shared memory an sm_120 GPU gives one (no two teams
//! per block), for comparing the two on one GPU.

mod common;

use common::{median_ms, random};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys};
use tile::{Element, Stream, Tensor, bf16, f16};
use tile_kernels::matmul;

const REPS: usize = 10;

/// Whether the command line's filters (arguments not starting with `--`) all match `label`.
fn selected(label: &str) -> bool {
    std::env::args()
        .skip(1)
        .all(|a| a.starts_with("--") || label.contains(a.as_str()))
}

/// Runs `f` on the portable variants (within sm_120's shared memory per
/// block with `--sm120-blocks`), then returns to the device's own.
fn on_portable<R>(s: &Stream, f: impl FnOnce() -> R) -> R {
    let d = s.device();
    d.use_arch_specific(false);
    if std::env::args().any(|a| a == "--sm120-blocks") {
        d.limit_block_shared_bytes(tile::testing::SM120_BLOCK_SHARED_BYTES);
    }
    let r = f();
    d.use_arch_specific(true);
    d.limit_block_shared_bytes(usize::MAX);
    r
}

/// Best of our tile shapes, launched by `run`: milliseconds and the tile.
fn best_tile<T: Element>(s: &Stream, mut run: impl FnMut(&'static str)) -> (f64, &'static str) {
    let mut best = (f64::INFINITY, "");
    for name in matmul::tiles::<T>() {
        let ms = median_ms(s, REPS, |_| run(name));
        if ms < best.0 {
            best = (ms, name);
        }
    }
    best
}

/// cuBLAS on the same row-major problem: c^T = b^T a^T in column-major
/// terms; with `b_rows_are_n`, `b` is `[N, K]` and c = a @ b^T.
fn cublas<T: Element>(
    s: &Stream,
    blas: &CudaBlas,
    (a, b, b_rows_are_n): (&Tensor<T>, &Tensor<T>, bool),
    c: &mut Tensor<T>,
    one: T,
    zero: T,
) -> f64
where
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
    median_ms(s, REPS, |_| unsafe {
        blas.gemm(cfg, b.as_cudarc(), a.as_cudarc(), c.as_cudarc_mut()).unwrap();
    })
}

fn case<T: Element>(s: &Stream, blas: &CudaBlas, dtype: &str, (m, k, n): (usize, usize, usize), of: fn(f32) -> T)
where
    CudaBlas: Gemm<T>,
{
    let label = format!("{dtype} {m}x{k}x{n}");
    if !selected(&label) {
        return;
    }
    let a = random(s, &[m, k], 1, -1.0, 1.0, of);
    let b = random(s, &[k, n], 2, -1.0, 1.0, of);
    let mut c = s.zeros::<T>(&[m, n]).unwrap();
    let mut ours = || best_tile::<T>(s, |name| matmul::launch_tile(s, name, &a, &b, &mut c).unwrap());
    let (ms, tile) = ours();
    let (ms_portable, tile_portable) = on_portable(s, &mut ours);
    let ms_blas = cublas(s, blas, (&a, &b, false), &mut c, of(1.0), of(0.0));
    let tflops = |ms: f64| 2.0 * (m * n * k) as f64 / ms / 1e9;
    println!(
        "{dtype:<5} {m:>5}x{k:<5}x{n:<6} tile {:>6.1} TFLOP/s ({tile:>7}, {target})  portable {:>6.1} ({tile_portable:>7})  cuBLAS {:>6.1}  ratio {:.3} (portable {:.3})",
        tflops(ms),
        tflops(ms_portable),
        tflops(ms_blas),
        ms_blas / ms,
        ms_blas / ms_portable,
        target = s.device().target().name(),
    );
}

fn main() {
    let Some(device) = tile::testing::gpu_or_skip("matmul bench") else {
        return;
    };
    let s = device.stream();
    let blas = CudaBlas::new(s.as_cudarc().clone()).expect("cuBLAS (libcublas) loads");
    println!("{}", device.name());
    let shapes = [
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (8192, 768, 2304),
        (8192, 768, 768),
        (8192, 768, 3072),
        (8192, 3072, 768),
        (8192, 768, 50257),
    ];
    for shape in shapes {
        case::<bf16>(&s, &blas, "bf16", shape, bf16::from_f32);
    }
    for shape in shapes {
        case::<f16>(&s, &blas, "f16", shape, f16::from_f32);
    }
    // tf32: f32 inputs on the tensor cores, for cuBLAS too.
    unsafe { sys::cublasSetMathMode(*blas.handle(), sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH) };
    for shape in shapes {
        case::<f32>(&s, &blas, "tf32", shape, |x| x);
    }
    for shape in shapes {
        linear_case::<f32>(&s, &blas, "tf32", shape, |x| x);
    }
    // GPT-2's LM head is a linear layer, logits = x @ wte^T (wte: [50257, 768]).
    unsafe { sys::cublasSetMathMode(*blas.handle(), sys::cublasMath_t::CUBLAS_DEFAULT_MATH) };
    let lm_head = (8192, 768, 50257);
    linear_case::<bf16>(&s, &blas, "bf16", lm_head, bf16::from_f32);
    linear_case::<f16>(&s, &blas, "f16", lm_head, f16::from_f32);
}

/// `y = x @ w^T + b` (`w: [N, K]`) against cuBLAS's `x @ w^T`.
fn linear_case<T: Element>(s: &Stream, blas: &CudaBlas, dtype: &str, (m, k, n): (usize, usize, usize), of: fn(f32) -> T)
where
    CudaBlas: Gemm<T>,
{
    let label = format!("{dtype} linear {m}x{k}x{n}");
    if !selected(&label) {
        return;
    }
    let x = random(s, &[m, k], 3, -1.0, 1.0, of);
    let w = random(s, &[n, k], 4, -1.0, 1.0, of);
    let bias = random(s, &[n], 5, -1.0, 1.0, of);
    let mut y = s.zeros::<T>(&[m, n]).unwrap();
    let mut ours = || {
        best_tile::<T>(s, |name| {
            matmul::launch_linear_tile(s, name, (&x, &w, &bias), &mut y, false).unwrap()
        })
    };
    let best = ours();
    let portable = on_portable(s, &mut ours);
    let ms_blas = cublas(s, blas, (&x, &w, true), &mut y, of(1.0), of(0.0));
    let tflops = |ms: f64| 2.0 * (m * n * k) as f64 / ms / 1e9;
    println!(
        "{label:<30} tile {:>6.1} TFLOP/s ({:>7}, {})  portable {:>6.1} ({:>7})  cuBLAS {:>6.1}  ratio {:.3} (portable {:.3})",
        tflops(best.0),
        best.1,
        s.device().target().name(),
        tflops(portable.0),
        portable.1,
        tflops(ms_blas),
        ms_blas / best.0,
        ms_blas / portable.0,
    );
}
