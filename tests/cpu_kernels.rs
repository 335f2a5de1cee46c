//! The CPU reference version of every library kernel against plain f64 loops,
//! on random inputs with ragged shapes.

mod common;
use common::*;
use tile::{HostTensor, bf16};
use tile_kernels::{attention, elementwise, embedding, linear, norm, softmax};

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
        softmax::softmax::cpu::<f32, 1024>(grid_rows(rows), &xt, &mut y).unwrap();
        assert_close("softmax", &values(&y), &want, 1e-5);
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        softmax::softmax_online::cpu::<f32, 1024>(rows as u32, &xt, &mut y).unwrap();
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
    softmax::softmax_online::cpu::<bf16, 1024>(rows as u32, &xt, &mut y).unwrap();
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
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        norm::layer_norm::cpu::<f32, 1024>(grid_rows(rows), &xt, &wt, &bt, &mut y, 1e-5).unwrap();
        assert_close("layer_norm", &values(&y), &layer_norm_ref(&x, &w, &b, cols, 1e-5), 1e-5);
        let mut y = HostTensor::full(&[rows, cols], f32::NAN);
        norm::rms_norm::cpu::<f32, 1024>(grid_rows(rows), &xt, &wt, &mut y, 1e-5).unwrap();
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
        elementwise::add::cpu::<f32, 1024>(grid, &xt, &yt, &mut out).unwrap();
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        assert_close("add", &values(&out), &want, 1e-6);

        elementwise::scale::cpu::<f32, 1024>(grid, 0.5, &xt, &mut out).unwrap();
        let want: Vec<f64> = x.iter().map(|a| 0.5 * a).collect();
        assert_close("scale", &values(&out), &want, 1e-6);

        elementwise::gelu::cpu::<f32, 1024>(grid, &xt, &mut out).unwrap();
        let want: Vec<f64> = x.iter().map(|&a| gelu_ref(a)).collect();
        // 1 + tanh(..) cancels for negative inputs: f32 keeps about 4 digits there.
        assert_close("gelu", &values(&out), &want, 5e-4);

        let mut acc = xt.clone();
        elementwise::residual_add::cpu::<f32, 1024>(grid, &mut acc, &yt).unwrap();
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
    let tt = HostTensor::from_vec(tokens.clone(), &[b * t]).unwrap();
    let mut out = HostTensor::full(&[b * t, c], f32::NAN);
    embedding::embedding::cpu::<f32, 256>(
        ((b * t) as u32, cdiv(c, 256)),
        &tt,
        &host::<f32>(&wte, &[vocab, c]),
        &host::<f32>(&wpe, &[ctx, c]),
        &mut out,
        t as i32,
    )
    .unwrap();
    assert_close(
        "embedding",
        &values(&out),
        &embedding_ref(&tokens, &wte, &wpe, t, c),
        1e-6,
    );
}

#[test]
fn cpu_launch_rejects_wrong_ranks_and_empty_grids() {
    let x = HostTensor::<f32>::zeros(&[4]);
    let mut y = HostTensor::<f32>::zeros(&[4]);
    let err = softmax::softmax::cpu::<f32, 32>(1, &x, &mut y).unwrap_err();
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
    let x = HostTensor::<f32>::zeros(&[1, 4]);
    let mut y = HostTensor::<f32>::zeros(&[1, 4]);
    let err = softmax::softmax::cpu::<f32, 32>(0, &x, &mut y).unwrap_err();
    assert!(matches!(err, tile::Error::Grid { .. }), "{err}");
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
            linear::linear_ffma::cpu::<f32, 16, 64, 8>(linear::grid(m, n), &xt, &wt, &bt, &mut y, gelu).unwrap();
            let want = linear_ref(&x, &w, &b, m, n, k, gelu == 1);
            assert_close(&format!("linear {m}x{n}x{k} gelu={gelu}"), &values(&y), &want, 1e-5);
        }
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
        // is not), the grid's order in bands of 1, 2 and 3 query blocks.
        let step_sizes = [32, 64].into_iter().filter(|&bk| bk == 32 || d == 32);
        for (bk, band) in step_sizes.flat_map(|bk| [(bk, 1), (bk, 2), (bk, 3)]) {
            let mut out = HostTensor::full(&[batch, t, c], f32::NAN);
            match (bk, d) {
                (32, 32) => attention::causal_attention::cpu::<f32, 128, 32, 32>(grid, &qt, &mut out, h, scale, band),
                (32, 64) => attention::causal_attention::cpu::<f32, 128, 32, 64>(grid, &qt, &mut out, h, scale, band),
                (32, _) => attention::causal_attention::cpu::<f32, 64, 32, 128>(grid, &qt, &mut out, h, scale, band),
                _ => attention::causal_attention::cpu::<f32, 128, 64, 32>(grid, &qt, &mut out, h, scale, band),
            }
            .unwrap();
            let what = format!("attention b={batch} t={t} h={heads} d={d} keys per step {bk} band {band}");
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
        "out must be [2, 10, 128] (attention over qkv: [B, T, 3C] = [2, 10, 384]), got [2, 9, 128]"
    );
    assert_eq!(
        err(&[2, 10, 385], &[2, 10, 128], 4),
        "qkv must be [2, 10, 384] (attention over qkv: [B, T, 3C] = [2, 10, 385]), got [2, 10, 385]"
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
        matmul::matmul::cpu::<f32, 64, 64, 32>(matmul::blocks(m, n, 64, 64), &at, &bt, &mut c).unwrap();
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
        let grid = matmul::blocks(m, n, 64, 64);
        for gelu in [0, 1] {
            let mut y = HostTensor::full(&[m, n], f32::NAN);
            matmul::linear::cpu::<f32, 64, 64, 32>(grid, &xt, &wt, &bt, &mut y, gelu).unwrap();
            let want = linear_ref(&x, &w, &b, m, n, k, gelu == 1);
            assert_close(&format!("linear {m}x{n}x{k} gelu={gelu}"), &values(&y), &want, 1e-5);
        }
        let mut y = HostTensor::full(&[m, n], f32::NAN);
        matmul::linear_residual::cpu::<f32, 64, 64, 32>(grid, &xt, &wt, &bt, &host::<f32>(&r, &[m, n]), &mut y)
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
    matmul::batched_matmul::cpu::<f32, 64, 64, 32>(
        (matmul::blocks(m, n, 64, 64), batch as u32),
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
