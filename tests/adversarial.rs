//! The public API against a hostile caller: sizes that overflow, ranks
//! that don't match, zero-sized problems, written views that overlap,
//! const values no kernel is built for, grids past the limits, tile
//! indices and divisors no kernel expects, rows that defeat an f32 sum,
//! tensors of another device. Every case ends in a correct result or a
//! typed error, never a panic or a silently wrong answer; on the CPU
//! always, on the GPU where there is one.

mod common;

use common::harness::{self, Test};
use common::{Num, Rng, assert_close, host, layer_norm_ref, rms_norm_ref, rounded, values};
use std::process::ExitCode;
use std::sync::Arc;
use tile::{Backend, Device, Error, HostTensor, TensorView, bf16};
use tile_kernels::{elementwise, matmul, norm, softmax};

/// `HostTensor` constructors and accessors: element counts and spans that
/// overflow a `usize` are errors, an index of another rank is out of
/// bounds, and messages say what the caller passed.
fn host_tensors_check_their_arithmetic() {
    let e = HostTensor::<f32>::from_vec(vec![], &[1 << 32, 1 << 32]).unwrap_err();
    assert!(
        matches!(e, Error::Shape(_)) && e.to_string().contains("more elements than a usize"),
        "{e}"
    );
    let e = HostTensor::<f32>::from_vec_strided(vec![0.0; 4], &[3, 2], &[usize::MAX / 2, 1]).unwrap_err();
    assert!(e.to_string().contains("reaches past what a usize counts"), "{e}");
    let e = HostTensor::<f32>::from_vec_strided(vec![0.0; 6], &[2, 4], &[4, 1]).unwrap_err();
    assert!(
        e.to_string().contains("needs 8 elements of data, and the data has 6"),
        "{e}"
    );
    let t = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let e = t.clone().reshape(&[usize::MAX, 2]).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_eq!(t.checked(&[1]), None, "an index of rank 1 into a rank-2 tensor");
    assert_eq!(t.checked(&[1, 2, 0]), None);
    assert_eq!(t.checked(&[1, 2]), Some(6.0));
    let mut u = t.clone();
    assert!(!u.checked_set(&[1], 9.0));
    assert_eq!(u, t, "a refused write changes nothing");
}

/// Zero-sized problems run nothing and succeed; a grid past the limits
/// is an error naming the axis.
fn zero_sized_problems_are_no_ops<B: Backend>(on: &B) {
    let x = on.upload_slice::<f32>(&[], &[0, 8]).unwrap();
    let mut y = on.upload_slice::<f32>(&[], &[0, 8]).unwrap();
    softmax::run(on, &x, &mut y).unwrap();
    let (w, b) = (
        on.upload_slice(&[1.0f32; 8], &[8]).unwrap(),
        on.zeros::<f32>(&[8]).unwrap(),
    );
    norm::run_layer_norm(on, &x, &w, &b, &mut y, 1e-5).unwrap();
    // A product with no rows, and one with K = 0 (c = 0).
    let a = on.upload_slice::<f32>(&[], &[0, 16]).unwrap();
    let bm = on.upload_slice(&[1.0f32; 16 * 8], &[16, 8]).unwrap();
    let mut c = on.upload_slice::<f32>(&[], &[0, 8]).unwrap();
    matmul::run(on, &a, &bm, &mut c).unwrap();
    let a = on.upload_slice::<f32>(&[], &[4, 0]).unwrap();
    let bm = on.upload_slice::<f32>(&[], &[0, 8]).unwrap();
    let mut c = on.upload_slice(&[5.0f32; 32], &[4, 8]).unwrap();
    matmul::run(on, &a, &bm, &mut c).unwrap();
    assert_eq!(on.download(&c).unwrap().to_vec(), [0.0; 32], "an empty sum is 0");
    // A grid with no blocks runs nothing: y keeps its values.
    let x = on.upload_slice(&[1.0f32; 8], &[1, 8]).unwrap();
    let mut y = on.upload_slice(&[7.0f32; 8], &[1, 8]).unwrap();
    softmax::softmax::launch::<f32, 32, _>(on, (0, 1), &x, &mut y).unwrap();
    assert_eq!(on.download(&y).unwrap().to_vec(), [7.0; 8]);
    let e = softmax::softmax::launch::<f32, 32, _>(on, (1, 1, 65536), &x, &mut y).unwrap_err();
    assert!(
        e.to_string()
            .contains("axis 2 has 65536 blocks; it takes at most 65535"),
        "{e}"
    );
}

/// A written tensor whose view reaches an element twice (a zero stride,
/// strides smaller than the inner extent) is an error before anything
/// runs; a read one is fine.
fn overlapping_written_views_are_errors<B: Backend>(on: &B) {
    let host = |shape: &[usize], strides: &[usize]| {
        let data: Vec<f32> = (0..64).map(|i| i as f32).collect();
        HostTensor::from_vec_strided(data, shape, strides).unwrap()
    };
    let x = on.upload(&host(&[4, 8], &[8, 1])).unwrap();
    for (shape, strides) in [([4, 8], [0, 1]), ([4, 8], [4, 1]), ([4, 8], [1, 1])] {
        let mut y = on.upload(&host(&shape, &strides)).unwrap();
        let before = on.download(&y).unwrap().storage().to_vec();
        let e = softmax::softmax::launch::<f32, 32, _>(on, 4, &x, &mut y).unwrap_err();
        assert!(
            matches!(e, Error::Argument { .. }) && e.to_string().contains("reaches some elements more than once"),
            "{shape:?} {strides:?}: {e}"
        );
        assert_eq!(on.download(&y).unwrap().storage(), before, "nothing ran");
    }
    // Read through a broadcast view (stride 0): every row is row 0.
    let xb = on.upload(&host(&[4, 8], &[0, 1])).unwrap();
    let mut y = on.zeros::<f32>(&[4, 8]).unwrap();
    softmax::softmax::launch::<f32, 32, _>(on, 4, &xb, &mut y).unwrap();
    let y = on.download(&y).unwrap().to_vec();
    assert!((0..4).all(|r| y[r * 8..r * 8 + 8] == y[..8]));
}

/// A const value no kernel is built for, past `i64::MAX`, is reported as
/// the caller passed it.
fn unbuilt_const_values_name_the_value<B: Backend>(on: &B) {
    let x = on.upload_slice(&[1.0f32; 8], &[1, 8]).unwrap();
    let mut y = on.zeros::<f32>(&[1, 8]).unwrap();
    let e = softmax::softmax::launch_with(on, &[usize::MAX], 1, &x, &mut y).unwrap_err();
    assert!(e.to_string().contains(&usize::MAX.to_string()), "{e}");
    let e = softmax::softmax::launch_with(on, &[48], 1, &x, &mut y).unwrap_err();
    assert!(
        matches!(e, Error::NotBuilt { ref consts, .. } if consts == &[48]),
        "{e}"
    );
}

/// Device tensors: sizes that overflow are errors, not panics, and an
/// allocation past the GPU's memory says so.
fn gpu_sizes_that_overflow_are_errors(device: Arc<Device>) {
    let s = device.stream();
    for e in [
        s.zeros::<f32>(&[usize::MAX, 2]).unwrap_err(),
        s.full::<f32>(&[1 << 40, 1 << 40], 1.0).unwrap_err(),
        s.upload_slice::<f32>(&[], &[1 << 32, 1 << 32]).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Shape(_)), "{e}");
    }
    let e = s.zeros::<f32>(&[1 << 40]).unwrap_err();
    assert_eq!(e, Error::OutOfMemory { bytes: 1 << 42 }, "{e}");
    // The device still works.
    assert_eq!(s.download(&s.zeros::<f32>(&[3]).unwrap()).unwrap().to_vec(), [0.0; 3]);
}

/// `out[tile at[1]] = x[tile at[0]] + 1`: tile indices read from data, as
/// large or as negative as the caller likes.
#[tile::kernel(BLOCK = [4096])]
fn tile_at<const BLOCK: usize>(at: &Tensor<i32>, x: &Tensor<f32>, out: &mut Tensor<f32>) {
    out.store([at.get([1])], x.load([at.get([0])], [BLOCK]) + 1.0);
}

/// A tile past the tensor reads its padding and writes nothing, however
/// far past: an origin (index times tile) that passes what 32 bits hold
/// does not wrap onto another tile.
fn far_tiles_are_outside<B: Backend>(on: &B) {
    const TILE: usize = 4096;
    let data: Vec<f32> = (0..2 * TILE).map(|i| i as f32).collect();
    let x = on.upload_slice(&data, &[2 * TILE]).unwrap();
    // Origins that wrap onto tile 0 or tile 1 in 32 bits, and others past.
    for far in [1 << 20, (1 << 20) + 1, -(1 << 20), i32::MIN, i32::MAX, -1] {
        let at = on.upload_slice(&[far, 0], &[2]).unwrap();
        let mut out = on.zeros::<f32>(&[2 * TILE]).unwrap();
        tile_at::launch::<TILE, _>(on, 1, &at, &x, &mut out).unwrap();
        let out = on.download(&out).unwrap().to_vec();
        assert!(
            out[..TILE].iter().all(|&v| v == 1.0),
            "read from tile {far}: {:?}",
            &out[..4]
        );
        let at = on.upload_slice(&[1, far], &[2]).unwrap();
        let mut out = on.upload_slice(&[-1.0f32; 2 * TILE], &[2 * TILE]).unwrap();
        tile_at::launch::<TILE, _>(on, 1, &at, &x, &mut out).unwrap();
        let out = on.download(&out).unwrap().to_vec();
        assert!(out.iter().all(|&v| v == -1.0), "wrote to tile {far}");
    }
    // In range, the same kernel moves tile 1 to tile 0.
    let at = on.upload_slice(&[1, 0], &[2]).unwrap();
    let mut out = on.zeros::<f32>(&[2 * TILE]).unwrap();
    tile_at::launch::<TILE, _>(on, 1, &at, &x, &mut out).unwrap();
    let out = on.download(&out).unwrap().to_vec();
    assert!((0..TILE).all(|i| out[i] == data[TILE + i] + 1.0) && out[TILE..].iter().all(|&v| v == 0.0));
}

/// The reported case: `residual_add` over one tile, on a grid that
/// reaches the block whose origin is a multiple of what 32 bits hold: only
/// block 0 adds (GPU only: the CPU version would run each block).
fn oversized_grid_adds_once(device: Arc<Device>) {
    let s = device.stream();
    let mut x = s.upload_slice(&[1.0f32; 4096], &[4096]).unwrap();
    let r = s.upload_slice(&[2.0f32; 4096], &[4096]).unwrap();
    elementwise::residual_add::launch::<f32, 4096, _>(&s, (1 << 20) + 1, &mut x, &r).unwrap();
    assert_eq!(s.download(&x).unwrap().to_vec(), [3.0; 4096]);
}

/// `q = a / b`, `r = a % b` element by element.
#[tile::kernel(B = [256])]
fn divide<const B: usize>(a: &Tensor<i32>, b: &Tensor<i32>, q: &mut Tensor<i32>, r: &mut Tensor<i32>) {
    let x = a.load([0], [B]);
    let y = b.load([0], [B]);
    q.store([0], x / y);
    r.store([0], x % y);
}

/// `q = a / d`, `r = a % d` by a run-time scalar.
#[tile::kernel(B = [256])]
fn divide_by<const B: usize>(a: &Tensor<u32>, d: u32, q: &mut Tensor<u32>, r: &mut Tensor<u32>) {
    let x = a.load([0], [B]);
    q.store([0], x / d);
    r.store([0], x % d);
}

/// Integer division by zero is defined, the same on both backends: the
/// quotient is all ones, the remainder the dividend.
fn division_by_zero_is_defined<B: Backend>(on: &B) {
    const N: usize = 256;
    let mut rng = Rng::new(32);
    let a: Vec<i32> = (0..N).map(|_| rng.next_u64() as i32).collect();
    let b: Vec<i32> = (0..N)
        .map(|i| [0, 0, 1, -1, 7, -3][i % 6] * (1 + rng.below(1000) as i32))
        .collect();
    let (at, bt) = (on.upload_slice(&a, &[N]).unwrap(), on.upload_slice(&b, &[N]).unwrap());
    let (mut q, mut r) = (on.zeros::<i32>(&[N]).unwrap(), on.zeros::<i32>(&[N]).unwrap());
    divide::launch::<N, _>(on, 1, &at, &bt, &mut q, &mut r).unwrap();
    let (q, r) = (on.download(&q).unwrap().to_vec(), on.download(&r).unwrap().to_vec());
    for i in 0..N {
        let want = match b[i] {
            0 => (-1, a[i]),
            d => (a[i].wrapping_div(d), a[i].wrapping_rem(d)),
        };
        assert_eq!((q[i], r[i]), want, "{} / {}", a[i], b[i]);
    }
    let a: Vec<u32> = (0..N).map(|_| rng.next_u64() as u32).collect();
    let at = on.upload_slice(&a, &[N]).unwrap();
    let (mut q, mut r) = (on.zeros::<u32>(&[N]).unwrap(), on.zeros::<u32>(&[N]).unwrap());
    divide_by::launch::<N, _>(on, 1, &at, 0, &mut q, &mut r).unwrap();
    assert_eq!(on.download(&q).unwrap().to_vec(), [u32::MAX; N]);
    assert_eq!(on.download(&r).unwrap().to_vec(), a);
}

/// LayerNorm and RMSNorm on rows an f32 sum loses: a large offset with a
/// small spread (the mean's rounding is the size of the spread), and
/// values over many orders of magnitude, against f64 at f32's precision.
fn norms_keep_precision_on_hard_rows<B: Backend>(on: &B) {
    let mut rng = Rng::new(33);
    let offset = |cols: usize, base: f64| -> Vec<f64> { (0..cols).map(|c| base + (c % 16) as f64).collect() };
    let wide = |rng: &mut Rng, cols: usize| -> Vec<f64> {
        (0..cols)
            .map(|_| {
                let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                sign * 10f64.powf(rng.uniform() * 9.0 - 3.0)
            })
            .collect()
    };
    let noisy = |rng: &mut Rng, cols: usize| -> Vec<f64> { rng.normals(cols, 1.0).iter().map(|v| 1e4 + v).collect() };
    let rows: Vec<(&str, usize, Vec<f64>)> = vec![
        ("1e7 + c", 16, offset(16, 1e7)),
        (
            "1e7 + c, 4 rows of 768",
            768,
            (0..4).flat_map(|_| offset(768, 1e7)).collect(),
        ),
        ("-3e6 + c", 1000, offset(1000, -3e6)),
        ("wide range", 1000, wide(&mut rng, 1000)),
        ("1e4 + noise, 4096", 4096, noisy(&mut rng, 4096)),
    ];
    for (what, cols, x) in rows {
        let ([x, w, b], [xt, wt, bt]) = norm_operands::<f32, B>(on, &x, cols);
        let mut y = on.zeros::<f32>(xt.shape()).unwrap();
        norm::run_layer_norm(on, &xt, &wt, &bt, &mut y, 1e-5).unwrap();
        let want = layer_norm_ref(&x, &w, &b, cols, 1e-5);
        assert_close(
            &format!("layer_norm {what}"),
            &values(&on.download(&y).unwrap()),
            &want,
            1e-6,
        );
        norm::run_rms_norm(on, &xt, &wt, &mut y, 1e-5).unwrap();
        let want = rms_norm_ref(&x, &w, cols, 1e-5);
        assert_close(
            &format!("rms_norm {what}"),
            &values(&on.download(&y).unwrap()),
            &want,
            1e-6,
        );
    }
    // bf16 rows far from zero, a few spacings apart (bf16's spacing is 64
    // at 8,192 and 16,384 at 3e6): LayerNorm takes their statistics
    // without the shift, within bf16's rounding of the result.
    let bf16_rows: Vec<(&str, usize, Vec<f64>)> = vec![
        (
            "bf16 8192 + 64c",
            768,
            (0..768).map(|c| 8192.0 + 64.0 * (c % 16) as f64).collect(),
        ),
        (
            "bf16 -3e6 + 16384c, 4 rows of 1000",
            1000,
            (0..4000).map(|c| -3_014_656.0 + 16384.0 * (c % 7) as f64).collect(),
        ),
    ];
    for (what, cols, x) in bf16_rows {
        let ([x, w, b], [xt, wt, bt]) = norm_operands::<bf16, B>(on, &x, cols);
        let mut y = on.zeros::<bf16>(xt.shape()).unwrap();
        norm::run_layer_norm(on, &xt, &wt, &bt, &mut y, 1e-5).unwrap();
        let want = layer_norm_ref(&x, &w, &b, cols, 1e-5);
        assert_close(
            &format!("layer_norm {what}"),
            &values(&on.download(&y).unwrap()),
            &want,
            1e-2,
        );
    }
}

/// A norm's rows, weight and bias, as values and as tensors.
type NormOperands<B, T> = ([Vec<f64>; 3], [<B as Backend>::Tensor<T>; 3]);

/// Rows `x` of `cols` columns with a norm's weight and bias, as `T` holds
/// them (the reference sees the same values), and uploaded to `on`.
fn norm_operands<T: Num, B: Backend>(on: &B, x: &[f64], cols: usize) -> NormOperands<B, T> {
    let x = rounded::<T>(x);
    let w = rounded::<T>(&(0..cols).map(|c| 1.0 + (c % 7) as f64 / 8.0).collect::<Vec<_>>());
    let b = rounded::<T>(&(0..cols).map(|c| (c % 5) as f64 / 4.0 - 0.5).collect::<Vec<_>>());
    let tensors = [
        on.upload(&host::<T>(&x, &[x.len() / cols, cols])).unwrap(),
        on.upload(&host::<T>(&w, &[cols])).unwrap(),
        on.upload(&host::<T>(&b, &[cols])).unwrap(),
    ];
    ([x, w, b], tensors)
}

/// Two `Device`s of one GPU are two contexts: a tensor of one passed to
/// the other's stream is `WrongContext`, whether launched, copied or
/// downloaded.
fn tensors_of_another_device_are_errors(device: Arc<Device>) {
    let other = Device::new(0).unwrap();
    let (s, o) = (device.stream(), other.stream());
    let theirs = o.upload_slice(&[1.0f32; 8], &[1, 8]).unwrap();
    let mut ours = s.zeros::<f32>(&[1, 8]).unwrap();
    let context = |e: Error, op: &str, param: &str| {
        assert!(
            matches!(e, Error::WrongContext { kernel, param: p } if kernel.ends_with(op) && p == param),
            "{e}"
        );
    };
    context(s.download(&theirs).unwrap_err(), "download", "t");
    context(s.copy(&theirs, &mut ours).unwrap_err(), "copy", "src");
    let mut theirs_too = o.zeros::<f32>(&[1, 8]).unwrap();
    context(s.copy(&ours, &mut theirs_too).unwrap_err(), "copy", "dst");
    context(
        softmax::softmax::launch::<f32, 32, _>(&s, 1, &theirs, &mut ours).unwrap_err(),
        "softmax",
        "x",
    );
    // Each stream still works on its own tensors.
    assert_eq!(o.download(&theirs).unwrap().to_vec(), [1.0; 8]);
    o.copy(&theirs, &mut theirs_too).unwrap();
    assert_eq!(o.download(&theirs_too).unwrap().to_vec(), [1.0; 8]);
    assert_eq!(s.download(&ours).unwrap().to_vec(), [0.0; 8]);
}

/// The cases of any backend, each twice: `name` on the CPU, `gpu::name`
/// on the GPU's default stream (ignored without a GPU).
macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        [$([
            Test::new(stringify!($case), || $case(&tile::Cpu)),
            Test::gpu(concat!("gpu::", stringify!($case)), |d| $case(&d.stream())),
        ]),*]
    };
}

fn main() -> ExitCode {
    let both = on_both![
        zero_sized_problems_are_no_ops,
        overlapping_written_views_are_errors,
        unbuilt_const_values_name_the_value,
        far_tiles_are_outside,
        division_by_zero_is_defined,
        norms_keep_precision_on_hard_rows,
    ];
    let one = [
        Test::new(
            "host_tensors_check_their_arithmetic",
            host_tensors_check_their_arithmetic,
        ),
        Test::gpu("gpu::oversized_grid_adds_once", oversized_grid_adds_once),
        Test::gpu(
            "gpu::tensors_of_another_device_are_errors",
            tensors_of_another_device_are_errors,
        ),
        Test::gpu(
            "gpu_sizes_that_overflow_are_errors_and_memory_runs_out_cleanly",
            gpu_sizes_that_overflow_are_errors,
        ),
    ];
    harness::run(both.into_iter().flatten().chain(one))
}
