//! The CPU reference version of every library kernel against plain f64 loops,
//! on random inputs with ragged shapes.

mod common;
use common::*;
use tile::{Cpu, HostTensor, bf16};
use tile_kernels::{argmax, attention, elementwise, embedding, linear, norm, scan, softmax, topk};

const SHAPES: [(usize, usize); 6] = [(1, 1), (1, 1000), (3, 700), (4, 768), (2, 1024), (5, 33)];

/// Blocks for `rows` rows of the whole-row kernels at BLOCK = 1024.
fn grid_rows(rows: usize) -> u32 {
    rows.div_ceil(softmax::rows_per_block(1024)) as u32
}

fn cdiv(a: usize, b: usize) -> u32 {
    a.div_ceil(b) as u32
}

#[test]
fn softmax_single_pass_and_online() {
    let mut rng = Rng::new(1);
    for (rows, cols) in SHAPES {
        let x = rng.normals(rows * cols, 3.0);
        let want = softmax_ref(&x, cols);
        let xt = host::<f32>(&x, &[rows, cols]);
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        softmax::softmax::launch::<f32, 1024, _>(&Cpu, grid_rows(rows), &xt, &mut y).unwrap();
        assert_close("softmax", &values(&y), &want, 1e-5);
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        softmax::softmax_online::launch::<f32, 1024, _>(&Cpu, rows as u32, &xt, &mut y).unwrap();
        assert_close("softmax_online", &values(&y), &want, 1e-5);
    }
}

#[test]
fn softmax_online_handles_rows_longer_than_a_tile() {
    let mut rng = Rng::new(2);
    let (rows, cols) = (2, 5000);
    let x = rng.normals(rows * cols, 2.0);
    let want = softmax_ref(&rounded::<bf16>(&x), cols);
    let xt = host::<bf16>(&x, &[rows, cols]);
    let mut y = HostTensor::full(&[rows, cols], bf16::NAN);
    softmax::softmax_online::launch::<bf16, 1024, _>(&Cpu, rows as u32, &xt, &mut y).unwrap();
    assert_close("softmax_online bf16", &values(&y), &want, bf16::TOL);
}

#[test]
fn layer_norm_and_rms_norm() {
    let mut rng = Rng::new(3);
    for (rows, cols) in SHAPES {
        let x = rng.normals(rows * cols, 2.0);
        let w = rng.normals(cols, 1.0);
        let b = rng.normals(cols, 1.0);
        let (xt, wt, bt) = (
            host::<f32>(&x, &[rows, cols]),
            host::<f32>(&w, &[cols]),
            host::<f32>(&b, &[cols]),
        );
        for shift in [0, 1] {
            let mut y = HostTensor::full(&[rows, cols], f32::NAN);
            norm::layer_norm::launch_with(&Cpu, &[1024, shift], grid_rows(rows), &xt, &wt, &bt, &mut y, 1e-5).unwrap();
            let want = layer_norm_ref(&x, &w, &b, cols, 1e-5);
            assert_close(&format!("layer_norm shift {shift}"), &values(&y), &want, 1e-5);
        }
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        norm::rms_norm::launch::<f32, 1024, _>(&Cpu, grid_rows(rows), &xt, &wt, &mut y, 1e-5).unwrap();
        assert_close("rms_norm", &values(&y), &rms_norm_ref(&x, &w, cols, 1e-5), 1e-5);
    }
}

#[test]
fn elementwise_kernels() {
    let mut rng = Rng::new(4);
    for n in [1, 5, 1024, 3001] {
        let x = rng.normals(n, 2.0);
        let y = rng.normals(n, 2.0);
        let (xt, yt) = (host::<f32>(&x, &[n]), host::<f32>(&y, &[n]));
        let grid = cdiv(n, 1024);
        let mut out = HostTensor::full(&[n], f32::NAN);
        elementwise::add::launch::<f32, 1024, _>(&Cpu, grid, &xt, &yt, &mut out).unwrap();
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        assert_close("add", &values(&out), &want, 1e-6);

        elementwise::scale::launch::<f32, 1024, _>(&Cpu, grid, 0.5, &xt, &mut out).unwrap();
        let want: Vec<f64> = x.iter().map(|a| 0.5 * a).collect();
        assert_close("scale", &values(&out), &want, 1e-6);

        elementwise::gelu::launch::<f32, 1024, _>(&Cpu, grid, &xt, &mut out).unwrap();
        let want: Vec<f64> = x.iter().map(|&a| gelu_ref(a)).collect();
        // 1 + tanh(..) cancels for negative inputs: f32 keeps about 4 digits there.
        assert_close("gelu", &values(&out), &want, 5e-4);

        let mut acc = xt.clone();
        elementwise::residual_add::launch::<f32, 1024, _>(&Cpu, grid, &mut acc, &yt).unwrap();
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        assert_close("residual_add", &values(&acc), &want, 1e-6);
    }
}

#[test]
fn embedding_gathers_token_and_position_rows() {
    let mut rng = Rng::new(5);
    let (vocab, ctx, c, b, t) = (50, 16, 300, 2, 7);
    let wte = rng.normals(vocab * c, 1.0);
    let wpe = rng.normals(ctx * c, 1.0);
    let tokens: Vec<i32> = (0..b * t).map(|_| rng.below(vocab) as i32).collect();
    // Ragged: the second sequence starts at position 5.
    let positions: Vec<i32> = (0..b * t).map(|i| (i % t + 5 * (i / t)) as i32).collect();
    let tt = HostTensor::from_vec(tokens.clone(), &[b * t]).unwrap();
    let pt = HostTensor::from_vec(positions.clone(), &[b * t]).unwrap();
    let (wte_t, wpe_t) = (host::<f32>(&wte, &[vocab, c]), host::<f32>(&wpe, &[ctx, c]));
    let mut out = HostTensor::full(&[b * t, c], f32::NAN);
    embedding::run(&Cpu, (&tt, &pt), (&wte_t, &wpe_t), &mut out).unwrap();
    let want = embedding_ref(&tokens, &positions, &wte, &wpe, c);
    assert_close("embedding", &values(&out), &want, 1e-6);

    // Gathering rows picks them in the order asked, repeats included.
    let rows = HostTensor::from_vec(vec![3, 0, 3, 13], &[4]).unwrap();
    let mut picked = HostTensor::full(&[4, c], f32::NAN);
    embedding::run_gather_rows(&Cpu, &rows, &out, &mut picked).unwrap();
    let row = |r: usize| want[r * c..(r + 1) * c].to_vec();
    assert_close(
        "gather_rows",
        &values(&picked),
        &[row(3), row(0), row(3), row(13)].concat(),
        1e-6,
    );

    // Disagreeing shapes are typed errors: the kernel's declared shapes.
    let short = HostTensor::from_vec(vec![0; 3], &[3]).unwrap();
    let e = embedding::run(&Cpu, (&tt, &short), (&wte_t, &wpe_t), &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            tile::Error::ShapeContract {
                param: "positions",
                axis: 0,
                found: 3,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn cpu_launch_rejects_wrong_ranks_and_empty_grids() {
    let x = HostTensor::<f32>::zeros(&[4]);
    let mut y = HostTensor::<f32>::zeros(&[4]);
    let err = softmax::softmax::launch::<f32, 32, _>(&Cpu, 1, &x, &mut y).unwrap_err();
    assert!(
        matches!(
            err,
            tile::Error::Rank {
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{err}"
    );
    let x = HostTensor::<f32>::full(&[1, 4], 1.0);
    let mut y = HostTensor::<f32>::full(&[1, 4], 7.0);
    // A grid without blocks (a zero-sized problem) runs nothing.
    softmax::softmax::launch::<f32, 32, _>(&Cpu, 0, &x, &mut y).unwrap();
    assert_eq!(y.to_vec(), [7.0; 4]);
    let err = softmax::softmax::launch::<f32, 32, _>(&Cpu, (1, 70000), &x, &mut y).unwrap_err();
    assert!(matches!(err, tile::Error::Grid { .. }), "{err}");
}

/// Arguments that the generated launchers cannot pass (they fix the
/// types), given to the backend's launch or to the CPU version directly:
/// typed errors, nothing run.
#[test]
fn arguments_past_the_launchers_are_checked() {
    use tile::{Arg, Backend, DType};
    let kernel = &softmax::softmax::KERNEL;
    let x = HostTensor::<f32>::zeros(&[1, 4]);
    let mut y = HostTensor::<f32>::full(&[1, 4], f32::NAN);
    let mut ints = HostTensor::<i32>::zeros(&[1, 4]);
    let (f32s, block) = ([DType::F32], [32]);
    let run = |args: &mut [tile::HostArg<'_>]| Cpu.launch_kernel(kernel, &f32s, &block, 1.into(), args).unwrap_err();
    let err = run(&mut [Arg::Tensor(&x)]);
    assert_eq!(err.to_string(), "softmax: takes 2 arguments, got 1");
    let err = run(&mut [Arg::Tensor(&x), Arg::Tensor(&x)]);
    assert_eq!(err.to_string(), "softmax: argument `y` is not a writable tensor");
    let err = run(&mut [Arg::Tensor(&x), Arg::TensorMut(&mut ints)]);
    assert_eq!(
        err.to_string(),
        "softmax: tensor `y` holds i32 where the kernel reads f32"
    );
    let err = run(&mut [Arg::F32(1.0), Arg::TensorMut(&mut y)]);
    assert_eq!(err.to_string(), "softmax: argument `x` is not a read-only tensor");
    // The CPU version itself, unchecked: a mismatch is still an error.
    let err = (kernel.cpu)(
        &f32s,
        &block,
        1.into(),
        &mut [Arg::Tensor(&x), Arg::TensorMut(&mut ints)],
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "softmax: argument `y` is not a writable tensor of f32");
    assert!(y.to_vec().iter().all(|v| v.is_nan()), "nothing ran");
    // The right arguments run.
    Cpu.launch_kernel(
        kernel,
        &f32s,
        &block,
        1.into(),
        &mut [Arg::Tensor(&x), Arg::TensorMut(&mut y)],
    )
    .unwrap();
    assert_eq!(y.to_vec(), [0.25; 4]);
}

/// The library's host wrappers, generic over the backend, on the CPU:
/// each picks its specialization with `launch_with` and checks the shapes.
#[test]
fn library_wrappers_run_on_the_cpu() {
    use tile_kernels::matmul;
    let mut rng = Rng::new(10);
    for (rows, cols) in [(3, 100), (2, 5000)] {
        let x = rng.normals(rows * cols, 2.0);
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        softmax::run(&Cpu, &host::<f32>(&x, &[rows, cols]), &mut y).unwrap();
        assert_close("softmax::run", &values(&y), &softmax_ref(&x, cols), 1e-5);
    }
    let (rows, cols) = (5, 300);
    let (x, w, b) = (
        rng.normals(rows * cols, 2.0),
        rng.normals(cols, 1.0),
        rng.normals(cols, 1.0),
    );
    let (xt, wt, bt) = (
        host::<f32>(&x, &[rows, cols]),
        host::<f32>(&w, &[cols]),
        host::<f32>(&b, &[cols]),
    );
    let mut y = HostTensor::full(&[rows, cols], f32::NAN);
    norm::run_layer_norm(&Cpu, &xt, &wt, &bt, &mut y, 1e-5).unwrap();
    assert_close(
        "run_layer_norm",
        &values(&y),
        &layer_norm_ref(&x, &w, &b, cols, 1e-5),
        1e-5,
    );
    norm::run_rms_norm(&Cpu, &xt, &wt, &mut y, 1e-5).unwrap();
    assert_close("run_rms_norm", &values(&y), &rms_norm_ref(&x, &w, cols, 1e-5), 1e-5);
    let err = norm::run_rms_norm(&Cpu, &xt, &bt.clone().reshape(&[1, cols]).unwrap(), &mut y, 1e-5).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rms_norm: tensor `weight` has rank 2 but the kernel indexes it with 1 coordinates"
    );
    let long = HostTensor::<f32>::zeros(&[cols + 1]);
    let err = norm::run_layer_norm(&Cpu, &xt, &wt, &long, &mut y, 1e-5).unwrap_err();
    assert_eq!(
        err.to_string(),
        "layer_norm: tensor `bias` is declared [N], so its dimension 0 must be 300 (`N` is `x`'s dimension 1), but it is 301"
    );
    let wide = HostTensor::<f32>::zeros(&[1, 9000]);
    let err = norm::run_rms_norm(&Cpu, &wide, &HostTensor::zeros(&[9000]), &mut wide.clone(), 1e-5);
    assert!(matches!(err, Err(tile::Error::NotBuilt { .. })), "{err:?}");

    let (m, n, k) = (70, 45, 33);
    let (a, bm) = (rng.normals(m * k, 1.0), rng.normals(k * n, 1.0));
    let mut c = HostTensor::full(&[m, n], f32::NAN);
    let tile = matmul::run(&Cpu, &host::<f32>(&a, &[m, k]), &host::<f32>(&bm, &[k, n]), &mut c).unwrap();
    let first = tile::Tuned {
        consts: &[64, 64, 32],
        clusters: false,
    };
    assert_eq!(tile, first, "the CPU runs the first configuration");
    // Operands that disagree with the declared shapes are an error before
    // anything is tuned or run: nothing is written.
    let mut poisoned = HostTensor::full(&[m, n], f32::NAN);
    let short_k = host::<f32>(&bm[..(k - 1) * n], &[k - 1, n]);
    let e = matmul::run(&Cpu, &host::<f32>(&a, &[m, k]), &short_k, &mut poisoned).unwrap_err();
    assert_eq!(
        e.to_string(),
        "matmul: tensor `b` is declared [K, N], so its dimension 0 must be 33 (`K` is `a`'s dimension 1), but it is 32"
    );
    assert!(poisoned.to_vec().iter().all(|v| v.is_nan()));
    let want = linear_ref(&a, &transpose(&bm, k, n), &vec![0.0; n], m, n, k, false);
    assert_close("matmul::run", &values(&c), &want, 1e-6);

    let (batch, t, heads, d) = (2, 37, 2, 64);
    let qkv = rng.normals(batch * t * 3 * heads * d, 1.0);
    let mut out = HostTensor::full(&[batch, t, heads * d], f32::NAN);
    attention::run(&Cpu, &host::<f32>(&qkv, &[batch, t, 3 * heads * d]), &mut out, heads).unwrap();
    let want = attention_ref(&qkv, batch, t, heads * d, heads);
    assert_close("attention::run", &values(&out), &want, 1e-5);
}

#[test]
fn linear_layer_with_and_without_gelu() {
    let mut rng = Rng::new(6);
    for (m, n, k) in [(1, 1, 1), (5, 70, 33), (16, 64, 8), (37, 130, 100)] {
        let x = rng.normals(m * k, 1.0);
        let w = rng.normals(n * k, 0.3);
        let b = rng.normals(n, 1.0);
        let (xt, wt, bt) = (
            host::<f32>(&x, &[m, k]),
            host::<f32>(&w, &[n, k]),
            host::<f32>(&b, &[n]),
        );
        for gelu in [0, 1] {
            let mut y = HostTensor::full(&[m, n], f32::NAN);
            linear::linear_ffma::launch::<f32, 16, 64, 8, _>(&Cpu, linear::grid(m, n), &xt, &wt, &bt, &mut y, gelu)
                .unwrap();
            let want = linear_ref(&x, &w, &b, m, n, k, gelu == 1);
            assert_close(&format!("linear {m}x{n}x{k} gelu={gelu}"), &values(&y), &want, 1e-5);
        }
    }
}

/// The few-row linear layers, every configuration, with and without a
/// LayerNorm in the prologue, through the tuned entry points too (which
/// run the first configuration here).
#[test]
fn gemv_every_configuration_matches_f64() {
    use tile_kernels::{gemv, matmul};
    let mut rng = Rng::new(29);
    for (m, n, k) in [(1, 1, 1), (3, 77, 1030), (16, 9, 300)] {
        let (x, w, b, r) = (
            rng.normals(m * k, 1.0),
            rng.normals(n * k, 0.3),
            rng.normals(n, 1.0),
            rng.normals(m * n, 1.0),
        );
        let (xt, wt, bt, rt) = (
            host::<f32>(&x, &[m, k]),
            host::<f32>(&w, &[n, k]),
            host::<f32>(&b, &[n]),
            host::<f32>(&r, &[m, n]),
        );
        for tile in gemv::gemv::KERNEL.candidates(&[tile::DType::F32], false) {
            for gelu in [0, 1] {
                let mut y = HostTensor::full(&[m, n], f32::NAN);
                gemv::gemv::run_with(&Cpu, tile, &xt, &wt, &bt, &mut y, gelu).unwrap();
                let want = linear_ref(&x, &w, &b, m, n, k, gelu == 1);
                assert_close(
                    &format!("gemv {m}x{n}x{k} gelu={gelu} {tile}"),
                    &values(&y),
                    &want,
                    1e-5,
                );
            }
            let mut y = HostTensor::full(&[m, n], f32::NAN);
            gemv::gemv_residual::run_with(&Cpu, tile, &xt, &wt, &bt, &rt, &mut y).unwrap();
            let want: Vec<f64> = (linear_ref(&x, &w, &b, m, n, k, false).iter().zip(&r))
                .map(|(y, r)| y + r)
                .collect();
            assert_close(&format!("gemv_residual {m}x{n}x{k} {tile}"), &values(&y), &want, 1e-5);
        }
        let mut y = HostTensor::full(&[m, n], f32::NAN);
        matmul::run_linear(&Cpu, &xt, &wt, &bt, &mut y, true).unwrap();
        let want = linear_ref(&x, &w, &b, m, n, k, true);
        assert_close(&format!("run_linear {m}x{n}x{k}"), &values(&y), &want, 1e-5);
        // With a LayerNorm in the prologue, on rows far from 0.
        let (ln_w, ln_b) = (rng.normals(k, 1.0), rng.normals(k, 1.0));
        let xo = rounded::<f32>(&x.iter().map(|v| v + 1e4).collect::<Vec<_>>());
        let h = layer_norm_ref(&xo, &ln_w, &ln_b, k, 1e-5);
        let (xot, lwt, lbt) = (
            host::<f32>(&xo, &[m, k]),
            host::<f32>(&ln_w, &[k]),
            host::<f32>(&ln_b, &[k]),
        );
        let fold = gemv::NormFold::new(&Cpu, (&lwt, &lbt), (&wt, &bt)).unwrap();
        let (scale, shift) = (&fold.scale, &fold.shift);
        for tile in gemv::gemv_layer_norm::KERNEL.candidates(&[tile::DType::F32], false) {
            let mut y = HostTensor::full(&[m, n], f32::NAN);
            gemv::gemv_layer_norm::run_with(&Cpu, tile, &xot, &lwt, &wt, scale, shift, &mut y, 1, 1e-5).unwrap();
            let want = linear_ref(&h, &w, &b, m, n, k, true);
            assert_close(&format!("gemv_layer_norm {m}x{n}x{k} {tile}"), &values(&y), &want, 1e-5);
        }
        let mut y = HostTensor::full(&[m, n], f32::NAN);
        let mut normed = HostTensor::zeros(&[m, k]);
        matmul::run_layer_norm_linear(
            &Cpu,
            (&xot, &lwt, &lbt, 1e-5),
            (&wt, &bt, &fold),
            &mut y,
            false,
            &mut normed,
        )
        .unwrap();
        let want = linear_ref(&h, &w, &b, m, n, k, false);
        assert_close(&format!("run_layer_norm_linear {m}x{n}x{k}"), &values(&y), &want, 1e-5);
    }
}

/// `gemv` and `gemv_residual` on bf16 operands: every configuration built
/// for 16-bit types (the one-step tiles with per-step sums among them),
/// over ragged K of one and two steps of 2,048, against the f64 reference
/// on the operands as bf16 holds them.
#[test]
fn gemv_16_bit_configurations_match_f64() {
    use tile_kernels::gemv;
    let mut rng = Rng::new(31);
    for (m, n, k) in [(1, 77, 1030), (3, 9, 2100)] {
        let x = rounded::<bf16>(&rng.normals(m * k, 1.0));
        let w = rounded::<bf16>(&rng.normals(n * k, 0.3));
        let b = rounded::<bf16>(&rng.normals(n, 1.0));
        let r = rounded::<bf16>(&rng.normals(m * n, 1.0));
        let (xt, wt, bt, rt) = (
            host::<bf16>(&x, &[m, k]),
            host::<bf16>(&w, &[n, k]),
            host::<bf16>(&b, &[n]),
            host::<bf16>(&r, &[m, n]),
        );
        let plain = linear_ref(&x, &w, &b, m, n, k, false);
        let with_residual: Vec<f64> = plain.iter().zip(&r).map(|(y, r)| y + r).collect();
        for tile in gemv::gemv::KERNEL.candidates(&[tile::DType::BF16], false) {
            let mut y = HostTensor::full(&[m, n], bf16::NAN);
            gemv::gemv::run_with(&Cpu, tile, &xt, &wt, &bt, &mut y, 0).unwrap();
            assert_close(&format!("gemv bf16 {m}x{n}x{k} {tile}"), &values(&y), &plain, bf16::TOL);
            let mut y = HostTensor::full(&[m, n], bf16::NAN);
            gemv::gemv_residual::run_with(&Cpu, tile, &xt, &wt, &bt, &rt, &mut y).unwrap();
            let what = format!("gemv_residual bf16 {m}x{n}x{k} {tile}");
            assert_close(&what, &values(&y), &with_residual, bf16::TOL);
        }
    }
}

/// The tensor cores' few-row linears split along K over a cluster: every
/// configuration (empty splits included: K of one step), with and
/// without GELU and with the residual, against the f64 reference on the
/// operands as bf16 holds them (the CPU versions multiply in f32, as
/// the tensor cores do with bf16 operands).
#[test]
fn split_k_every_configuration_matches_f64() {
    use tile_kernels::split_k;
    let mut rng = Rng::new(31);
    for (m, n, k) in [(1, 1, 1), (3, 77, 1030), (16, 130, 300), (5, 9, 64)] {
        let x = rounded::<bf16>(&rng.normals(m * k, 1.0));
        let w = rounded::<bf16>(&rng.normals(n * k, 0.3));
        let b = rounded::<bf16>(&rng.normals(n, 1.0));
        let r = rounded::<bf16>(&rng.normals(m * n, 1.0));
        let (xt, wt, bt, rt) = (
            host::<bf16>(&x, &[m, k]),
            host::<bf16>(&w, &[n, k]),
            host::<bf16>(&b, &[n]),
            host::<bf16>(&r, &[m, n]),
        );
        for tile in split_k::linear_split_k::KERNEL.candidates(&[tile::DType::BF16], false) {
            for gelu in [0, 1] {
                let mut y = HostTensor::full(&[m, n], bf16::NAN);
                split_k::linear_split_k::run_with(&Cpu, tile, &xt, &wt, &bt, &mut y, gelu).unwrap();
                let want = linear_ref(&x, &w, &b, m, n, k, gelu == 1);
                let what = format!("linear_split_k {m}x{n}x{k} gelu={gelu} {tile}");
                assert_close(&what, &values(&y), &want, bf16::TOL);
            }
            let mut y = HostTensor::full(&[m, n], bf16::NAN);
            split_k::linear_split_k_residual::run_with(&Cpu, tile, &xt, &wt, &bt, &rt, &mut y).unwrap();
            let want: Vec<f64> = (linear_ref(&x, &w, &b, m, n, k, false).iter().zip(&r))
                .map(|(y, r)| y + r)
                .collect();
            let what = format!("linear_split_k_residual {m}x{n}x{k} {tile}");
            assert_close(&what, &values(&y), &want, bf16::TOL);
        }
    }
}

#[test]
fn ieee_linear_and_attention_match_the_f64_references() {
    let mut rng = Rng::new(8);
    for (m, n, k) in [(1, 1, 1), (5, 70, 33), (37, 130, 100)] {
        let (x, w, b, r) = (
            rng.normals(m * k, 1.0),
            rng.normals(n * k, 0.3),
            rng.normals(n, 1.0),
            rng.normals(m * n, 1.0),
        );
        let mut y = HostTensor::full(&[m, n], f32::NAN);
        let ops = (
            &host::<f32>(&x, &[m, k]),
            &host::<f32>(&w, &[n, k]),
            &host::<f32>(&b, &[n]),
        );
        linear::run_residual(&Cpu, ops, &host::<f32>(&r, &[m, n]), &mut y).unwrap();
        let want: Vec<f64> = (linear_ref(&x, &w, &b, m, n, k, false).iter().zip(&r))
            .map(|(y, r)| y + r)
            .collect();
        assert_close(&format!("linear + residual {m}x{n}x{k}"), &values(&y), &want, 1e-5);
    }
    for (batch, t, heads, d) in [(1, 1, 1, 32), (2, 37, 4, 32), (1, 70, 2, 64), (1, 45, 1, 128)] {
        let c = heads * d;
        let qkv = rng.normals(batch * t * 3 * c, 1.0);
        let mut out = HostTensor::full(&[batch, t, c], f32::NAN);
        attention::run_ieee(&Cpu, &host::<f32>(&qkv, &[batch, t, 3 * c]), &mut out, heads).unwrap();
        let want = attention_ref(&qkv, batch, t, c, heads);
        assert_close(
            &format!("attention in IEEE f32 {batch}x{t}x{heads}x{d}"),
            &values(&out),
            &want,
            1e-5,
        );
    }
}

#[test]
fn causal_attention_matches_softmax_attention() {
    let mut rng = Rng::new(7);
    for (batch, t, heads, d) in [
        (1, 1, 1, 32),
        (2, 37, 4, 32),
        (1, 70, 2, 64),
        (1, 200, 1, 64),
        (1, 150, 2, 128),
    ] {
        let c = heads * d;
        let qkv = rng.normals(batch * t * 3 * c, 1.0);
        let qt = host::<f32>(&qkv, &[batch, t, 3 * c]);
        let want = attention_ref(&qkv, batch, t, c, heads);
        let (grid, h, scale) = (
            attention::grid(batch, t, heads, attention::queries_per_block(d)),
            heads as i32,
            1.0 / (d as f32).sqrt(),
        );
        // Every step size built for f32 (64 keys with heads of 64 or 128
        // is not), the grid's order in groups of 1, 2 and 3 query blocks.
        let step_sizes = [32, 64].into_iter().filter(|&bk| bk == 32 || d == 32);
        for (bk, group) in step_sizes.flat_map(|bk| [(bk, 1), (bk, 2), (bk, 3)]) {
            let mut out = HostTensor::full(&[batch, t, c], f32::NAN);
            let consts = [attention::queries_per_block(d), bk, d];
            attention::causal_attention::launch_with(&Cpu, &consts, grid, &qt, &mut out, h, scale, group).unwrap();
            let what = format!("attention b={batch} t={t} h={heads} d={d} keys per step {bk} group {group}");
            assert_close(&what, &values(&out), &want, 1e-5);
        }
    }
}

#[test]
fn attention_shapes_are_checked() {
    assert_eq!(attention::sizes(&[2, 10, 384], &[2, 10, 128], 4).unwrap(), (2, 10, 32));
    let err = |qkv: &[usize], out: &[usize], heads| attention::sizes(qkv, out, heads).unwrap_err().to_string();
    assert_eq!(
        err(&[2, 10, 384], &[2, 9, 128], 4),
        "out must be [2, 10, 128] (attention over qkv: [B, L, 3C] = [2, 10, 384]), got [2, 9, 128]"
    );
    assert_eq!(
        err(&[2, 10, 385], &[2, 10, 128], 4),
        "qkv must be [2, 10, 384] (attention over qkv: [B, L, 3C] = [2, 10, 385]), got [2, 10, 385]"
    );
    assert_eq!(
        err(&[10, 384], &[10, 128], 4),
        "qkv must have rank 3, got shape [10, 384]"
    );
    assert_eq!(
        err(&[2, 10, 384], &[2, 10, 128], 8),
        "attention takes heads of 32, 64 or 128 columns: C = 128 in 8 heads"
    );
    assert_eq!(
        err(&[2, 10, 384], &[2, 10, 128], 0),
        "attention takes heads of 32, 64 or 128 columns: C = 128 in 0 heads"
    );
}

#[test]
fn matmul_on_the_tensor_core_path_matches_f64() {
    use tile_kernels::matmul;
    let mut rng = Rng::new(8);
    for (m, n, k) in [(1, 1, 1), (70, 45, 33), (128, 64, 96)] {
        let a = rng.normals(m * k, 1.0);
        let b = rng.normals(k * n, 1.0);
        let want = linear_ref(&a, &transpose(&b, k, n), &vec![0.0; n], m, n, k, false);
        let (at, bt) = (host::<f32>(&a, &[m, k]), host::<f32>(&b, &[k, n]));
        let mut c = HostTensor::full(&[m, n], f32::NAN);
        matmul::matmul::launch::<f32, 64, 64, 32, _>(&Cpu, tiles(m, n, 64, 64), &at, &bt, &mut c).unwrap();
        assert_close(&format!("matmul {m}x{n}x{k}"), &values(&c), &want, 1e-6);
    }
}

fn transpose(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..cols)
        .flat_map(|j| (0..rows).map(move |i| x[i * cols + j]))
        .collect()
}

#[test]
fn tensor_core_linear_residual_and_batched_match_f64() {
    use tile_kernels::matmul;
    let mut rng = Rng::new(9);
    for (m, n, k) in [(1, 1, 1), (70, 45, 33), (130, 64, 96)] {
        let x = rng.normals(m * k, 1.0);
        let w = rng.normals(n * k, 0.3);
        let b = rng.normals(n, 1.0);
        let r = rng.normals(m * n, 1.0);
        let (xt, wt, bt) = (
            host::<f32>(&x, &[m, k]),
            host::<f32>(&w, &[n, k]),
            host::<f32>(&b, &[n]),
        );
        let grid = tiles(m, n, 64, 64);
        for gelu in [0, 1] {
            let mut y = HostTensor::full(&[m, n], f32::NAN);
            matmul::linear::launch::<f32, 64, 64, 32, _>(&Cpu, grid, &xt, &wt, &bt, &mut y, gelu).unwrap();
            let want = linear_ref(&x, &w, &b, m, n, k, gelu == 1);
            assert_close(&format!("linear {m}x{n}x{k} gelu={gelu}"), &values(&y), &want, 1e-5);
        }
        let mut y = HostTensor::full(&[m, n], f32::NAN);
        matmul::linear_residual::launch::<f32, 64, 64, 32, _>(
            &Cpu,
            grid,
            &xt,
            &wt,
            &bt,
            &host::<f32>(&r, &[m, n]),
            &mut y,
        )
        .unwrap();
        let want: Vec<f64> = linear_ref(&x, &w, &b, m, n, k, false)
            .iter()
            .zip(&r)
            .map(|(a, b)| a + b)
            .collect();
        assert_close(&format!("linear_residual {m}x{n}x{k}"), &values(&y), &want, 1e-5);
    }
    let (batch, m, n, k) = (3, 40, 70, 50);
    let a = rng.normals(batch * m * k, 1.0);
    let b = rng.normals(batch * k * n, 1.0);
    let mut c = HostTensor::full(&[batch, m, n], f32::NAN);
    matmul::batched_matmul::launch::<f32, 64, 64, 32, _>(
        &Cpu,
        (tiles(m, n, 64, 64), batch as u32),
        &host::<f32>(&a, &[batch, m, k]),
        &host::<f32>(&b, &[batch, k, n]),
        &mut c,
    )
    .unwrap();
    let want: Vec<f64> = (0..batch)
        .flat_map(|i| {
            let ai = &a[i * m * k..(i + 1) * m * k];
            let bi = transpose(&b[i * k * n..(i + 1) * k * n], k, n);
            linear_ref(ai, &bi, &vec![0.0; n], m, n, k, false)
        })
        .collect();
    assert_close("batched_matmul", &values(&c), &want, 1e-6);
}

#[test]
fn cumsum_matches_f64_on_ragged_rows() {
    let mut rng = Rng::new(13);
    for (rows, cols) in [(7, 2500), (1, 1), (5, 1024), (3, 1025)] {
        let x = rng.normals(rows * cols, 1.0);
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        scan::run(&Cpu, &host::<f32>(&x, &[rows, cols]), &mut y).unwrap();
        let what = format!("cumsum {rows}x{cols}");
        assert_close(&what, &values(&y), &cumsum_ref(&rounded::<f32>(&x), cols), 1e-6);
        let mut yh = HostTensor::full(&[rows, cols], bf16::NAN);
        scan::run(&Cpu, &host::<bf16>(&x, &[rows, cols]), &mut yh).unwrap();
        assert_close(&what, &values(&yh), &cumsum_ref(&rounded::<bf16>(&x), cols), bf16::TOL);
    }
}

#[test]
fn argmax_matches_f64_with_ties_across_tiles() {
    let mut rng = Rng::new(14);
    for (rows, cols) in [(1, 1), (4, 3), (8, 1000), (8, 5000), (5, 50257)] {
        let x = argmax_rows(&mut rng, rows, cols);
        let want = argmax_ref(&rounded::<bf16>(&x), cols);
        let x = host::<bf16>(&x, &[rows, cols]);
        // Twice with one scratch: each launch leaves its counts at 0.
        let mut scratch = argmax::ArgmaxScratch::new(&Cpu, rows, cols).unwrap();
        for run in 0..2 {
            let (mut value, mut index) = (HostTensor::full(&[rows], f32::NAN), HostTensor::full(&[rows], -1));
            argmax::run(&Cpu, &x, &mut scratch, &mut value, &mut index).unwrap();
            for (r, &(v, i)) in want.iter().enumerate() {
                let got = (value.to_vec()[r] as f64, index.to_vec()[r] as usize);
                assert_eq!(got, (v, i), "argmax {rows}x{cols} row {r}, run {run}");
            }
        }
    }
    // Scratch made for shorter rows, or for other rows, is an error.
    let x = host::<bf16>(&argmax_rows(&mut rng, 2, 5000), &[2, 5000]);
    let (mut value, mut index) = (HostTensor::full(&[2], f32::NAN), HostTensor::full(&[2], -1));
    for (rows, cols) in [(2, 1000), (2, 3000), (3, 5000)] {
        let mut scratch = argmax::ArgmaxScratch::new(&Cpu, rows, cols).unwrap();
        let err = argmax::run(&Cpu, &x, &mut scratch, &mut value, &mut index).unwrap_err();
        let typed = matches!(err, tile::Error::Shape(_) | tile::Error::ShapeContract { .. });
        assert!(typed, "scratch for {rows}x{cols}: {err}");
    }
}

#[test]
fn gumbel_max_samples_the_kept_softmax_and_splits_by_columns() {
    gumbel_filters_check(&Cpu, 5_000);
    // A row split in two (a vocabulary over two ranks, `first` numbering
    // the columns): the half with the larger score holds the whole row's draw.
    let mut rng = Rng::new(16);
    let (rows, cols) = (64, 3000);
    let x = rng.normals(rows * cols, 2.0);
    let keys: Vec<u32> = (0..rows as u32).map(|r| r.wrapping_mul(40_503) ^ 77).collect();
    let keys = HostTensor::from_vec(keys, &[rows]).unwrap();
    let sample = |x: &[f64], cols: usize, first: usize| {
        let (mut value, mut index) = (HostTensor::zeros(&[rows]), HostTensor::zeros(&[rows]));
        let x = host::<f32>(x, &[rows, cols]);
        argmax::run_gumbel(
            &Cpu,
            (&x, &keys),
            (draw(0.7, None, None), first),
            &mut value,
            &mut index,
        )
        .unwrap();
        (value.to_vec(), index.to_vec())
    };
    let whole = sample(&x, cols, 0);
    let half = |range: std::ops::Range<usize>| -> Vec<f64> {
        x.chunks(cols).flat_map(|row| row[range.clone()].to_vec()).collect()
    };
    let (left, right) = (
        sample(&half(0..1800), 1800, 0),
        sample(&half(1800..cols), cols - 1800, 1800),
    );
    for r in 0..rows {
        let joined = if right.0[r] > left.0[r] {
            (right.0[r], right.1[r] + 1800)
        } else {
            (left.0[r], left.1[r])
        };
        assert_eq!(joined, (whole.0[r], whole.1[r]), "row {r}");
    }
    // The halves placed in the whole row (zeros elsewhere) sum to it.
    let mut sum = vec![0.0f32; rows * cols];
    for (range, first) in [(0..1800, 0), (1800..cols, 1800)] {
        let part = host::<f32>(&half(range.clone()), &[rows, range.len()]);
        let mut placed = HostTensor::full(&[rows, cols], f32::NAN);
        argmax::place(&Cpu, &part, &mut placed, first).unwrap();
        sum.iter_mut().zip(placed.to_vec()).for_each(|(s, p)| *s += p);
    }
    assert_eq!(sum, rounded::<f32>(&x).iter().map(|&v| v as f32).collect::<Vec<_>>());
    let distinct: std::collections::HashSet<i32> = whole.1.iter().copied().collect();
    assert!(distinct.len() > 20, "64 rows drew only {} tokens", distinct.len());
}

#[test]
fn topk_keeps_each_rows_largest_in_order() {
    let mut rng = Rng::new(19);
    for ((rows, cols), k) in [((3, 5000), 50), ((2, 700), 64), ((1, 1), 1)] {
        let x: Vec<f64> = (0..rows * cols).map(|_| rng.below(300) as f64 - 150.0).collect();
        let want = topk_ref(&x, cols, k);
        let xh = host::<f32>(&x, &[rows, cols]);
        let mut scratch = topk::TopkScratch::new(&Cpu, rows, cols).unwrap();
        let (mut v, mut c) = (
            HostTensor::<f32>::zeros(&[rows, k]),
            HostTensor::<i32>::zeros(&[rows, k]),
        );
        topk::run(&Cpu, &xh, &mut scratch, &mut v, &mut c).unwrap();
        for (r, order) in want.iter().enumerate() {
            let cols_got: Vec<usize> = c.to_vec()[r * k..(r + 1) * k].iter().map(|&i| i as usize).collect();
            assert_eq!(&cols_got, order, "topk {rows}x{cols} k {k} row {r}");
            let vals: Vec<f64> = order.iter().map(|&i| x[r * cols + i]).collect();
            assert_eq!(&values(&v)[r * k..(r + 1) * k], &vals[..]);
        }
    }
    // What `run` refuses: no columns kept, more than 64, more than the row
    // holds, and scratch made for another shape.
    let x = HostTensor::<f32>::zeros(&[2, 100]);
    let mut scratch = topk::TopkScratch::new(&Cpu, 2, 100).unwrap();
    let mut c = HostTensor::<i32>::zeros(&[2, 50]);
    for k in [0, 65] {
        let mut v = HostTensor::<f32>::zeros(&[2, k]);
        let mut ck = HostTensor::<i32>::zeros(&[2, k]);
        assert!(matches!(
            topk::run(&Cpu, &x, &mut scratch, &mut v, &mut ck),
            Err(tile::Error::Shape(_))
        ));
    }
    let short = HostTensor::<f32>::zeros(&[2, 10]);
    let mut v = HostTensor::<f32>::zeros(&[2, 50]);
    assert!(matches!(
        topk::run(&Cpu, &short, &mut scratch, &mut v, &mut c),
        Err(tile::Error::Shape(_))
    ));
    let mut other = topk::TopkScratch::new(&Cpu, 2, 5000).unwrap();
    assert!(matches!(
        topk::run(&Cpu, &x, &mut other, &mut v, &mut c),
        Err(tile::Error::Shape(_))
    ));
}
