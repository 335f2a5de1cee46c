//! The library's kernels under [criterion](https://docs.rs/criterion), each
//! beside its baseline in one benchmark group: GPU time from CUDA events
//! (`iter_custom`), criterion's statistics, its comparison with the last
//! run and its HTML report with the plots. Run on a GPU:
//!
//! ```text
//! cargo bench --bench kernels                      # all: sized for under three minutes on an H100
//! cargo bench --bench kernels -- matmul/           # a filter (a regular expression on the ids)
//! cargo bench --bench kernels -- --list            # the ids; needs no GPU
//! target/release/deps/kernels-<hash> --bench       # the built binary, on the GPU machine
//! ```
//!
//! Groups, each id `group/function/case`:
//!
//! - `matmul`: bf16 `c = a @ b` (M x K x N, row-major), `ours` (the tile
//!   `matmul::run` tunes to on a first call, with a tuning cache fresh to
//!   this process) and `cuBLAS` on the same inputs; throughput in elements
//!   per second is FLOP/s (2 M N K per product).
//! - `memory_bound`: softmax, LayerNorm, RMSNorm, GELU and the residual
//!   add against `copy`, a device-to-device copy of the same tensor, in f32
//!   and bf16; bytes are the inputs read and outputs written once, launches
//!   rotate over 4 buffer sets so the data is not in L2.
//! - `attention`: causal attention (`attention::run`), bf16, GPT-2 124M's
//!   heads (12 of 64) and 16 of 128; FLOPs `4 B H T^2 D / 2`. No baseline
//!   in Rust: PyTorch's is `benches/attention.rs` with `with_pytorch.sh`.
//!
//! Each sample is the GPU time of its launches, back to back, between two
//! events on the stream. After each group the same-run ratios that
//! BENCHMARKS.md quotes are printed from criterion's medians: ours over
//! cuBLAS (cuBLAS's time over ours) and each kernel's bandwidth as a
//! percentage of the copy's. Every kernel runs alone for its warm-up and
//! measurement, seconds at a time: products run at the clocks their power
//! settles to, like `matmul --sustained`, not the bursts of `matmul`.
//!
//! Without a GPU the bench says so and exits (`TILE_REQUIRE_GPU=1` makes
//! that a failure); `--list` lists without one.

mod common;

use common::{FreshTuneCache, cublas, gpu_ms, gpu_stream, random};
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput, measurement::WallTime};
use cudarc::cublas::CudaBlas;
use std::cell::{OnceCell, RefCell};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tile::{Element, Stream, Tensor, Tuned, bf16};
use tile_kernels::{attention, elementwise, matmul, norm, softmax};

/// Products, M x K x N: a square, and GPT-2 124M's at B*T = 8192 (the
/// attention's input projection, the MLP's down projection, the LM head).
const MATMULS: [(usize, usize, usize); 4] = [
    (4096, 4096, 4096),
    (8192, 768, 2304),
    (8192, 3072, 768),
    (8192, 768, 50257),
];
/// Rows x columns of the memory-bound kernels' tensors.
const ROWS_COLS: [(usize, usize); 2] = [(8192, 8192), (8192, 768)];
/// Buffer sets the memory-bound launches rotate over.
const SETS: usize = 4;
/// Attention: (heads, head size) and (batch, length).
const HEADS: [(usize, usize); 2] = [(12, 64), (16, 128)];
const BATCH_LENGTHS: [(usize, usize); 3] = [(8, 1024), (4, 2048), (2, 4096)];

/// The GPU the benchmarks run on (absent when only listing them), cuBLAS
/// made on first use, and where criterion keeps this run's estimates.
struct Bench {
    stream: Option<Stream>,
    blas: OnceCell<CudaBlas>,
    out: PathBuf,
    started: SystemTime,
}

impl Bench {
    fn s(&self) -> &Stream {
        self.stream.as_ref().expect("a benchmark runs only with a GPU")
    }

    fn blas(&self) -> &CudaBlas {
        self.blas
            .get_or_init(|| CudaBlas::new(self.s().as_cudarc().clone()).expect("cuBLAS (libcublas) loads"))
    }

    /// Benchmarks `function/case` in `group`: criterion's samples are the GPU
    /// time of `iters` runs of `run(inputs, i)` (`i` counting the runs), the
    /// inputs made by `setup` on first use (none for a benchmark filtered
    /// out), after one untimed run (module loads, cuBLAS's handle).
    fn gpu<I>(
        &self,
        group: &mut BenchmarkGroup<WallTime>,
        function: &str,
        case: &str,
        inputs: &OnceCell<I>,
        setup: impl FnOnce() -> I,
        run: impl Fn(&I, usize),
    ) {
        let mut setup = Some(setup);
        let mut warm = false;
        group.bench_function(BenchmarkId::new(function, case), |b| {
            let inputs = inputs.get_or_init(|| setup.take().expect("made once")());
            if !warm {
                run(inputs, 0);
                self.s().synchronize().unwrap();
                warm = true;
            }
            b.iter_custom(|iters| {
                let ms = gpu_ms(self.s(), || (0..iters as usize).for_each(|i| run(inputs, i)));
                Duration::from_secs_f64(ms / 1e3)
            });
        });
    }

    /// Criterion's median time, in seconds, of `group/function/case` as
    /// measured by this run (from the `new/estimates.json` it saved, as
    /// critcmp reads it); none where it did not run (filtered out, listed, tested).
    fn median(&self, group: &str, function: &str, case: &str) -> Option<f64> {
        // Our ids have none of the characters criterion replaces in directory names.
        let file = self
            .out
            .join(group)
            .join(function)
            .join(case)
            .join("new/estimates.json");
        if std::fs::metadata(&file).and_then(|m| m.modified()).ok()? < self.started {
            return None;
        }
        let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
        Some(estimates["median"]["point_estimate"].as_f64()? / 1e9)
    }
}

/// Where criterion writes its results and report: `$CRITERION_HOME`, else
/// `criterion` in the target directory (`$CARGO_TARGET_DIR`, else the one
/// holding this binary, `<target>/<profile>/deps/kernels-<hash>`), else
/// `target/criterion`. Criterion's own order, but for asking `cargo
/// metadata`; chosen here so that the ratios read back what it wrote.
fn output_directory() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).or_else(|| {
        let exe = std::env::current_exe().ok()?;
        let deps = exe.parent().filter(|d| d.ends_with("deps"))?;
        Some(deps.parent()?.parent()?.to_path_buf())
    });
    target.unwrap_or_else(|| "target".into()).join("criterion")
}

/// Ours against cuBLAS on bf16 products.
fn matmuls(c: &mut Criterion, bench: &Bench) {
    let mut group = c.benchmark_group("matmul");
    let (one, zero) = (bf16::from_f32(1.0), bf16::from_f32(0.0));
    let mut cases = Vec::new();
    for (m, k, n) in MATMULS {
        let case = format!("bf16-{m}x{k}x{n}");
        group.throughput(Throughput::Elements(2 * (m * k * n) as u64));
        // a, b, c and the tile `matmul::run` tuned to.
        type Inputs = (Tensor<bf16>, Tensor<bf16>, RefCell<Tensor<bf16>>, Tuned);
        let inputs = OnceCell::new();
        let setup = || -> Inputs {
            let s = bench.s();
            let a = random(s, &[m, k], 1, -1.0, 1.0, bf16::from_f32);
            let b = random(s, &[k, n], 2, -1.0, 1.0, bf16::from_f32);
            let mut c = s.zeros(&[m, n]).unwrap();
            let tile = matmul::run(s, &a, &b, &mut c).unwrap();
            (a, b, RefCell::new(c), tile)
        };
        bench.gpu(&mut group, "ours", &case, &inputs, setup, |(a, b, c, tile), _| {
            matmul::matmul::run_with(bench.s(), *tile, a, b, &mut c.borrow_mut()).unwrap()
        });
        bench.gpu(&mut group, "cuBLAS", &case, &inputs, setup, |(a, b, c, _), _| {
            cublas(bench.blas(), (a, b, false), &mut c.borrow_mut(), one, zero)
        });
        cases.push(case);
    }
    group.finish();
    for case in cases {
        let ours = bench.median("matmul", "ours", &case);
        if let (Some(ours), Some(blas)) = (ours, bench.median("matmul", "cuBLAS", &case)) {
            println!("matmul {case}: ours {:.3}x cuBLAS", blas / ours);
        }
    }
}

/// One memory-bound case's buffer sets: inputs, outputs, and the norms'
/// weight and bias.
struct Sets<T: Element> {
    xs: Vec<Tensor<T>>,
    ys: RefCell<Vec<Tensor<T>>>,
    w: Tensor<T>,
    b: Tensor<T>,
}

impl<T: Element> Sets<T> {
    fn new(s: &Stream, (rows, cols): (usize, usize), of: fn(f32) -> T) -> Self {
        Sets {
            xs: (0..SETS)
                .map(|i| random(s, &[rows, cols], i as u64 + 1, -2.0, 2.0, of))
                .collect(),
            ys: RefCell::new((0..SETS).map(|_| s.zeros(&[rows, cols]).unwrap()).collect()),
            w: random(s, &[cols], 99, -2.0, 2.0, of),
            b: random(s, &[cols], 98, -2.0, 2.0, of),
        }
    }

    /// The same sets as 1-D tensors, for the element-wise kernels.
    fn flat(self) -> Self {
        let flat = |t: Tensor<T>| {
            let n = t.len();
            t.reshape(&[n]).unwrap()
        };
        Sets {
            xs: self.xs.into_iter().map(flat).collect(),
            ys: RefCell::new(self.ys.into_inner().into_iter().map(flat).collect()),
            w: self.w,
            b: self.b,
        }
    }
}

/// A memory-bound kernel: its name, the tensor-sized passes over memory
/// it makes (reads and writes), and a launch on buffer set `i`.
type Kernel<T> = (&'static str, usize, fn(&Stream, &Sets<T>, usize));

/// The memory-bound kernels against the copy, one dtype and shape: the
/// case's name, and each kernel's name and passes.
fn memory_case<T: Element>(
    group: &mut BenchmarkGroup<WallTime>,
    bench: &Bench,
    dtype: &str,
    (rows, cols): (usize, usize),
    of: fn(f32) -> T,
) -> (String, Vec<(&'static str, usize)>) {
    let case = format!("{dtype}-{rows}x{cols}");
    let rows_kernels: [Kernel<T>; 4] = [
        ("copy", 2, |s, d, i| {
            s.copy(&d.xs[i], &mut d.ys.borrow_mut()[i]).unwrap()
        }),
        ("softmax", 2, |s, d, i| {
            softmax::run(s, &d.xs[i], &mut d.ys.borrow_mut()[i]).unwrap()
        }),
        ("layer_norm", 2, |s, d, i| {
            norm::run_layer_norm(s, &d.xs[i], &d.w, &d.b, &mut d.ys.borrow_mut()[i], 1e-5).unwrap()
        }),
        ("rms_norm", 2, |s, d, i| {
            norm::run_rms_norm(s, &d.xs[i], &d.w, &mut d.ys.borrow_mut()[i], 1e-5).unwrap()
        }),
    ];
    let flat_kernels: [Kernel<T>; 2] = [
        ("gelu", 2, |s, d, i| {
            let grid = d.xs[i].len().div_ceil(4096) as u32;
            elementwise::gelu::launch::<T, 4096, _>(s, grid, &d.xs[i], &mut d.ys.borrow_mut()[i]).unwrap()
        }),
        // `y += x`, in place: two reads and a write.
        ("residual_add", 3, |s, d, i| {
            let grid = d.xs[i].len().div_ceil(4096) as u32;
            elementwise::residual_add::launch::<T, 4096, _>(s, grid, &mut d.ys.borrow_mut()[i], &d.xs[i]).unwrap()
        }),
    ];
    let tensor_bytes = rows * cols * std::mem::size_of::<T>();
    let mut time = |sets: &OnceCell<Sets<T>>, (name, passes, run): Kernel<T>, flat: bool| {
        group.throughput(Throughput::Bytes((passes * tensor_bytes) as u64));
        let setup = || {
            let sets = Sets::new(bench.s(), (rows, cols), of);
            if flat { sets.flat() } else { sets }
        };
        bench.gpu(group, name, &case, sets, setup, |d, i| run(bench.s(), d, i % SETS));
    };
    let sets = OnceCell::new();
    for kernel in rows_kernels {
        time(&sets, kernel, false);
    }
    // The same buffers as 1-D tensors where made, else made on first use.
    let flat = sets
        .into_inner()
        .map(Sets::flat)
        .map(OnceCell::from)
        .unwrap_or_default();
    for kernel in flat_kernels {
        time(&flat, kernel, true);
    }
    let kernels = rows_kernels.iter().chain(&flat_kernels);
    (case, kernels.map(|&(name, passes, _)| (name, passes)).collect())
}

/// Softmax, the norms, GELU and the residual add against the copy.
fn memory_bound(c: &mut Criterion, bench: &Bench) {
    let mut group = c.benchmark_group("memory_bound");
    let mut cases = Vec::new();
    for shape in ROWS_COLS {
        cases.push(memory_case::<f32>(&mut group, bench, "f32", shape, |x| x));
        cases.push(memory_case::<bf16>(&mut group, bench, "bf16", shape, bf16::from_f32));
    }
    group.finish();
    for (case, kernels) in cases {
        let Some(copy) = bench.median("memory_bound", "copy", &case) else {
            continue;
        };
        let percents: Vec<String> = kernels
            .iter()
            .filter(|(name, _)| *name != "copy")
            .filter_map(|&(name, passes)| {
                let time = bench.median("memory_bound", name, &case)?;
                Some(format!("{name} {:.1}%", 100.0 * passes as f64 / 2.0 * copy / time))
            })
            .collect();
        println!(
            "memory_bound {case}, bandwidth as % of the copy's: {}",
            percents.join(", ")
        );
    }
}

/// Causal attention, bf16.
fn attentions(c: &mut Criterion, bench: &Bench) {
    let mut group = c.benchmark_group("attention");
    for (heads, d) in HEADS {
        for (batch, t) in BATCH_LENGTHS {
            let case = format!("bf16-h{heads}d{d}-{batch}x{t}");
            group.throughput(Throughput::Elements((4 * batch * heads * t * t * d / 2) as u64));
            let width = heads * d;
            let inputs = OnceCell::new();
            // Two input sets, alternating.
            let setup = || {
                let s = bench.s();
                let qkvs: Vec<Tensor<bf16>> = (1..=2)
                    .map(|seed| random(s, &[batch, t, 3 * width], seed, -2.0, 2.0, bf16::from_f32))
                    .collect();
                let outs: Vec<Tensor<bf16>> = (0..2).map(|_| s.zeros(&[batch, t, width]).unwrap()).collect();
                (qkvs, RefCell::new(outs))
            };
            bench.gpu(&mut group, "ours", &case, &inputs, setup, |(qkvs, outs), i| {
                attention::run(bench.s(), &qkvs[i % 2], &mut outs.borrow_mut()[i % 2], heads).unwrap()
            });
        }
    }
    group.finish();
}

fn main() {
    // Listing (and help) needs no GPU: the benchmarks' closures, which use it, do not run.
    let listing = std::env::args().any(|a| matches!(a.as_str(), "--list" | "--help" | "-h"));
    // SAFETY: the only thread (criterion starts its own later), nothing has read it yet.
    let _cache = unsafe { FreshTuneCache::new("kernels") };
    let stream = if listing {
        None
    } else {
        let Some(s) = gpu_stream("kernels bench") else {
            return;
        };
        Some(s)
    };
    let bench = Bench {
        stream,
        blas: OnceCell::new(),
        out: output_directory(),
        started: SystemTime::now(),
    };
    // Defaults sized for the whole run to take under three minutes on an H100;
    // criterion's options (`--sample-size`, `--measurement-time`, ...) override them.
    let mut c = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1500))
        .output_directory(&bench.out)
        .configure_from_args();
    matmuls(&mut c, &bench);
    memory_bound(&mut c, &bench);
    attentions(&mut c, &bench);
    c.final_summary();
    let report = bench.out.join("report/index.html");
    if std::fs::metadata(&report)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= bench.started)
    {
        println!("HTML report: {}", report.display());
    }
}
