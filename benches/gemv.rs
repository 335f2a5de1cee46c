//! Linear layers of a few rows (decoding's), bf16, on GPT-2 124M's shapes:
//! the tuned entry point `matmul::run_linear` (which sends M ≤ 16 to
//! `gemv`), the tensor-core kernel it would otherwise run
//! (`matmul::linear`), and cuBLAS's `x @ w^T` through cudarc, in the same
//! process. Run on a GPU:
//!
//! ```text
//! cargo bench --bench gemv            # here, or the built binary on the GPU machine
//! ```
//!
//! As in a decode step, the weights are not in L2: each kernel is recorded
//! [`LAUNCHES`] times into a CUDA graph, the launches taking turns over
//! copies of the weights ([`COPIED`] bytes of them, more than L2 holds),
//! and the graph's replay is timed (median of [`REPS`]) and divided by
//! [`LAUNCHES`]: the kernels' time back to back, without the host's
//! launch overhead. The fraction of
//! copy bandwidth counts the weights' bytes (`N·K` elements, read once)
//! against a device-to-device copy of [`COPIED`] bytes measured in the
//! same run (read and written bytes). cuBLAS computes without the bias,
//! ours with it. Beside the tuned choice: `gemv` alone, the tensor cores
//! split along K alone (`split_k::run`) and the tensor-core kernel
//! alone, each at its own tuned tile.
//!
//! `--tiles` instead times every tile of `gemv` and `gemv_layer_norm` at
//! M = 1 on GPT-2's and gpt2-xl's layers, with the weights cold (as
//! above) and hot (one copy, in L2 after the first launch), beside the
//! tile the tuner chose: what the tuner's own timing conditions cost.

mod common;

use common::{cublas, gpu_ms, gpu_stream, random};
use cudarc::cublas::CudaBlas;
use tile::{DType, Graph, Stream, Tensor, bf16};
use tile_kernels::{gemv, matmul, split_k};

/// Launches per graph.
const LAUNCHES: usize = 128;
/// Bytes of weight copies the launches take turns over.
const COPIED: usize = 256 << 20;
/// Timed replays of each graph.
const REPS: usize = 9;

/// Median microseconds per launch of the work `graph` recorded.
fn per_launch_us(s: &Stream, graph: &Graph) -> f64 {
    s.replay(graph).unwrap();
    let mut t: Vec<f64> = (0..REPS).map(|_| gpu_ms(s, || s.replay(graph).unwrap())).collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[REPS / 2] * 1e3 / LAUNCHES as f64
}

/// Records `launch(i)` for `i` in `0..LAUNCHES` into one graph.
fn recorded(s: &Stream, mut launch: impl FnMut(usize)) -> Graph {
    s.capture(|| {
        (0..LAUNCHES).for_each(&mut launch);
        Ok::<_, tile::Error>(())
    })
    .unwrap()
}

/// How many copies of `bytes` make [`COPIED`] bytes (at least 2).
fn copies(bytes: usize) -> usize {
    COPIED.div_ceil(bytes).clamp(2, LAUNCHES)
}

/// Device-to-device copy bandwidth (GB/s, bytes read plus written) of
/// buffers of `bytes`, timed as the kernels are.
fn copy_gbs(s: &Stream, bytes: usize) -> f64 {
    let (n, sets) = (bytes / 2, copies(bytes));
    let from: Vec<Tensor<bf16>> = (0..sets).map(|_| s.zeros(&[n]).unwrap()).collect();
    let mut to: Vec<Tensor<bf16>> = (0..sets).map(|_| s.zeros(&[n]).unwrap()).collect();
    let graph = recorded(s, |i| s.copy(&from[i % sets], &mut to[i % sets]).unwrap());
    2.0 * bytes as f64 / per_launch_us(s, &graph) / 1e3
}

/// One layer at `m` rows: `ws` are copies of its `[N, K]` weights.
fn case(s: &Stream, blas: &CudaBlas, m: usize, ws: &[Tensor<bf16>], copy: f64) {
    let of = bf16::from_f32;
    let [n, k] = [ws[0].shape()[0], ws[0].shape()[1]];
    let x = random(s, &[m, k], 1, -1.0, 1.0, of);
    let b = random(s, &[n], 2, -1.0, 1.0, of);
    let mut y = s.zeros::<bf16>(&[m, n]).unwrap();
    // Tune (and load) each kernel before recording it.
    let tile = matmul::run_linear(s, &x, &ws[0], &b, &mut y, false).unwrap();
    let tc_tile = matmul::linear::run(s, &x, &ws[0], &b, &mut y, 0).unwrap();
    let gemv_tile = gemv::run(s, (&x, &ws[0], &b), &mut y, false).unwrap();
    let split_k_tile = split_k::run(s, (&x, &ws[0], &b), &mut y, false).unwrap();
    cublas(blas, (&x, &ws[0], true), &mut y, of(1.0), of(0.0));
    s.synchronize().unwrap();
    let ours = recorded(s, |i| {
        matmul::run_linear(s, &x, &ws[i % ws.len()], &b, &mut y, false).unwrap();
    });
    let gemv_only = recorded(s, |i| {
        gemv::run(s, (&x, &ws[i % ws.len()], &b), &mut y, false).unwrap();
    });
    let split_k = recorded(s, |i| {
        split_k::run(s, (&x, &ws[i % ws.len()], &b), &mut y, false).unwrap();
    });
    let tensor_cores = recorded(s, |i| {
        matmul::linear::run(s, &x, &ws[i % ws.len()], &b, &mut y, 0).unwrap();
    });
    let theirs = recorded(s, |i| {
        cublas(blas, (&x, &ws[i % ws.len()], true), &mut y, of(1.0), of(0.0))
    });
    let [us, gemv_us, split_k_us, tc_us, blas_us] =
        [&ours, &gemv_only, &split_k, &tensor_cores, &theirs].map(|g| per_launch_us(s, g));
    let gbs = (n * k * 2) as f64 / us / 1e3;
    println!(
        "bf16 M={m:<2} K={k:<4} N={n:<5}  ours {us:>6.2} us ({tile:>14}) {gbs:>5.0} GB/s {:>5.1}% of copy  \
         gemv {gemv_us:>6.2} ({gemv_tile:>9})  split-K {split_k_us:>6.2} ({split_k_tile:>11})  \
         tensor cores {tc_us:>6.2} ({tc_tile:>9})  cuBLAS {blas_us:>6.2}  cuBLAS/ours {:.2}",
        100.0 * gbs / copy,
        blas_us / us
    );
}

/// Every tile of `gemv` and `gemv_layer_norm` at one row, cold and hot.
fn tiles(s: &Stream, layers: &[(usize, usize)]) {
    let of = bf16::from_f32;
    for &(k, n) in layers {
        let ws: Vec<Tensor<bf16>> = (0..copies(n * k * 2))
            .map(|i| random(s, &[n, k], 10 + i as u64, -1.0, 1.0, of))
            .collect();
        let x = random(s, &[1, k], 1, -1.0, 1.0, of);
        let (ln_w, ln_b) = (random(s, &[k], 3, 0.5, 1.5, of), random(s, &[k], 4, -1.0, 1.0, of));
        let b = random(s, &[n], 2, -1.0, 1.0, of);
        let mut y = s.zeros::<bf16>(&[1, n]).unwrap();
        let tuned = gemv::run(s, (&x, &ws[0], &b), &mut y, false).unwrap();
        let folds: Vec<gemv::NormFold<Stream>> = (ws.iter())
            .map(|w| gemv::NormFold::new(s, (&ln_w, &ln_b), (w, &b)).unwrap())
            .collect();
        let tuned_ln = gemv::run_layer_norm(s, (&x, &ln_w, 1e-5), (&ws[0], &folds[0]), &mut y, false).unwrap();
        println!("K={k} N={n}: tuned gemv {tuned}, gemv_layer_norm {tuned_ln}");
        for c in gemv::gemv::KERNEL.candidates(&[DType::BF16], false) {
            let cold = recorded(s, |i| {
                gemv::gemv::run_with(s, c, &x, &ws[i % ws.len()], &b, &mut y, 0).unwrap()
            });
            let hot = recorded(s, |_| gemv::gemv::run_with(s, c, &x, &ws[0], &b, &mut y, 0).unwrap());
            let [cold, hot] = [&cold, &hot].map(|g| per_launch_us(s, g));
            println!("  gemv {c:>16}: cold {cold:>6.2} us  hot {hot:>6.2} us");
        }
        for c in gemv::gemv_layer_norm::KERNEL.candidates(&[DType::BF16], false) {
            let run = |i: usize, y: &mut Tensor<bf16>| {
                let (w, fold) = (&ws[i], &folds[i]);
                gemv::gemv_layer_norm::run_with(s, c, &x, &ln_w, w, &fold.scale, &fold.shift, y, 0, 1e-5).unwrap()
            };
            let cold = recorded(s, |i| run(i % ws.len(), &mut y));
            let hot = recorded(s, |_| run(0, &mut y));
            let [cold, hot] = [&cold, &hot].map(|g| per_launch_us(s, g));
            println!("  gemv_layer_norm {c:>16}: cold {cold:>6.2} us  hot {hot:>6.2} us");
        }
    }
}

fn main() {
    let Some(s) = gpu_stream("gemv bench") else {
        return;
    };
    if std::env::args().any(|a| a == "--tiles") {
        // GPT-2 124M's layers, then gpt2-xl's.
        let layers = [(768, 2304), (768, 768), (768, 3072), (3072, 768)];
        tiles(&s, &layers);
        tiles(&s, &[(1600, 4800), (1600, 1600), (1600, 6400), (6400, 1600)]);
        return;
    }
    let blas = CudaBlas::new(s.as_cudarc().clone()).expect("cuBLAS (libcublas) loads");
    // GPT-2 124M's layers (K, N): attention's QKV and output projections,
    // the MLP's two, the LM head.
    let layers = [(768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50257)];
    let copy = copy_gbs(&s, COPIED);
    println!(
        "{} ({}), copy {copy:.0} GB/s",
        s.device().name(),
        s.device().target().name()
    );
    for (k, n) in layers {
        let ws: Vec<Tensor<bf16>> = (0..copies(n * k * 2))
            .map(|i| random(&s, &[n, k], 10 + i as u64, -1.0, 1.0, bf16::from_f32))
            .collect();
        for m in [1, 2, 4, 8, 16] {
            case(&s, &blas, m, &ws, copy);
        }
    }
}
