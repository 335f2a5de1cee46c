//! The public API against a hostile caller: sizes that overflow, ranks
//! that don't match, zero-sized problems, written views that overlap,
//! const values no kernel is built for, grids past the limits. Every case
//! ends in a correct result or a typed error, never a panic or a silently
//! wrong answer; on the CPU always, on the GPU where there is one.

mod common;

use common::harness::{self, Test};
use std::process::ExitCode;
use std::sync::Arc;
use tile::{Backend, Device, Error, HostTensor};
use tile_kernels::{matmul, norm, softmax};

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

fn main() -> ExitCode {
    harness::run([
        Test::new(
            "host_tensors_check_their_arithmetic",
            host_tensors_check_their_arithmetic,
        ),
        Test::new("zero_sized_problems_are_no_ops", || {
            zero_sized_problems_are_no_ops(&tile::Cpu)
        }),
        Test::new("overlapping_written_views_are_errors", || {
            overlapping_written_views_are_errors(&tile::Cpu)
        }),
        Test::new("unbuilt_const_values_name_the_value", || {
            unbuilt_const_values_name_the_value(&tile::Cpu)
        }),
        Test::gpu("gpu::zero_sized_problems_are_no_ops", |d| {
            zero_sized_problems_are_no_ops(&d.stream())
        }),
        Test::gpu("gpu::overlapping_written_views_are_errors", |d| {
            overlapping_written_views_are_errors(&d.stream())
        }),
        Test::gpu("gpu::unbuilt_const_values_name_the_value", |d| {
            unbuilt_const_values_name_the_value(&d.stream())
        }),
        Test::gpu(
            "gpu_sizes_that_overflow_are_errors_and_memory_runs_out_cleanly",
            gpu_sizes_that_overflow_are_errors,
        ),
    ])
}
