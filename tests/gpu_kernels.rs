//! Every library kernel on the GPU against its CPU reference version (and the
//! f64 reference), on fresh random inputs: ragged shapes that are not
//! multiples of the tile, single rows and columns, strided (non-vectorizable)
//! tensors, and outputs poisoned with NaN so unwritten elements show.
//!
//! Without a GPU each test is reported ignored, with the reason; under
//! `TILE_REQUIRE_GPU=1` it fails instead (tests/common/harness.rs).

mod common;
use common::harness::{self, Test};
use common::*;
use std::process::ExitCode;
use std::sync::Arc;
use tile::{Cpu, Device, HostTensor, Stream, Tensor, bf16, f16};
use tile_kernels::{argmax, attention, elementwise, embedding, gemv, linear, norm, scan, softmax, split_k, topk};

/// Row shapes: ragged columns, one row, one column, GPT-2 width.
const ROWS: [(usize, usize); 7] = [(1, 1), (7, 1), (1, 1000), (33, 700), (16, 768), (5, 1024), (3, 1023)];

/// A host tensor of `shape` whose rows (along the last dimension) are
/// `pad` elements apart, so the launcher must choose the scalar-access
/// variant when `pad` breaks 16-byte alignment.
fn strided<T: Num>(data: &[f64], shape: &[usize], pad: usize) -> HostTensor<T> {
    let (cols, rows) = (shape[shape.len() - 1], data.len() / shape[shape.len() - 1]);
    let stride = cols + pad;
    let mut storage = vec![T::of(0.0); rows * stride];
    for r in 0..rows {
        for c in 0..cols {
            storage[r * stride + c] = T::of(data[r * cols + c]);
        }
    }
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len() - 1).rev() {
        strides[d] = if d + 2 == shape.len() {
            stride
        } else {
            strides[d + 1] * shape[d + 1]
        };
    }
    HostTensor::from_vec_strided(storage, shape, &strides).unwrap()
}

fn poisoned<T: Num>(shape: &[usize]) -> HostTensor<T> {
    HostTensor::full(shape, T::of(f64::NAN))
}

fn softmax_case<T: Num>(s: &Stream, rng: &mut Rng, rows: usize, cols: usize, pad: usize) {
    let x = rng.normals(rows * cols, 3.0);
    let xh = strided::<T>(&x, &[rows, cols], pad);
    let xd = s.upload(&xh).unwrap();
    let mut want = poisoned::<T>(&[rows, cols]);
    let (mut yd, mut yd_online) = (s.upload(&want).unwrap(), s.upload(&want).unwrap());
    softmax::run(s, &xd, &mut yd).unwrap();
    softmax::softmax_online::launch::<T, 1024, _>(s, rows as u32, &xd, &mut yd_online).unwrap();
    softmax::softmax_online::launch::<T, 1024, _>(&Cpu, rows as u32, &xh, &mut want).unwrap();
    let what = format!("softmax {} {rows}x{cols} pad {pad}", T::DTYPE);
    let reference = softmax_ref(&rounded::<T>(&x), cols);
    let tol = T::TOL.max(2e-6);
    assert_close(&what, &values(&s.download(&yd).unwrap()), &values(&want), tol);
    assert_close(&what, &values(&s.download(&yd_online).unwrap()), &values(&want), tol);
    assert_close(&what, &values(&s.download(&yd).unwrap()), &reference, tol);
}

fn softmax_matches_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(11);
    for (rows, cols) in ROWS.into_iter().chain([(4, 5000), (2, 8192), (2, 20000)]) {
        for pad in [0, 3] {
            softmax_case::<f32>(&s, &mut rng, rows, cols, pad);
            softmax_case::<bf16>(&s, &mut rng, rows, cols, pad);
        }
        softmax_case::<f16>(&s, &mut rng, rows, cols, 0);
    }
}

/// Running sums along rows of `x` (a strided view), on the GPU against
/// the CPU backend and against f64.
fn cumsum_case<T: Num>(s: &Stream, rng: &mut Rng, rows: usize, cols: usize, pad: usize) {
    let x = rng.normals(rows * cols, 1.0);
    let xh = strided::<T>(&x, &[rows, cols], pad);
    let mut want = poisoned::<T>(&[rows, cols]);
    let mut yd = s.upload(&want).unwrap();
    scan::run(s, &s.upload(&xh).unwrap(), &mut yd).unwrap();
    scan::run(&Cpu, &xh, &mut want).unwrap();
    let what = format!("cumsum {} {rows}x{cols} pad {pad}", T::DTYPE);
    let reference = cumsum_ref(&rounded::<T>(&x), cols);
    let tol = T::TOL.max(1e-6);
    assert_close(&what, &values(&s.download(&yd).unwrap()), &values(&want), tol);
    assert_close(&what, &values(&s.download(&yd).unwrap()), &reference, tol);
}

/// Each row's largest value and its first position, on the GPU against f64.
fn argmax_case<T: Num>(s: &Stream, rng: &mut Rng, rows: usize, cols: usize, pad: usize) {
    let x = argmax_rows(rng, rows, cols);
    let want = argmax_ref(&rounded::<T>(&x), cols);
    let (mut value, mut index) = (
        s.upload(&HostTensor::full(&[rows], f32::NAN)).unwrap(),
        s.zeros(&[rows]).unwrap(),
    );
    // Twice with one scratch: the first launch leaves its counts at 0.
    let xd = s.upload(&strided::<T>(&x, &[rows, cols], pad)).unwrap();
    let mut scratch = argmax::ArgmaxScratch::new(s, rows, cols).unwrap();
    for _ in 0..2 {
        argmax::run(s, &xd, &mut scratch, &mut value, &mut index).unwrap();
    }
    let (value, index) = (
        s.download(&value).unwrap().to_vec(),
        s.download(&index).unwrap().to_vec(),
    );
    for (r, &(v, i)) in want.iter().enumerate() {
        let got = (value[r] as f64, index[r] as usize);
        assert_eq!(got, (v, i), "argmax {} {rows}x{cols} pad {pad} row {r}", T::DTYPE);
    }
}

fn argmax_matches_f64_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(15);
    for (rows, cols) in ROWS.into_iter().chain([(16, 50257), (3, 4096), (2, 4097)]) {
        argmax_case::<f32>(&s, &mut rng, rows, cols, 0);
        argmax_case::<bf16>(&s, &mut rng, rows, cols, 0);
        argmax_case::<bf16>(&s, &mut rng, rows, cols, 3);
        argmax_case::<f16>(&s, &mut rng, rows, cols, 0);
    }
}

/// Each row's `k` largest and their columns, on the GPU and the CPU
/// backend against f64, exactly: many ties, a NaN in some rows.
fn topk_case<T: Num>(s: &Stream, rng: &mut Rng, (rows, cols): (usize, usize), k: usize) {
    let mut x: Vec<f64> = (0..rows * cols)
        .map(|_| (rng.below(4000) as f64 - 2000.0) / 64.0)
        .collect();
    if cols > 7 {
        x[cols / 3] = f64::NAN;
    }
    let xh = HostTensor::from_vec(x.iter().map(|&v| T::of(v)).collect(), &[rows, cols]).unwrap();
    let xr = rounded::<T>(&x);
    let want = topk_ref(&xr, cols, k);
    let what = format!("topk {} {rows}x{cols} k {k}", T::DTYPE);
    let check = |who: &str, v: Vec<f64>, c: Vec<i32>| {
        for (r, order) in want.iter().enumerate() {
            for (j, &col) in order.iter().enumerate() {
                let (got, w) = (v[r * k + j], xr[r * cols + col]);
                assert!(
                    got == w || (got.is_nan() && w.is_nan()),
                    "{what} {who}: row {r} rank {j}: {got} against {w}"
                );
                assert_eq!(c[r * k + j], col as i32, "{what} {who}: row {r} rank {j}");
            }
        }
    };
    let mut scratch = topk::TopkScratch::new(s, rows, cols).unwrap();
    let (mut vd, mut cd) = (s.zeros::<T>(&[rows, k]).unwrap(), s.zeros::<i32>(&[rows, k]).unwrap());
    let xd = s.upload(&xh).unwrap();
    // Twice with one scratch.
    for _ in 0..2 {
        topk::run(s, &xd, &mut scratch, &mut vd, &mut cd).unwrap();
        check(
            "GPU",
            values(&s.download(&vd).unwrap()),
            s.download(&cd).unwrap().to_vec(),
        );
    }
    let mut scratch = topk::TopkScratch::new(&Cpu, rows, cols).unwrap();
    let (mut v, mut c) = (HostTensor::<T>::zeros(&[rows, k]), HostTensor::<i32>::zeros(&[rows, k]));
    topk::run(&Cpu, &xh, &mut scratch, &mut v, &mut c).unwrap();
    check("CPU", values(&v), c.to_vec());
}

fn topk_matches_f64_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(18);
    for (shape, k) in [
        ((1, 50257), 50),
        ((16, 50257), 50),
        ((3, 4097), 64),
        ((2, 1000), 1),
        ((5, 64), 64),
        ((1, 1), 1),
    ] {
        topk_case::<f32>(&s, &mut rng, shape, k);
        topk_case::<bf16>(&s, &mut rng, shape, k);
    }
    topk_case::<f16>(&s, &mut rng, (2, 20000), 50);
}

/// Sampling by the Gumbel-max trick, plain and with top-k and top-p: the
/// GPU draws what the CPU version draws for the same keys, and its
/// frequencies follow the kept columns' softmax.
fn gumbel_max_matches_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    gumbel_filters_check(&s, 40_000);
    let mut rng = Rng::new(17);
    let draws = [
        draw(0.8, None, None),
        draw(0.8, Some(50), None),
        draw(1.0, None, Some(0.9)),
        draw(0.7, Some(200), Some(0.95)),
    ];
    for ((rows, cols), d) in [(16, 50257), (5, 1000), (3, 4097)]
        .into_iter()
        .flat_map(|c| draws.map(|d| (c, d)))
    {
        let x = rng.normals(rows * cols, 3.0);
        let keys: Vec<u32> = (0..rows as u32).map(|r| r.wrapping_mul(97_531) ^ 5).collect();
        let keys = HostTensor::from_vec(keys, &[rows]).unwrap();
        let xh = host::<bf16>(&x, &[rows, cols]);
        let (mut value, mut index) = (HostTensor::zeros(&[rows]), HostTensor::zeros(&[rows]));
        argmax::run_gumbel(&Cpu, (&xh, &keys), (d, 5), &mut value, &mut index).unwrap();
        let (mut vd, mut id) = (s.zeros(&[rows]).unwrap(), s.zeros(&[rows]).unwrap());
        let (xd, kd) = (s.upload(&xh).unwrap(), s.upload(&keys).unwrap());
        argmax::run_gumbel(&s, (&xd, &kd), (d, 5), &mut vd, &mut id).unwrap();
        assert_eq!(
            s.download(&id).unwrap().to_vec(),
            index.to_vec(),
            "gumbel {rows}x{cols} {d:?}"
        );
        let values: Vec<f64> = value.to_vec().iter().map(|&v| v as f64).collect();
        let got: Vec<f64> = s.download(&vd).unwrap().to_vec().iter().map(|&v| v as f64).collect();
        assert_close(&format!("gumbel {rows}x{cols} {d:?} values"), &got, &values, 1e-5);
    }
    // A split vocabulary's columns placed in the whole row, as on the CPU.
    let (rows, cols, first) = (16, 16_752, 16_753);
    let part = host::<bf16>(&rng.normals(rows * cols, 3.0), &[rows, cols]);
    let mut want = HostTensor::full(&[rows, 50257], bf16::NAN);
    argmax::place(&Cpu, &part, &mut want, first).unwrap();
    let mut got = s.full(&[rows, 50257], bf16::NAN).unwrap();
    argmax::place(&s, &s.upload(&part).unwrap(), &mut got, first).unwrap();
    let bits = |v: Vec<bf16>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(s.download(&got).unwrap().to_vec()),
        bits(want.to_vec()),
        "placed columns"
    );
}

fn cumsum_matches_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(12);
    for (rows, cols) in ROWS.into_iter().chain([(4, 5000), (2, 8192), (9, 1)]) {
        cumsum_case::<f32>(&s, &mut rng, rows, cols, 3);
        cumsum_case::<bf16>(&s, &mut rng, rows, cols, 0);
        cumsum_case::<f16>(&s, &mut rng, rows, cols, 0);
    }
}

fn norm_case<T: Num>(s: &Stream, rng: &mut Rng, rows: usize, cols: usize, pad: usize) {
    let x = rng.normals(rows * cols, 2.0);
    let w = rng.normals(cols, 1.0);
    let b = rng.normals(cols, 1.0);
    let xh = strided::<T>(&x, &[rows, cols], pad);
    let (wh, bh) = (host::<T>(&w, &[cols]), host::<T>(&b, &[cols]));
    let (xd, wd, bd) = (s.upload(&xh).unwrap(), s.upload(&wh).unwrap(), s.upload(&bh).unwrap());
    let what = format!("{} {rows}x{cols} pad {pad}", T::DTYPE);
    let grid = rows.div_ceil(softmax::rows_per_block(1024)) as u32;

    let tol = T::TOL.max(1e-5);
    let reference = layer_norm_ref(&rounded::<T>(&x), &rounded::<T>(&w), &rounded::<T>(&b), cols, 1e-5);
    for shift in [0, 1] {
        let mut want = poisoned::<T>(&[rows, cols]);
        let mut yd = s.upload(&want).unwrap();
        norm::layer_norm::launch_with(s, &[1024, shift], grid, &xd, &wd, &bd, &mut yd, 1e-5).unwrap();
        norm::layer_norm::launch_with(&Cpu, &[1024, shift], grid, &xh, &wh, &bh, &mut want, 1e-5).unwrap();
        let what = format!("layer_norm shift {shift} {what}");
        assert_close(&what, &values(&s.download(&yd).unwrap()), &values(&want), tol);
        assert_close(&what, &values(&s.download(&yd).unwrap()), &reference, tol);
    }

    let mut want = poisoned::<T>(&[rows, cols]);
    let mut yd = s.upload(&want).unwrap();
    norm::rms_norm::launch::<T, 1024, _>(s, grid, &xd, &wd, &mut yd, 1e-5).unwrap();
    norm::rms_norm::launch::<T, 1024, _>(&Cpu, grid, &xh, &wh, &mut want, 1e-5).unwrap();
    assert_close(
        &format!("rms_norm {what}"),
        &values(&s.download(&yd).unwrap()),
        &values(&want),
        tol,
    );
}

fn layer_norm_and_rms_norm_match_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(12);
    for (rows, cols) in ROWS {
        for pad in [0, 1] {
            norm_case::<f32>(&s, &mut rng, rows, cols, pad);
            norm_case::<bf16>(&s, &mut rng, rows, cols, pad);
        }
        norm_case::<f16>(&s, &mut rng, rows, cols, 0);
    }
}

fn elementwise_case<T: Num>(s: &Stream, rng: &mut Rng, n: usize) {
    let x = rng.normals(n, 2.0);
    let y = rng.normals(n, 2.0);
    let (xh, yh) = (host::<T>(&x, &[n]), host::<T>(&y, &[n]));
    let (xd, yd) = (s.upload(&xh).unwrap(), s.upload(&yh).unwrap());
    let grid = n.div_ceil(1024) as u32;
    let what = format!("{} n={n}", T::DTYPE);
    let check = |name: &str, got: &tile::Tensor<T>, want: &HostTensor<T>, tol: f64| {
        assert_close(
            &format!("{name} {what}"),
            &values(&s.download(got).unwrap()),
            &values(want),
            tol,
        );
    };

    let mut want = poisoned::<T>(&[n]);
    let mut out = s.upload(&want).unwrap();
    elementwise::add::launch::<T, 1024, _>(s, grid, &xd, &yd, &mut out).unwrap();
    elementwise::add::launch::<T, 1024, _>(&Cpu, grid, &xh, &yh, &mut want).unwrap();
    check("add", &out, &want, 1e-7);

    let mut want = poisoned::<T>(&[n]);
    let mut out = s.upload(&want).unwrap();
    elementwise::scale::launch::<T, 1024, _>(s, grid, -1.5, &xd, &mut out).unwrap();
    elementwise::scale::launch::<T, 1024, _>(&Cpu, grid, -1.5, &xh, &mut want).unwrap();
    check("scale", &out, &want, 1e-7);

    let mut want = poisoned::<T>(&[n]);
    let mut out = s.upload(&want).unwrap();
    elementwise::gelu::launch::<T, 1024, _>(s, grid, &xd, &mut out).unwrap();
    elementwise::gelu::launch::<T, 1024, _>(&Cpu, grid, &xh, &mut want).unwrap();
    // tanh.approx.f32 has a relative error near 2^-11.
    check("gelu", &out, &want, T::TOL.max(2e-3));

    let mut want = xh.clone();
    let mut acc = s.upload(&xh).unwrap();
    elementwise::residual_add::launch::<T, 1024, _>(s, grid, &mut acc, &yd).unwrap();
    elementwise::residual_add::launch::<T, 1024, _>(&Cpu, grid, &mut want, &yh).unwrap();
    check("residual_add", &acc, &want, 1e-7);
}

fn elementwise_kernels_match_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(13);
    for n in [1, 3, 1000, 1024, 4099, 100_003] {
        elementwise_case::<f32>(&s, &mut rng, n);
        elementwise_case::<bf16>(&s, &mut rng, n);
        elementwise_case::<f16>(&s, &mut rng, n);
    }
}

fn embedding_case<T: Num>(s: &Stream, rng: &mut Rng, c: usize) {
    let (vocab, ctx, b, t) = (97, 32, 3, 11);
    let wte = host::<T>(&rng.normals(vocab * c, 1.0), &[vocab, c]);
    let wpe = host::<T>(&rng.normals(ctx * c, 1.0), &[ctx, c]);
    let tokens: Vec<i32> = (0..b * t).map(|_| rng.below(vocab) as i32).collect();
    let positions: Vec<i32> = (0..b * t).map(|i| (i % t + 3 * (i / t)) as i32).collect();
    let th = HostTensor::from_vec(tokens, &[b * t]).unwrap();
    let ph = HostTensor::from_vec(positions, &[b * t]).unwrap();
    let mut want = poisoned::<T>(&[b * t, c]);
    let mut out = s.upload(&want).unwrap();
    let (td, pd) = (s.upload(&th).unwrap(), s.upload(&ph).unwrap());
    let (wte_d, wpe_d) = (s.upload(&wte).unwrap(), s.upload(&wpe).unwrap());
    embedding::run(s, (&td, &pd), (&wte_d, &wpe_d), &mut out).unwrap();
    embedding::run(&Cpu, (&th, &ph), (&wte, &wpe), &mut want).unwrap();
    let rows = HostTensor::from_vec(vec![(b * t - 1) as i32, 0, 4], &[3]).unwrap();
    let mut picked = s.zeros::<T>(&[3, c]).unwrap();
    embedding::run_gather_rows(s, &s.upload(&rows).unwrap(), &out, &mut picked).unwrap();
    let mut picked_cpu = poisoned::<T>(&[3, c]);
    embedding::run_gather_rows(&Cpu, &rows, &want, &mut picked_cpu).unwrap();
    assert_close(
        &format!("gather_rows {} c={c}", T::DTYPE),
        &values(&s.download(&picked).unwrap()),
        &values(&picked_cpu),
        0.0,
    );
    assert_close(
        &format!("embedding {} c={c}", T::DTYPE),
        &values(&s.download(&out).unwrap()),
        &values(&want),
        1e-7,
    );
}

fn embedding_matches_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(14);
    for c in [1, 100, 768, 771] {
        embedding_case::<f32>(&s, &mut rng, c);
        embedding_case::<bf16>(&s, &mut rng, c);
    }
}

fn bad_arguments_are_typed_errors_not_launches(d: Arc<Device>) {
    let s = d.stream();
    let x = s.zeros::<f32>(&[4]).unwrap();
    let mut y = s.zeros::<f32>(&[4]).unwrap();
    let e = softmax::softmax::launch::<f32, 32, _>(&s, 1, &x, &mut y).unwrap_err();
    assert!(
        matches!(
            e,
            tile::Error::Rank {
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{e}"
    );
    let x = s.zeros::<f32>(&[1, 4]).unwrap();
    let mut y = s.zeros::<f32>(&[1, 4]).unwrap();
    softmax::softmax::launch::<f32, 32, _>(&s, 0, &x, &mut y).unwrap();
    let e = softmax::softmax::launch::<f32, 32, _>(&s, (1, 70000), &x, &mut y).unwrap_err();
    assert!(matches!(e, tile::Error::Grid { .. }), "{e}");
    // A device that gives a block less shared memory than any variant of
    // the tile needs (a 128x128x64 bf16 matmul's stages take 96 KiB, its
    // scalar variant's epilogue 32 KiB).
    let d = s.device();
    d.use_arch_specific(false);
    d.limit_block_shared_bytes(16 * 1024);
    let a = s.zeros::<bf16>(&[128, 64]).unwrap();
    let b = s.zeros::<bf16>(&[64, 128]).unwrap();
    let mut c = s.zeros::<bf16>(&[128, 128]).unwrap();
    use tile::Tuned;
    use tile_kernels::matmul::matmul::run_with;
    let config = |consts| Tuned {
        consts,
        clusters: false,
    };
    let e = run_with(&s, config(&[128, 128, 64]), &a, &b, &mut c).unwrap_err();
    d.use_arch_specific(true);
    d.limit_block_shared_bytes(usize::MAX);
    assert!(
        matches!(e, tile::Error::SharedMemory { needs, device: 16384, .. } if needs > 16384),
        "{e}"
    );
    // A tile shape the attribute does not build, chosen at run time.
    let e = run_with(&s, config(&[128, 64, 32]), &a, &b, &mut c).unwrap_err();
    assert!(
        matches!(&e, tile::Error::NotBuilt { kernel: "matmul", consts } if consts == &[128, 64, 32]),
        "{e}"
    );
    // Operands whose sizes disagree, caught before anything is tuned or
    // launched (the kernels' declared shapes): the tile masks would
    // otherwise compute a partial product.
    use tile_kernels::matmul;
    let contract_error = |e: tile::Error, want: (&str, usize, usize, usize)| match e {
        tile::Error::ShapeContract {
            param,
            axis,
            found,
            expected,
            ..
        } => assert_eq!((param, axis, found, expected), want),
        e => panic!("expected a shape-contract error, got {e}"),
    };
    let short_k = s.zeros::<bf16>(&[32, 128]).unwrap();
    contract_error(matmul::run(&s, &a, &short_k, &mut c).unwrap_err(), ("b", 0, 32, 64));
    let mut small_c = s.zeros::<bf16>(&[64, 128]).unwrap();
    contract_error(matmul::run(&s, &a, &b, &mut small_c).unwrap_err(), ("c", 0, 64, 128));
    let w = s.zeros::<bf16>(&[128, 64]).unwrap();
    let short_bias = s.zeros::<bf16>(&[100]).unwrap();
    let e = matmul::run_linear(&s, &a, &w, &short_bias, &mut c, false).unwrap_err();
    contract_error(e, ("b", 0, 100, 128));
    let bias = s.zeros::<bf16>(&[128]).unwrap();
    let e = matmul::run_linear_residual(&s, (&a, &w, &bias), &small_c, &mut c).unwrap_err();
    contract_error(e, ("residual", 0, 64, 128));
    let (a3, b3) = (
        s.zeros::<bf16>(&[2, 128, 64]).unwrap(),
        s.zeros::<bf16>(&[3, 64, 128]).unwrap(),
    );
    let mut c3 = s.zeros::<bf16>(&[2, 128, 128]).unwrap();
    contract_error(matmul::run_batched(&s, &a3, &b3, &mut c3).unwrap_err(), ("b", 0, 3, 2));
    let e = matmul::run_batched(&s, &a, &b, &mut c).unwrap_err();
    assert!(
        matches!(
            e,
            tile::Error::Rank {
                param: "a",
                expected: 3,
                found: 2,
                ..
            }
        ),
        "{e}"
    );
    // Nothing above reached the GPU: the stream is healthy.
    s.synchronize().unwrap();
}

fn linear_case<T: Num>(s: &Stream, rng: &mut Rng, m: usize, n: usize, k: usize) {
    let x = host::<T>(&rng.normals(m * k, 1.0), &[m, k]);
    let w = host::<T>(&rng.normals(n * k, 0.3), &[n, k]);
    let b = host::<T>(&rng.normals(n, 1.0), &[n]);
    let (xd, wd, bd) = (s.upload(&x).unwrap(), s.upload(&w).unwrap(), s.upload(&b).unwrap());
    for gelu in [0, 1] {
        let mut want = poisoned::<T>(&[m, n]);
        let mut yd = s.upload(&want).unwrap();
        linear::linear_ffma::launch::<T, 16, 64, 8, _>(s, linear::grid(m, n), &xd, &wd, &bd, &mut yd, gelu).unwrap();
        linear::linear_ffma::launch::<T, 16, 64, 8, _>(&Cpu, linear::grid(m, n), &x, &w, &b, &mut want, gelu).unwrap();
        let what = format!("linear {} {m}x{n}x{k} gelu={gelu}", T::DTYPE);
        assert_close(
            &what,
            &values(&s.download(&yd).unwrap()),
            &values(&want),
            T::TOL.max(2e-3),
        );
    }
    // With the residual, through the wrapper, against the f64 reference.
    let r = host::<T>(&rng.normals(m * n, 1.0), &[m, n]);
    let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
    linear::run_residual(s, (&xd, &wd, &bd), &s.upload(&r).unwrap(), &mut yd).unwrap();
    let want: Vec<f64> = linear_ref(&values(&x), &values(&w), &values(&b), m, n, k, false)
        .iter()
        .zip(values(&r))
        .map(|(y, r)| y + r)
        .collect();
    let what = format!("linear + residual {} {m}x{n}x{k}", T::DTYPE);
    assert_close(&what, &values(&s.download(&yd).unwrap()), &want, T::TOL.max(1e-5));
}

fn linear_matches_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(15);
    for (m, n, k) in [(1, 1, 1), (5, 70, 33), (128, 384, 128), (37, 130, 100)] {
        linear_case::<f32>(&s, &mut rng, m, n, k);
        linear_case::<bf16>(&s, &mut rng, m, n, k);
    }
}

/// A few-row linear layer's operands rounded to `T` (`x: [m, k]`,
/// `w: [n, k]`, `b: [n]`, a residual `r: [m, n]`): their values, their
/// copies on the GPU, and the f64 references without GELU, with and
/// without the residual.
struct FewRows<T: Num> {
    mnk: (usize, usize, usize),
    x: Vec<f64>,
    w: Vec<f64>,
    b: Vec<f64>,
    xd: Tensor<T>,
    wd: Tensor<T>,
    bd: Tensor<T>,
    rd: Tensor<T>,
    plain: Vec<f64>,
    with_residual: Vec<f64>,
}

impl<T: Num> FewRows<T> {
    fn new(s: &Stream, rng: &mut Rng, (m, n, k): (usize, usize, usize)) -> Self {
        let x = rounded::<T>(&rng.normals(m * k, 1.0));
        let w = rounded::<T>(&rng.normals(n * k, 0.3));
        let b = rounded::<T>(&rng.normals(n, 1.0));
        let r = rounded::<T>(&rng.normals(m * n, 1.0));
        let plain = linear_ref(&x, &w, &b, m, n, k, false);
        let with_residual = plain.iter().zip(&r).map(|(y, r)| y + r).collect();
        FewRows {
            mnk: (m, n, k),
            xd: s.upload(&host::<T>(&x, &[m, k])).unwrap(),
            wd: s.upload(&host::<T>(&w, &[n, k])).unwrap(),
            bd: s.upload(&host::<T>(&b, &[n])).unwrap(),
            rd: s.upload(&host::<T>(&r, &[m, n])).unwrap(),
            x,
            w,
            b,
            plain,
            with_residual,
        }
    }

    /// The reference of `y = x @ w^T + b`, then GELU if `gelu` is 1.
    fn want(&self, gelu: i32) -> Vec<f64> {
        let (m, n, k) = self.mnk;
        linear_ref(&self.x, &self.w, &self.b, m, n, k, gelu == 1)
    }
}

/// Few-row shapes: one element; GPT-2's; ragged N and K (K past one `BK`,
/// and not a multiple of a vector); the most rows the few-row kernels take.
const FEW_ROW_SHAPES: [(usize, usize, usize); 6] = [
    (1, 1, 1),
    (1, 768, 768),
    (4, 2304, 768),
    (3, 77, 1000),
    (16, 130, 3077),
    (5, 50257, 64),
];

/// Linear layers of few rows on the CUDA cores (`gemv`): every
/// configuration, with and without GELU, with the residual, and with a
/// LayerNorm folded in, against the f64 reference on the operands as `T`
/// holds them; then the tuned entry points, which send such a layer to
/// `gemv`, split-K or the tensor-core kernel.
fn gemv_case<T: Num>(s: &Stream, rng: &mut Rng, shape: (usize, usize, usize)) {
    use tile_kernels::matmul;
    let ops = &FewRows::<T>::new(s, rng, shape);
    let FewRows { xd, wd, bd, rd, .. } = ops;
    let ((m, n, k), (x, w, b)) = (ops.mnk, (&ops.x, &ops.w, &ops.b));
    let (plain, with_residual) = (&ops.plain, &ops.with_residual);
    let tol = T::TOL.max(1e-5);
    for tile in gemv::gemv::KERNEL.candidates(&[T::DTYPE], false) {
        for gelu in [0, 1] {
            let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
            gemv::gemv::run_with(s, tile, xd, wd, bd, &mut yd, gelu).unwrap();
            let what = format!("gemv {} {m}x{n}x{k} gelu={gelu} {tile}", T::DTYPE);
            assert_close(&what, &values(&s.download(&yd).unwrap()), &ops.want(gelu), tol);
        }
        let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
        gemv::gemv_residual::run_with(s, tile, xd, wd, bd, rd, &mut yd).unwrap();
        let what = format!("gemv_residual {} {m}x{n}x{k} {tile}", T::DTYPE);
        assert_close(&what, &values(&s.download(&yd).unwrap()), with_residual, tol);
    }
    // With a LayerNorm folded into the product, on rows offset from 0
    // (its statistics are of the values less the row's first).
    let (ln_w, ln_b, eps) = (
        rounded::<T>(&rng.normals(k, 1.0)),
        rounded::<T>(&rng.normals(k, 1.0)),
        1e-5,
    );
    let xo = rounded::<T>(&x.iter().map(|v| v + 30.0).collect::<Vec<_>>());
    let h = layer_norm_ref(&xo, &ln_w, &ln_b, k, eps);
    let ln = (
        s.upload(&host::<T>(&xo, &[m, k])).unwrap(),
        s.upload(&host::<T>(&ln_w, &[k])).unwrap(),
        s.upload(&host::<T>(&ln_b, &[k])).unwrap(),
    );
    let norm = (&ln.0, &ln.1, &ln.2, eps as f32);
    let fold = gemv::NormFold::new(s, (&ln.1, &ln.2), (wd, bd)).unwrap();
    for tile in gemv::gemv_layer_norm::KERNEL.candidates(&[T::DTYPE], false) {
        for gelu in [0, 1] {
            let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
            let (scale, shift) = (&fold.scale, &fold.shift);
            gemv::gemv_layer_norm::run_with(s, tile, norm.0, norm.1, wd, scale, shift, &mut yd, gelu, norm.3).unwrap();
            let want = linear_ref(&h, w, b, m, n, k, gelu == 1);
            let what = format!("gemv_layer_norm {} {m}x{n}x{k} gelu={gelu} {tile}", T::DTYPE);
            assert_close(&what, &values(&s.download(&yd).unwrap()), &want, tol.max(T::TOL));
        }
    }
    // The tuned entry points may choose the tensor cores: tf32 for f32.
    let tuned_tol = |tile: matmul::LinearTile| match tile {
        matmul::LinearTile::TensorCores(_) | matmul::LinearTile::SplitK(_) => tol.max(2e-3),
        matmul::LinearTile::Gemv(_) => tol,
    };
    let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
    let tuned = matmul::run_linear(s, xd, wd, bd, &mut yd, false).unwrap();
    let what = format!("run_linear {} {m}x{n}x{k} ({tuned})", T::DTYPE);
    assert_close(&what, &values(&s.download(&yd).unwrap()), plain, tuned_tol(tuned));
    let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
    let tuned = matmul::run_linear_residual(s, (xd, wd, bd), rd, &mut yd).unwrap();
    let what = format!("run_linear_residual {} {m}x{n}x{k} ({tuned})", T::DTYPE);
    assert_close(
        &what,
        &values(&s.download(&yd).unwrap()),
        with_residual,
        tuned_tol(tuned),
    );
    let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
    let tuned =
        matmul::run_layer_norm_linear(s, norm, (wd, bd, &fold), &mut yd, true, &mut s.zeros(&[m, k]).unwrap()).unwrap();
    let what = format!("run_layer_norm_linear {} {m}x{n}x{k} ({tuned})", T::DTYPE);
    let want = linear_ref(&h, w, b, m, n, k, true);
    assert_close(
        &what,
        &values(&s.download(&yd).unwrap()),
        &want,
        tuned_tol(tuned).max(T::TOL),
    );
}

/// Few-row linear layers on the tensor cores split along K over a
/// cluster (`split_k`; f32 through tf32): every configuration, with and
/// without GELU, and with the residual, against the f64 reference. A test
/// of its own, short enough for compute-sanitizer.
fn split_k_case<T: Num>(s: &Stream, rng: &mut Rng, shape: (usize, usize, usize)) {
    let ops = &FewRows::<T>::new(s, rng, shape);
    let FewRows { xd, wd, bd, rd, .. } = ops;
    let (m, n, k) = ops.mnk;
    let tol = if T::DTYPE == tile::DType::F32 { 2e-3 } else { T::TOL };
    for tile in split_k::linear_split_k::KERNEL.candidates(&[T::DTYPE], false) {
        for gelu in [0, 1] {
            let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
            split_k::linear_split_k::run_with(s, tile, xd, wd, bd, &mut yd, gelu).unwrap();
            let what = format!("linear_split_k {} {m}x{n}x{k} gelu={gelu} {tile}", T::DTYPE);
            assert_close(&what, &values(&s.download(&yd).unwrap()), &ops.want(gelu), tol);
        }
        let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
        split_k::linear_split_k_residual::run_with(s, tile, xd, wd, bd, rd, &mut yd).unwrap();
        let what = format!("linear_split_k_residual {} {m}x{n}x{k} {tile}", T::DTYPE);
        assert_close(&what, &values(&s.download(&yd).unwrap()), &ops.with_residual, tol);
    }
}

fn gemv_matches_f64_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(29);
    for shape in FEW_ROW_SHAPES {
        gemv_case::<f32>(&s, &mut rng, shape);
        gemv_case::<bf16>(&s, &mut rng, shape);
        gemv_case::<f16>(&s, &mut rng, shape);
    }
}

fn split_k_matches_f64_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(30);
    for shape in FEW_ROW_SHAPES {
        split_k_case::<f32>(&s, &mut rng, shape);
        split_k_case::<bf16>(&s, &mut rng, shape);
        split_k_case::<f16>(&s, &mut rng, shape);
    }
}

/// Causal attention on the tensor cores against the f64 reference: the
/// tiling `attention::run` picks, then every other one built for `T`
/// (f32 multiplies through tf32: `tol` 2e-3; bf16 rounds `p` too).
fn attention_case<T: Num>(
    s: &Stream,
    rng: &mut Rng,
    (batch, t, heads, d): (usize, usize, usize, usize),
    pad: usize,
    tol: f64,
) {
    let c = heads * d;
    let qkv = strided::<T>(&rng.normals(batch * t * 3 * c, 1.0), &[batch, t, 3 * c], pad);
    let want = attention_ref(&values(&qkv), batch, t, c, heads);
    let qd = s.upload(&qkv).unwrap();
    let what = format!("attention {} b={batch} t={t} h={heads} d={d} pad {pad}", T::DTYPE);
    let mut od = s.upload(&poisoned::<T>(&[batch, t, c])).unwrap();
    attention::run(s, &qd, &mut od, heads).unwrap();
    assert_close(&what, &values(&s.download(&od).unwrap()), &want, tol);
    let (queries, keys) = attention::tiling::<T>(s.device(), t, d);
    let built = attention::causal_attention::KERNEL.specializations(&[T::DTYPE]);
    let others = built
        .iter()
        .map(|c| c.iter().map(|&v| v as usize).collect::<Vec<_>>())
        .filter(|c| c[2] == d && c[..2] != [queries, keys]);
    // Other tilings, the grid's order one head at a time (group 1) and in
    // groups of 3 (a short last group when the query blocks are not a
    // multiple of 3).
    for (consts, group) in others.flat_map(|c| [(c.clone(), 1), (c, 3)]) {
        let mut od = s.upload(&poisoned::<T>(&[batch, t, c])).unwrap();
        let (grid, scale) = (attention::grid(batch, t, heads, consts[0]), 1.0 / (d as f32).sqrt());
        attention::causal_attention::launch_with(s, &consts, grid, &qd, &mut od, heads as i32, scale, group).unwrap();
        let what = format!("{what} {}x{} group {group}", consts[0], consts[1]);
        assert_close(&what, &values(&s.download(&od).unwrap()), &want, tol);
    }
}

fn attention_matches_f64_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(16);
    // On Hopper the 16-bit products run on `wgmma` (the accumulators fresh
    // each step or rescaled, `q` and `p` read from registers), elsewhere
    // and for f32 on `mma.sync`: both are checked.
    on_every_path(&d, || {
        // One token; ragged lengths within and across 128-query blocks;
        // GPT-2's head size at a length of several blocks; heads of 128
        // (64-query blocks, warps split along rows by the compiler's rule).
        for shape in [
            (1, 1, 1, 32),
            (2, 37, 4, 32),
            (1, 128, 4, 32),
            (3, 70, 2, 64),
            (2, 300, 3, 64),
            (1, 1024, 2, 64),
            (2, 70, 2, 128),
            (1, 333, 1, 128),
        ] {
            attention_case::<f32>(&s, &mut rng, shape, 0, 2e-3);
            attention_case::<bf16>(&s, &mut rng, shape, 0, bf16::TOL);
            attention_case::<f16>(&s, &mut rng, shape, 0, 4e-3);
        }
        // Rows one element apart from 16-byte alignment: the scalar-access
        // variants (or, for `wgmma`, `qkv` copied into aligned rows for TMA).
        for shape in [(2, 37, 4, 32), (1, 300, 2, 64), (1, 100, 1, 128)] {
            attention_case::<f32>(&s, &mut rng, shape, 1, 2e-3);
            attention_case::<bf16>(&s, &mut rng, shape, 1, bf16::TOL);
        }
        // A long ragged sequence: on sm_90a, 128 queries and 128 keys per step.
        attention_case::<bf16>(&s, &mut rng, (1, 4100, 1, 128), 0, bf16::TOL);
    });
    // In IEEE f32 on the CUDA cores: within f32's rounding of the reference.
    for (batch, t, heads, d) in [
        (1, 1, 1, 32),
        (2, 37, 4, 32),
        (3, 70, 2, 64),
        (1, 300, 3, 64),
        (2, 45, 1, 128),
    ] {
        let c = heads * d;
        let qkv = host::<f32>(&rng.normals(batch * t * 3 * c, 1.0), &[batch, t, 3 * c]);
        let mut od = s.upload(&poisoned::<f32>(&[batch, t, c])).unwrap();
        attention::run_ieee(&s, &s.upload(&qkv).unwrap(), &mut od, heads).unwrap();
        let want = attention_ref(&values(&qkv), batch, t, c, heads);
        let what = format!("attention in IEEE f32 b={batch} t={t} h={heads} d={d}");
        assert_close(&what, &values(&s.download(&od).unwrap()), &want, 1e-5);
    }
    assert_launched_on_sm90a(
        &d,
        &[
            "causal_attention_bf16_128_64_64_wgmma",
            "causal_attention_f16_128_32_32_wgmma",
            "causal_attention_bf16_64_64_128_wgmma",
            "causal_attention_bf16_128_128_128_wgmma",
        ],
    );
}

fn matmul_case<T: Num>(s: &Stream, rng: &mut Rng, m: usize, n: usize, k: usize, tol: f64) {
    use tile_kernels::matmul;
    let a = host::<T>(&rng.normals(m * k, 1.0), &[m, k]);
    let b = host::<T>(&rng.normals(k * n, 1.0), &[k, n]);
    let (ad, bd) = (s.upload(&a).unwrap(), s.upload(&b).unwrap());
    let mut want = poisoned::<T>(&[m, n]);
    matmul::matmul::launch::<T, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &a, &b, &mut want).unwrap();
    for tile in matmul::matmul::KERNEL.candidates(&[T::DTYPE], true) {
        let mut cd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
        matmul::matmul::run_with(s, tile, &ad, &bd, &mut cd).unwrap();
        let what = format!("matmul {} {m}x{n}x{k} tile {tile}", T::DTYPE);
        assert_close(&what, &values(&s.download(&cd).unwrap()), &values(&want), tol);
    }
}

/// Matmul shapes: ragged everywhere (scalar-access variants), and ragged
/// but with N and K multiples of 8, which the vector variants (on Hopper
/// the `wgmma` ones) take: M, N, K not multiples of any tile, K below one tile.
const MATMUL_SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (16, 8, 16),
    (70, 45, 33),
    (128, 128, 20),
    (200, 300, 130),
    (257, 129, 512),
    (70, 40, 24),
    (200, 136, 264),
    (257, 264, 520),
    (64, 768, 768),
];

fn matmul_on_tensor_cores_matches_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(17);
    on_every_path(&d, || {
        for (m, n, k) in MATMUL_SHAPES {
            matmul_case::<bf16>(&s, &mut rng, m, n, k, bf16::TOL);
            matmul_case::<f16>(&s, &mut rng, m, n, k, f16::TOL);
            // f32 inputs multiply as tf32 (10-bit mantissa): about 3e-4 relative.
            matmul_case::<f32>(&s, &mut rng, m, n, k, 2e-3);
        }
    });
}

/// f32 operands enter the tensor cores as tf32 rounded to nearest, as
/// cuBLAS's are: on normal inputs its tf32 product is 2.9e-4 from the f64
/// one, and software rounding of both operands reproduces it to 1e-5,
/// while truncating one operand gives 4.6e-4 and both 7.7e-4 (H100,
/// `bench-results/2026-11-24-h100-cublas-tf32-rounding.txt`). Every
/// variant, `a @ b` and `x @ w^T`, on both paths, on shapes where blocks
/// run in 2-CTA clusters over K-loops of 3 to 32 steps.
fn tf32_products_round_their_operands_like_cublas(d: Arc<Device>) {
    let s = d.stream();
    use tile_kernels::matmul;
    let mut rng = Rng::new(29);
    let mut over = Vec::new();
    for (m, n, k) in [(256, 256, 1024), (512, 256, 512), (384, 256, 96)] {
        let (a, b) = (rng.normals(m * k, 1.0), rng.normals(k * n, 1.0));
        // `a @ b` in f64, and the same `b` laid out as `w = b^T` for `x @ w^T`.
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for p in 0..k {
                let x = a[i * k + p];
                for j in 0..n {
                    want[i * n + j] += x * b[p * n + j];
                }
            }
        }
        let w: Vec<f64> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let ad = s.upload(&host::<f32>(&a, &[m, k])).unwrap();
        let bd = s.upload(&host::<f32>(&b, &[k, n])).unwrap();
        let wd = s.upload(&host::<f32>(&w, &[n, k])).unwrap();
        let zero = s.upload(&host::<f32>(&vec![0.0; n], &[n])).unwrap();
        on_every_path(&d, || {
            let path = format!("{:?}", d.target());
            for tile in matmul::matmul::KERNEL.candidates(&[tile::DType::F32], true) {
                let mut cd = s.upload(&poisoned::<f32>(&[m, n])).unwrap();
                matmul::matmul::run_with(&s, tile, &ad, &bd, &mut cd).unwrap();
                let mut yd = s.upload(&poisoned::<f32>(&[m, n])).unwrap();
                matmul::linear::run_with(&s, tile, &ad, &wd, &zero, &mut yd, 0).unwrap();
                for (what, out) in [("matmul", &cd), ("linear", &yd)] {
                    let e = rel_err(&values(&s.download(out).unwrap()), &want);
                    if e >= 3.6e-4 {
                        over.push(format!("{what} {m}x{n}x{k} {tile} ({path}): {e:.3e}"));
                    }
                }
            }
        });
    }
    assert!(over.is_empty(), "tf32 relative error 3.6e-4 or more: {over:#?}");
}

/// More tiles than the GPU holds blocks at once, so that each block of a
/// persistent grid (the warp-specialized `wgmma` variants, and the portable
/// ones with two tiles per persistent block) computes several, with its pipeline
/// running on from one tile into the next.
fn persistent_blocks_cover_every_tile(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(19);
    // 17 x 9 tiles of 128x256 (and 33 x 33 of 64x64); K ragged.
    let (m, n, k) = (2100, 2056, 72);
    on_every_path(&d, || {
        matmul_case::<bf16>(&s, &mut rng, m, n, k, bf16::TOL);
        // tf32 with a row-major b: `b^T a^T`, b read into registers from
        // rows stored interleaved.
        matmul_case::<f32>(&s, &mut rng, m, n, k, 2e-3);
        linear_tc_case::<f16>(&s, &mut rng, m, n, k, f16::TOL);
    });
    assert_launched_on_sm90a(&d, &["matmul_f32_128_256_32_wgmma", "matmul_f32_64_64_32_wgmma"]);
    // On the portable path, 64x64 tiles over about four rounds of
    // persistent blocks of two tiles, where a block may have their shared memory.
    if d.block_shared_bytes() > 2 * SM120_BLOCK_SHARED_BYTES {
        let launched = d.launched_variants();
        for entry in ["matmul_bf16_64_64_64_v_persistent", "matmul_bf16_64_64_64_v"] {
            assert!(launched.contains(&entry), "{entry} not among {launched:?}");
        }
    }
}

/// Persistent blocks of two tiles (portable path) take a grid of up to 8 rounds of
/// tiles; a longer one runs on plain blocks, which were faster there.
fn persistent_blocks_of_two_tiles_take_short_grids_and_plain_blocks_long_ones(d: Arc<Device>) {
    let s = d.stream();
    use tile_kernels::matmul;
    if d.block_shared_bytes() <= 2 * SM120_BLOCK_SHARED_BYTES {
        return;
    }
    d.use_arch_specific(false);
    let mut rng = Rng::new(41);
    // 64x64 tiles, one persistent two-tile block per SM: 1 round, then 4096 tiles
    // (over 8 rounds on up to 256 SMs).
    for (m, n, k, entry) in [
        (1024, 1000, 24, "matmul_bf16_64_64_64_v_persistent"),
        (4096, 4096, 16, "matmul_bf16_64_64_64_v"),
    ] {
        let a = host::<bf16>(&rng.normals(m * k, 1.0), &[m, k]);
        let b = host::<bf16>(&rng.normals(k * n, 1.0), &[k, n]);
        let mut want = poisoned::<bf16>(&[m, n]);
        matmul::matmul::launch::<bf16, 64, 64, 64, _>(&Cpu, tiles(m, n, 64, 64), &a, &b, &mut want).unwrap();
        let (ad, bd) = (s.upload(&a).unwrap(), s.upload(&b).unwrap());
        let mut cd = s.upload(&poisoned::<bf16>(&[m, n])).unwrap();
        let before = d.launched_variants();
        let tile = tile::Tuned {
            consts: &[64, 64, 64],
            clusters: false,
        };
        matmul::matmul::run_with(&s, tile, &ad, &bd, &mut cd).unwrap();
        let what = format!("matmul bf16 {m}x{n}x{k} tile 64x64x64");
        assert_close(&what, &values(&s.download(&cd).unwrap()), &values(&want), bf16::TOL);
        let launched: Vec<&str> = d
            .launched_variants()
            .into_iter()
            .filter(|e| !before.contains(e))
            .collect();
        assert_eq!(launched, [entry], "{what}");
    }
}

/// Blocks paired in clusters (the `wgmma` variants with f32 operands)
/// share the operand tile they load alike: with 3 tile rows,
/// `group_tiles` gives some pairs one column (its tile multicast), others
/// two (each loads its own), and an odd tile count leaves the last block
/// without a partner. Tiles split in two warpgroups, and taking turns.
/// `linear`'s f32 tiles are stored through TMA, panel by panel, clipped at
/// the ragged last row and column of tiles (outputs start poisoned).
fn clustered_blocks_share_tiles_of_a_column_or_load_their_own(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(31);
    // 3 x 5 tiles of 128x256 (3 x 10 of 128x128, 6 x 20 of 64x64).
    let (m, n, k) = (379, 1272, 200);
    matmul_case::<f32>(&s, &mut rng, m, n, k, 2e-3);
    long_k_case::<f32>(&s, &mut rng, (m, n, k), 2e-3);
    assert_launched_on_sm90a(
        &d,
        &[
            "matmul_f32_128_256_32_wgmma",
            "linear_f32_128_256_32_wgmma",
            "linear_f32_128_128_32_wgmma",
        ],
    );
}

/// K-loops far longer than the pipeline is deep, on a persistent grid with
/// several tiles per block: where two consumer warpgroups take turns
/// (the `wgmma` variants of one-warpgroup tiles), each skips the other's
/// stages, many phases of their mbarriers ahead. Against the f64 reference.
fn persistent_blocks_run_long_k_loops(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(29);
    // 14 x 14 tiles of 128x128 (27 x 27 of 64x64): more than the blocks
    // running; 16 K-steps of 64 (32 of 32), at most 6 stages.
    let (m, n, k) = (1700, 1672, 1000);
    long_k_case::<bf16>(&s, &mut rng, (m, n, k), bf16::TOL);
    long_k_case::<f32>(&s, &mut rng, (m, n, k), 2e-3);
    assert_launched_on_sm90a(&d, &["linear_bf16_128_128_64_wgmma", "linear_f32_64_256_32_wgmma"]);
}

/// `matmul::run_batched` on six 300x64 by 64x500 products (a wave of
/// 64x64 blocks on any GPU, so its tiles are timed) against the CPU.
fn tuned_batched_case<T: Num>(s: &Stream, rng: &mut Rng, tol: f64) {
    use tile_kernels::matmul;
    let (batch, m, k, n) = (6, 300, 64, 500);
    let a = host::<T>(&rng.normals(batch * m * k, 1.0), &[batch, m, k]);
    let b = host::<T>(&rng.normals(batch * k * n, 1.0), &[batch, k, n]);
    let mut cd = s.upload(&poisoned::<T>(&[batch, m, n])).unwrap();
    let tile = matmul::run_batched(s, &s.upload(&a).unwrap(), &s.upload(&b).unwrap(), &mut cd).unwrap();
    let mut want = poisoned::<T>(&[batch, m, n]);
    let grid = (tiles(m, n, 64, 64), batch as u32);
    matmul::batched_matmul::launch::<T, 64, 64, 32, _>(&Cpu, grid, &a, &b, &mut want).unwrap();
    let what = format!("tuned batched_matmul {}, {tile}", T::DTYPE);
    assert_close(&what, &values(&s.download(&cd).unwrap()), &values(&want), tol);
}

fn long_k_case<T: Num>(s: &Stream, rng: &mut Rng, (m, n, k): (usize, usize, usize), tol: f64) {
    use tile_kernels::matmul;
    let (x, w, b) = (rng.normals(m * k, 1.0), rng.normals(n * k, 0.3), rng.normals(n, 1.0));
    let want = linear_ref(&rounded::<T>(&x), &rounded::<T>(&w), &rounded::<T>(&b), m, n, k, false);
    let (xd, wd, bd) = (
        s.upload(&host::<T>(&x, &[m, k])).unwrap(),
        s.upload(&host::<T>(&w, &[n, k])).unwrap(),
        s.upload(&host::<T>(&b, &[n])).unwrap(),
    );
    for tile in matmul::linear::KERNEL.candidates(&[T::DTYPE], true) {
        let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
        matmul::linear::run_with(s, tile, &xd, &wd, &bd, &mut yd, 0).unwrap();
        let what = format!("linear {} {m}x{n}x{k} tile {tile}", T::DTYPE);
        assert_close(&what, &values(&s.download(&yd).unwrap()), &want, tol);
    }
}

fn linear_tc_case<T: Num>(s: &Stream, rng: &mut Rng, m: usize, n: usize, k: usize, tol: f64) {
    use tile_kernels::matmul;
    let x = host::<T>(&rng.normals(m * k, 1.0), &[m, k]);
    let w = host::<T>(&rng.normals(n * k, 0.3), &[n, k]);
    let b = host::<T>(&rng.normals(n, 1.0), &[n]);
    let r = host::<T>(&rng.normals(m * n, 1.0), &[m, n]);
    let (xd, wd, bd, rd) = (
        s.upload(&x).unwrap(),
        s.upload(&w).unwrap(),
        s.upload(&b).unwrap(),
        s.upload(&r).unwrap(),
    );
    let what = format!("{} {m}x{n}x{k}", T::DTYPE);
    let mut want = poisoned::<T>(&[m, n]);
    matmul::linear::launch::<T, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &x, &w, &b, &mut want, 1).unwrap();
    for tile in matmul::linear::KERNEL.candidates(&[T::DTYPE], true) {
        let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
        matmul::linear::run_with(s, tile, &xd, &wd, &bd, &mut yd, 1).unwrap();
        assert_close(
            &format!("linear+gelu {what} tile {tile}"),
            &values(&s.download(&yd).unwrap()),
            &values(&want),
            tol,
        );
    }
    for (bm, bn) in [(64, 64), (128, 128)] {
        let grid = tiles(m, n, bm, bn);
        let mut yd = s.upload(&poisoned::<T>(&[m, n])).unwrap();
        let mut want = poisoned::<T>(&[m, n]);
        matmul::linear_residual::launch_with(s, &[bm, bn, 32], grid, &xd, &wd, &bd, &rd, &mut yd).unwrap();
        matmul::linear_residual::launch::<T, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &x, &w, &b, &r, &mut want)
            .unwrap();
        assert_close(
            &format!("linear_residual {what} tile {bm}x{bn}"),
            &values(&s.download(&yd).unwrap()),
            &values(&want),
            tol,
        );
    }
    // Batched, with ragged batch members.
    let batch = 3;
    let a = host::<T>(&rng.normals(batch * m * k, 1.0), &[batch, m, k]);
    let bb = host::<T>(&rng.normals(batch * k * n, 1.0), &[batch, k, n]);
    let grid = (tiles(m, n, 64, 64), batch as u32);
    let mut cd = s.upload(&poisoned::<T>(&[batch, m, n])).unwrap();
    let mut want = poisoned::<T>(&[batch, m, n]);
    matmul::batched_matmul::launch::<T, 64, 64, 32, _>(
        s,
        grid,
        &s.upload(&a).unwrap(),
        &s.upload(&bb).unwrap(),
        &mut cd,
    )
    .unwrap();
    matmul::batched_matmul::launch::<T, 64, 64, 32, _>(&Cpu, grid, &a, &bb, &mut want).unwrap();
    assert_close(
        &format!("batched_matmul {what}"),
        &values(&s.download(&cd).unwrap()),
        &values(&want),
        tol,
    );
}

fn tensor_core_linear_and_batched_match_cpu_reference(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(18);
    on_every_path(&d, || {
        for (m, n, k) in MATMUL_SHAPES {
            linear_tc_case::<bf16>(&s, &mut rng, m, n, k, bf16::TOL);
            linear_tc_case::<f16>(&s, &mut rng, m, n, k, f16::TOL);
            linear_tc_case::<f32>(&s, &mut rng, m, n, k, 2e-3);
        }
    });
}

/// A linear layer whose output rows (and bias) are not 16-byte aligned, as
/// an LM head's 50257 columns: `x` and `w` are still copied 16 bytes at a
/// time (TMA for `wgmma` on Hopper, `cp.async` on the portable path) and
/// the rest is accessed element by element.
fn misaligned_outputs_keep_16_byte_copies_of_aligned_operands(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(23);
    on_every_path(&d, || {
        for (m, n, k) in [(130, 333, 264), (257, 1001, 72)] {
            linear_tc_case::<bf16>(&s, &mut rng, m, n, k, bf16::TOL);
            linear_tc_case::<f32>(&s, &mut rng, m, n, k, 2e-3);
        }
    });
    let launched = d.launched_variants();
    // The bf16 tile's blocks fit two to an SM: off sm_120 they run as the
    // two halves of a persistent block; the f32 tile's eight warps fill an SM alone.
    let mut expected = vec![
        "linear_bf16_128_128_64_vs",
        "linear_bf16_128_128_64_vs_persistent",
        "linear_f32_128_128_32_vs",
    ];
    if d.target() == tile::Target::Sm90a {
        expected.extend(["linear_bf16_128_128_64_wgmma_s", "linear_f32_128_128_32_wgmma_s"]);
    }
    for entry in expected {
        assert!(launched.contains(&entry), "{entry} not among {launched:?}");
    }
}

/// A matmul whose `b` rows are not 16 bytes apart, as an LM head's
/// `[768, 50257]` weights in `matmul` form: on Hopper the launcher copies
/// `b` into rows that are, for TMA, and stores `c` element by element.
fn misaligned_operand_rows_are_copied_for_tma(d: Arc<Device>) {
    let s = d.stream();
    let mut rng = Rng::new(31);
    for (m, n, k) in [(130, 1001, 72), (300, 517, 1000)] {
        matmul_case::<bf16>(&s, &mut rng, m, n, k, bf16::TOL);
        matmul_case::<f32>(&s, &mut rng, m, n, k, 2e-3);
    }
    assert_launched_on_sm90a(&d, &["matmul_bf16_128_128_64_wgmma_s", "matmul_f32_128_256_32_wgmma_s"]);
}

fn tuned_matmul_and_linear_pick_a_tile_and_remember_it(d: Arc<Device>) {
    use tile_kernels::matmul;
    let s = d.stream();
    let dir = std::env::temp_dir().join(format!("tile-tune-test-{}", std::process::id()));
    // SAFETY (test): set before the first tuned launch of this process reads it.
    unsafe { std::env::set_var("TILE_CACHE_DIR", &dir) };
    let mut rng = Rng::new(19);
    // Enough 64x64 blocks for a wave on any GPU, so every tile is timed.
    let (m, k, n) = (1000, 200, 1200);
    let a = host::<bf16>(&rng.normals(m * k, 1.0), &[m, k]);
    let b = host::<bf16>(&rng.normals(k * n, 1.0), &[k, n]);
    let mut cd = s.upload(&poisoned::<bf16>(&[m, n])).unwrap();
    let tile = matmul::run(&s, &s.upload(&a).unwrap(), &s.upload(&b).unwrap(), &mut cd).unwrap();
    assert!(
        matmul::matmul::KERNEL
            .candidates(&[tile::DType::BF16], true)
            .contains(&tile),
        "{tile}"
    );
    let mut want = poisoned::<bf16>(&[m, n]);
    matmul::matmul::launch::<bf16, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &a, &b, &mut want).unwrap();
    assert_close(
        "tuned matmul",
        &values(&s.download(&cd).unwrap()),
        &values(&want),
        bf16::TOL,
    );

    let w = host::<bf16>(&rng.normals(n * k, 0.3), &[n, k]);
    let bias = host::<bf16>(&rng.normals(n, 1.0), &[n]);
    let x = host::<bf16>(&rng.normals(m * k, 1.0), &[m, k]);
    let mut yd = s.upload(&poisoned::<bf16>(&[m, n])).unwrap();
    let (xd, wd, bd) = (s.upload(&x).unwrap(), s.upload(&w).unwrap(), s.upload(&bias).unwrap());
    let tile_linear = matmul::run_linear(&s, &xd, &wd, &bd, &mut yd, true).unwrap();
    // A second call reuses the cached choice.
    assert_eq!(
        matmul::run_linear(&s, &xd, &wd, &bd, &mut yd, true).unwrap(),
        tile_linear
    );
    let mut want = poisoned::<bf16>(&[m, n]);
    matmul::linear::launch::<bf16, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &x, &w, &bias, &mut want, 1).unwrap();
    assert_close(
        "tuned linear",
        &values(&s.download(&yd).unwrap()),
        &values(&want),
        bf16::TOL,
    );

    // f32: the paired tiles are candidates only where blocks can pair (sm_90a).
    let a = host::<f32>(&rng.normals(m * k, 1.0), &[m, k]);
    let b = host::<f32>(&rng.normals(k * n, 1.0), &[k, n]);
    let mut want = poisoned::<f32>(&[m, n]);
    matmul::matmul::launch::<f32, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &a, &b, &mut want).unwrap();
    let (ad, bd) = (s.upload(&a).unwrap(), s.upload(&b).unwrap());
    on_every_path(&d, || {
        let mut cd = s.upload(&poisoned::<f32>(&[m, n])).unwrap();
        let tile = matmul::run(&s, &ad, &bd, &mut cd).unwrap();
        let target = d.target();
        assert!(target == tile::Target::Sm90a || !tile.clusters, "{tile} on {target:?}");
        let what = format!("tuned f32 matmul, {tile} on {target:?}");
        assert_close(&what, &values(&s.download(&cd).unwrap()), &values(&want), 2e-3);
    });

    // Batched: the batch counts toward a wave and is part of the key.
    tuned_batched_case::<bf16>(&s, &mut rng, bf16::TOL);
    tuned_batched_case::<f32>(&s, &mut rng, 2e-3);

    // A projection with the residual after it, at a GPT layer's size: under
    // one wave even of the smallest tile, which is then used untimed.
    let (m, k, n) = (100, 128, 384);
    let x = host::<f32>(&rng.normals(m * k, 1.0), &[m, k]);
    let w = host::<f32>(&rng.normals(n * k, 0.3), &[n, k]);
    let bias = host::<f32>(&rng.normals(n, 1.0), &[n]);
    let residual = host::<f32>(&rng.normals(m * n, 1.0), &[m, n]);
    let mut want = poisoned::<f32>(&[m, n]);
    let grid = tiles(m, n, 64, 64);
    matmul::linear_residual::launch::<f32, 64, 64, 32, _>(&Cpu, grid, &x, &w, &bias, &residual, &mut want).unwrap();
    let (xd, wd, bd) = (s.upload(&x).unwrap(), s.upload(&w).unwrap(), s.upload(&bias).unwrap());
    let rd = s.upload(&residual).unwrap();
    let mut yd = s.upload(&poisoned::<f32>(&[m, n])).unwrap();
    let tile_residual = matmul::run_linear_residual(&s, (&xd, &wd, &bd), &rd, &mut yd).unwrap();
    let smallest = tile::Tuned {
        consts: &[64, 64, 32],
        clusters: false,
    };
    assert_eq!(tile_residual, matmul::LinearTile::TensorCores(smallest));
    let what = "untimed f32 linear_residual";
    assert_close(what, &values(&s.download(&yd).unwrap()), &values(&want), 2e-3);

    let cached = std::fs::read_to_string(dir.join("autotune.tsv")).unwrap();
    // Keys are the kernel, dtype, size classes, GPU and target; values the tile.
    let remembered = |key: &str, tile: &dyn std::fmt::Display| {
        cached
            .lines()
            .any(|l| l.starts_with(key) && l.ends_with(&format!("\t{tile}")))
    };
    assert!(
        remembered("tile_kernels::matmul::matmul|bf16|1024x224x1280|", &tile)
            && remembered("tile_kernels::matmul::linear|bf16|1024x224x1280|", &tile_linear)
            && cached.contains("tile_kernels::matmul::batched_matmul|bf16|6x320x64x512|")
            && cached.contains("tile_kernels::matmul::batched_matmul|f32|6x320x64x512|")
            && !cached.contains("tile_kernels::matmul::linear_residual|"),
        "{cached}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn main() -> ExitCode {
    harness::run([
        Test::gpu("softmax_matches_cpu_reference", softmax_matches_cpu_reference),
        Test::gpu("cumsum_matches_cpu_reference", cumsum_matches_cpu_reference),
        Test::gpu("argmax_matches_f64_reference", argmax_matches_f64_reference),
        Test::gpu("topk_matches_f64_reference", topk_matches_f64_reference),
        Test::gpu("gumbel_max_matches_cpu_reference", gumbel_max_matches_cpu_reference),
        Test::gpu(
            "layer_norm_and_rms_norm_match_cpu_reference",
            layer_norm_and_rms_norm_match_cpu_reference,
        ),
        Test::gpu(
            "elementwise_kernels_match_cpu_reference",
            elementwise_kernels_match_cpu_reference,
        ),
        Test::gpu("embedding_matches_cpu_reference", embedding_matches_cpu_reference),
        Test::gpu(
            "bad_arguments_are_typed_errors_not_launches",
            bad_arguments_are_typed_errors_not_launches,
        ),
        Test::gpu("linear_matches_cpu_reference", linear_matches_cpu_reference),
        Test::gpu("gemv_matches_f64_reference", gemv_matches_f64_reference),
        Test::gpu("split_k_matches_f64_reference", split_k_matches_f64_reference),
        Test::gpu("attention_matches_f64_reference", attention_matches_f64_reference),
        Test::gpu(
            "matmul_on_tensor_cores_matches_cpu_reference",
            matmul_on_tensor_cores_matches_cpu_reference,
        ),
        Test::gpu(
            "tf32_products_round_their_operands_like_cublas",
            tf32_products_round_their_operands_like_cublas,
        ),
        Test::gpu("persistent_blocks_cover_every_tile", persistent_blocks_cover_every_tile),
        Test::gpu(
            "persistent_blocks_of_two_tiles_take_short_grids_and_plain_blocks_long_ones",
            persistent_blocks_of_two_tiles_take_short_grids_and_plain_blocks_long_ones,
        ),
        Test::gpu(
            "clustered_blocks_share_tiles_of_a_column_or_load_their_own",
            clustered_blocks_share_tiles_of_a_column_or_load_their_own,
        ),
        Test::gpu("persistent_blocks_run_long_k_loops", persistent_blocks_run_long_k_loops),
        Test::gpu(
            "tensor_core_linear_and_batched_match_cpu_reference",
            tensor_core_linear_and_batched_match_cpu_reference,
        ),
        Test::gpu(
            "misaligned_outputs_keep_16_byte_copies_of_aligned_operands",
            misaligned_outputs_keep_16_byte_copies_of_aligned_operands,
        ),
        Test::gpu(
            "misaligned_operand_rows_are_copied_for_tma",
            misaligned_operand_rows_are_copied_for_tma,
        ),
        Test::gpu(
            "tuned_matmul_and_linear_pick_a_tile_and_remember_it",
            tuned_matmul_and_linear_pick_a_tile_and_remember_it,
        ),
    ])
}
