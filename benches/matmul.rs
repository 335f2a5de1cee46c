//! Our tensor-core matmul against cuBLAS, same inputs, same process, same
//! GPU: TFLOP/s and the ratio, for bf16, f16 and tf32 (f32 inputs).
//!
//! ```text
//! cargo bench --no-run            # then run the printed benches/matmul binary on the GPU machine
//! ```
//!
//! Shapes are M x K x N (`c[M, N] = a[M, K] @ b[K, N]`, row-major): squares,
//! and GPT-2 124M's at B*T = 8192. Our tile shape is the one `matmul::run`
//! (`linear::run`) tunes to on its first call, on each path, with a cache
//! of choices fresh to this process: what a program calling it gets;
//! then the chosen tiles (sm_90a and portable) and cuBLAS are timed again,
//! in turn, over [`ROUNDS`] rounds. Timing the winner afresh keeps the
//! luck that made it win out of its figure, and taking turns exposes all
//! three alike to the GPU's clocks drifting as it warms. The order rotates
//! from round to round: at the power limit, a kernel timed right after a
//! power-hungry one starts at lower clocks, so each takes each place
//! alike. Each figure is the median over the rounds, each ratio the median
//! of the rounds' ratios.
//! Then as a linear layer, `y = x @ w^T + b` with `w: [N, K]` (PyTorch's
//! layout), against cuBLAS's NT product: tf32 on every shape, bf16 and f16
//! on the LM head, which GPT-2 computes that way (its 50257-column output
//! rows are not 16-byte aligned, but `x` and `w`'s are).
//! Then the guide's kernel (docs/05-matmul.md: `relu(a @ b^T) * s` in
//! bf16, as a user writes it) at 4096³, tuned by its generated `run`,
//! against the library's `matmul::run` and cuBLAS, in turn (`guide`).
//! Arguments filter the cases: `matmul "bf16 4096x"` runs only those.
//! `--sm120-blocks` keeps the portable path to the variants whose blocks
//! fit the 99 KiB of shared memory an sm_120 GPU gives one (no persistent
//! blocks of two tiles), for comparing the two on one GPU.
//! `--sustained` runs each kernel alone for [`SETTLE`] before timing it:
//! the large products draw the GPU to its power limit, where its clocks
//! settle to what that kernel's power allows; without it, the figures are
//! those of bursts of [`REPS`] launches.

mod common;

use common::{FreshTuneCache, cublas, gpu_stream, median_ms, random};
use cudarc::cublas::{CudaBlas, Gemm, sys};
use tile::Tuned;
use tile::{Element, Stream, bf16, f16};
use tile_kernels::matmul;

const REPS: usize = 10;
/// Rounds of timing the chosen tiles and cuBLAS in turn: each of the
/// three takes each place in the order twice.
const ROUNDS: usize = 6;
/// How long each kernel runs alone before it is timed, with `--sustained`.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(300);

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

/// Median milliseconds of [`REPS`] launches of `run`, after [`SETTLE`]
/// of launching it with `--sustained`.
fn timed(s: &Stream, mut run: impl FnMut()) -> f64 {
    if std::env::args().any(|a| a == "--sustained") {
        let start = std::time::Instant::now();
        while start.elapsed() < SETTLE {
            run();
            s.synchronize().unwrap();
        }
    }
    median_ms(s, REPS, |_| run())
}

/// Times our chosen tile, our chosen portable tile and cuBLAS (each
/// `time` returns a median of milliseconds) in turn, over [`ROUNDS`]
/// rounds, round `r` starting with the `r % 3`th: each one's median, and
/// the median over rounds of cuBLAS's time over ours and over portable's.
fn in_turn(mut time: [&mut dyn FnMut() -> f64; 3]) -> ([f64; 3], [f64; 2]) {
    let rounds: Vec<[f64; 3]> = (0..ROUNDS)
        .map(|round| {
            let mut t = [0.0; 3];
            for place in 0..3 {
                let i = (round + place) % 3;
                t[i] = time[i]();
            }
            t
        })
        .collect();
    let median = |f: &dyn Fn(&[f64; 3]) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        (v[ROUNDS / 2 - 1] + v[ROUNDS / 2]) / 2.0
    };
    (
        [0, 1, 2].map(|i| median(&|t| t[i])),
        [0, 1].map(|i| median(&|t| t[2] / t[i])),
    )
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
    let c = std::cell::RefCell::new(s.zeros::<T>(&[m, n]).unwrap());
    compare(
        s,
        &format!("{dtype:<5} {m:>5}x{k:<5}x{n:<6}"),
        2.0 * (m * n * k) as f64,
        (
            || matmul::run(s, &a, &b, &mut c.borrow_mut()).unwrap(),
            |tile| matmul::matmul::run_with(s, tile, &a, &b, &mut c.borrow_mut()).unwrap(),
        ),
        || cublas(blas, (&a, &b, false), &mut c.borrow_mut(), of(1.0), of(0.0)),
    );
}

/// Tunes our tile and our portable tile (`tune` runs the product tuned and
/// returns its configuration, `run` launches a given one), times them in turn with
/// cuBLAS (`blas`), and prints a line headed `head` (`flops`: the
/// product's floating-point operations).
fn compare(
    s: &Stream,
    head: &str,
    flops: f64,
    (tune, run): (impl Fn() -> Tuned, impl Fn(Tuned)),
    mut blas: impl FnMut(),
) {
    let tile = tune();
    let tile_portable = on_portable(s, &tune);
    let ([ms, ms_portable, ms_blas], [ratio, ratio_portable]) = in_turn([
        &mut || timed(s, || run(tile)),
        &mut || on_portable(s, || timed(s, || run(tile_portable))),
        &mut || timed(s, &mut blas),
    ]);
    let tflops = |ms: f64| flops / ms / 1e9;
    println!(
        "{head} tile {:>6.1} TFLOP/s ({tile:>7}, {target})  portable {:>6.1} ({tile_portable:>7})  cuBLAS {:>6.1}  ratio {ratio:.3} (portable {ratio_portable:.3})",
        tflops(ms),
        tflops(ms_portable),
        tflops(ms_blas),
        target = s.device().target().name(),
    );
}

/// The guide's kernel, verbatim (docs/05-matmul.md, "Reaching the
/// library's speed"): `c = relu(a @ b^T) * s`.
#[tile::kernel(
    configs = [
        (BM = 128, BN = 256, BK = 64),
        (BM = 128, BN = 128, BK = 64),
        (BM = 64, BN = 256, BK = 64),
        (BM = 64, BN = 128, BK = 64),
        (BM = 64, BN = 64, BK = 64),
    ],
    grid = cdiv(a.shape(0), BM) * cdiv(b.shape(0), BN),
    key = [a.shape(0), a.shape(1), b.shape(0)],
)]
fn relu_matmul<const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<bf16>,
    b: &Tensor<bf16>,
    c: &mut Tensor<bf16>,
    s: f32,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(a.shape(0), BM), cdiv(b.shape(0), BN), 8 * BN / BM);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([n, k], [BN, BK]).transpose(), acc);
    }
    c.store([m, n], (max(acc, 0.0) * s).cast::<bf16>());
}

/// The guide's kernel, the library's matmul and cuBLAS (`a @ b^T`) at
/// bf16 4096³, each tuned first, then timed in turn.
fn guide_case(s: &Stream, blas: &CudaBlas) {
    let (m, k, n) = (4096, 4096, 4096);
    if !selected(&format!("guide bf16 {m}x{k}x{n}")) {
        return;
    }
    let a = random(s, &[m, k], 6, -1.0, 1.0, bf16::from_f32);
    let b_nk = random(s, &[n, k], 7, -1.0, 1.0, bf16::from_f32);
    let b_kn = random(s, &[k, n], 8, -1.0, 1.0, bf16::from_f32);
    let c = std::cell::RefCell::new(s.zeros::<bf16>(&[m, n]).unwrap());
    let guide = relu_matmul::run(s, &a, &b_nk, &mut c.borrow_mut(), 0.5).unwrap();
    let library = matmul::run(s, &a, &b_kn, &mut c.borrow_mut()).unwrap();
    let one = bf16::from_f32(1.0);
    let ([ms_guide, ms_library, ms_blas], [to_guide, to_library]) = in_turn([
        &mut || {
            timed(s, || {
                relu_matmul::run_with(s, guide, &a, &b_nk, &mut c.borrow_mut(), 0.5).unwrap()
            })
        },
        &mut || {
            timed(s, || {
                matmul::matmul::run_with(s, library, &a, &b_kn, &mut c.borrow_mut()).unwrap()
            })
        },
        &mut || {
            timed(s, || {
                cublas(blas, (&a, &b_nk, true), &mut c.borrow_mut(), one, bf16::from_f32(0.0))
            })
        },
    ]);
    let tflops = |ms: f64| 2.0 * (m * n * k) as f64 / ms / 1e9;
    println!(
        "guide bf16 {m}x{k}x{n} relu_matmul {:>6.1} TFLOP/s ({guide})  library matmul {:>6.1} ({library})  cuBLAS {:>6.1}  guide/library {:.3}  guide/cuBLAS {:.3}",
        tflops(ms_guide),
        tflops(ms_library),
        tflops(ms_blas),
        to_guide / to_library,
        to_guide,
    );
}

fn main() {
    // Tune afresh, as a program's first call does, not from the choices
    // of an earlier run. SAFETY: the only thread, nothing has read it yet.
    let _cache = unsafe { FreshTuneCache::new("matmul") };
    let Some(s) = gpu_stream("matmul bench") else {
        return;
    };
    let blas = CudaBlas::new(s.as_cudarc().clone()).expect("cuBLAS (libcublas) loads");
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
    guide_case(&s, &blas);
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
    let y = std::cell::RefCell::new(s.zeros::<T>(&[m, n]).unwrap());
    compare(
        s,
        &format!("{label:<30}"),
        2.0 * (m * n * k) as f64,
        (
            || matmul::linear::run(s, &x, &w, &bias, &mut y.borrow_mut(), 0).unwrap(),
            |tile| matmul::linear::run_with(s, tile, &x, &w, &bias, &mut y.borrow_mut(), 0).unwrap(),
        ),
        || cublas(blas, (&x, &w, true), &mut y.borrow_mut(), of(1.0), of(0.0)),
    );
}
