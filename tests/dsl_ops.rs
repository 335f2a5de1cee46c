//! One small kernel per DSL feature. Each test checks the CPU backend
//! against plain Rust loops, then (with a GPU) the GPU against the CPU
//! backend, on ragged shapes with poisoned outputs. Each runs twice:
//! `name` without the GPU, and `gpu::name` with it, which is reported
//! ignored, with the reason, without a GPU (tests/common/harness.rs).

mod common;
use common::harness::{self, Test};
use common::*;
use std::process::ExitCode;
use std::sync::Arc;
use tile::{Cpu, Device, HostTensor, Stream, bf16, f16};

/// The GPU's default stream, where the test has a GPU.
fn gpu(d: &Option<Arc<Device>>) -> Option<Stream> {
    d.as_ref().map(|d| d.stream())
}

fn cdiv(a: usize, b: usize) -> u32 {
    a.div_ceil(b) as u32
}

fn random_f32(rng: &mut Rng, shape: &[usize], scale: f64) -> HostTensor<f32> {
    let n = shape.iter().product();
    host::<f32>(&rng.normals(n, scale), shape)
}

fn random_i32(rng: &mut Rng, shape: &[usize], below: usize) -> HostTensor<i32> {
    let n = shape.iter().product();
    HostTensor::from_vec(
        (0..n).map(|_| rng.below(below) as i32 - (below / 2) as i32).collect(),
        shape,
    )
    .unwrap()
}

fn as_f64<T: Num>(t: &HostTensor<T>) -> Vec<f64> {
    values(t)
}

/// Downloads and compares a GPU result with the CPU backend's.
fn same<T: Num>(s: &Stream, what: &str, got: &tile::Tensor<T>, want: &HostTensor<T>, tol: f64) {
    let got = s.download(got).unwrap();
    if tol == 0.0 {
        assert_eq!(got.to_vec(), want.to_vec(), "{what}: GPU differs from the CPU backend");
    } else {
        assert_close(what, &as_f64(&got), &as_f64(want), tol);
    }
}

// ---- reductions along both axes ---------------------------------------------

#[tile::kernel(BM = [128], BN = [32])]
fn column_stats<const BM: usize, const BN: usize>(
    x: &Tensor<f32>,
    sums: &mut Tensor<f32>,
    maxes: &mut Tensor<f32>,
    mins: &mut Tensor<f32>,
) {
    let j = block_id(0);
    let t = x.load([0, j], [BM, BN]);
    sums.store([0, j], t.sum(0));
    maxes.store([0, j], x.load([0, j], [BM, BN]).pad(f32::NEG_INFINITY).max(0));
    mins.store([0, j], x.load([0, j], [BM, BN]).pad(f32::INFINITY).min(0));
}

fn reductions_along_axis_0(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(21);
    let (rows, cols) = (100, 70);
    let x = random_f32(&mut rng, &[rows, cols], 1.0);
    let xs = x.to_vec();
    let col = |j: usize| (0..rows).map(|i| xs[i * cols + j] as f64).collect::<Vec<_>>();
    let run_cpu = || {
        let mut out: Vec<HostTensor<f32>> = (0..3).map(|_| HostTensor::full(&[1, cols], f32::NAN)).collect();
        let [a, b, c] = &mut out[..] else { unreachable!() };
        column_stats::launch::<128, 32, _>(&Cpu, cdiv(cols, 32), &x, a, b, c).unwrap();
        out
    };
    let out = run_cpu();
    let want_sum: Vec<f64> = (0..cols).map(|j| col(j).iter().sum()).collect();
    let want_max: Vec<f64> = (0..cols).map(|j| col(j).into_iter().fold(f64::MIN, f64::max)).collect();
    let want_min: Vec<f64> = (0..cols).map(|j| col(j).into_iter().fold(f64::MAX, f64::min)).collect();
    assert_close("column sums", &as_f64(&out[0]), &want_sum, 1e-6);
    assert_eq!(as_f64(&out[1]), want_max);
    assert_eq!(as_f64(&out[2]), want_min);
    let Some(s) = gpu(&d) else {
        return;
    };
    let xd = s.upload(&x).unwrap();
    let mut d: Vec<_> = (0..3).map(|_| s.full(&[1, cols], f32::NAN).unwrap()).collect();
    let [a, b, c] = &mut d[..] else { unreachable!() };
    column_stats::launch::<128, 32, _>(&s, cdiv(cols, 32), &xd, a, b, c).unwrap();
    same(&s, "column sums", &d[0], &out[0], 1e-6);
    same(&s, "column max", &d[1], &out[1], 0.0);
    same(&s, "column min", &d[2], &out[2], 0.0);
}

// ---- argmax / argmin ------------------------------------------------------------

#[tile::kernel(B = [512])]
fn arg_rows<const B: usize>(x: &Tensor<f32>, amax: &mut Tensor<i32>, amin: &mut Tensor<i32>) {
    let r = block_id(0);
    amax.store([r, 0], x.load([r, 0], [1, B]).pad(f32::NEG_INFINITY).argmax(1));
    amin.store([r, 0], x.load([r, 0], [1, B]).pad(f32::INFINITY).argmin(1));
}

fn argmax_and_argmin_pick_the_first_extreme(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(22);
    let (rows, cols) = (9, 300);
    let mut data = rng.normals(rows * cols, 1.0);
    // Ties: the first occurrence wins.
    data[5] = 10.0;
    data[17] = 10.0;
    let x = host::<f32>(&data, &[rows, cols]);
    let mut amax = HostTensor::full(&[rows, 1], -1);
    let mut amin = HostTensor::full(&[rows, 1], -1);
    arg_rows::launch::<512, _>(&Cpu, rows as u32, &x, &mut amax, &mut amin).unwrap();
    for r in 0..rows {
        let row = &data[r * cols..(r + 1) * cols];
        let best = |better: fn(f64, f64) -> bool| {
            (0..cols).fold(0, |b, i| {
                if better(row[i] as f32 as f64, row[b] as f32 as f64) {
                    i
                } else {
                    b
                }
            }) as i32
        };
        assert_eq!(amax.at(&[r, 0]), best(|a, b| a > b));
        assert_eq!(amin.at(&[r, 0]), best(|a, b| a < b));
    }
    let Some(s) = gpu(&d) else {
        return;
    };
    let mut a = s.full(&[rows, 1], -1).unwrap();
    let mut b = s.full(&[rows, 1], -1).unwrap();
    arg_rows::launch::<512, _>(&s, rows as u32, &s.upload(&x).unwrap(), &mut a, &mut b).unwrap();
    same(&s, "argmax", &a, &amax, 0.0);
    same(&s, "argmin", &b, &amin, 0.0);
}

// ---- transpose (a layout relabeling, stored from a transposed layout) -----------

#[tile::kernel(B = [32, 64])]
fn transpose<const B: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let j = block_id(1);
    y.store([j, i], x.load([i, j], [B, B]).transpose());
}

fn transpose_moves_elements(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(23);
    let (rows, cols) = (70, 45);
    let x = random_f32(&mut rng, &[rows, cols], 1.0);
    let mut y = HostTensor::full(&[cols, rows], f32::NAN);
    transpose::launch::<32, _>(&Cpu, (cdiv(rows, 32), cdiv(cols, 32)), &x, &mut y).unwrap();
    for i in 0..rows {
        for j in 0..cols {
            assert_eq!(y.at(&[j, i]), x.at(&[i, j]));
        }
    }
    let Some(s) = gpu(&d) else {
        return;
    };
    let xd = s.upload(&x).unwrap();
    for b in [32, 64] {
        let mut yd = s.full(&[cols, rows], f32::NAN).unwrap();
        let grid = (cdiv(rows, b), cdiv(cols, b));
        transpose::launch_with(&s, &[b], grid, &xd, &mut yd).unwrap();
        same(&s, "transpose", &yd, &y, 0.0);
    }
}

// ---- mma with a transposed A operand ------------------------------------------

/// `c = a^T @ b` with `a: [K, M]`: `a`'s tiles are loaded M-major and
/// transposed into `mma`'s A operand (`ldmatrix.trans` for 16-bit tiles; on
/// sm_90a the producer transposes f32 tiles in their stages for `wgmma`).
#[tile::kernel(T = [f32, bf16], BM = [128], BN = [128], BK = [32], num_warps = 8)]
fn transposed_a_matmul<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &mut Tensor<T>,
) {
    let [m, n] = group_tiles(block_id(0), cdiv(a.shape(1), BM), cdiv(b.shape(1), BN), 8);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(0), BK) {
        acc = mma(a.load([k, m], [BK, BM]).transpose(), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<T>());
}

/// The CPU backend against f64 loops, then each GPU path against the CPU backend.
fn transposed_a_case<T: Num>(d: Option<&Arc<tile::Device>>, rng: &mut Rng, (m, n, k): (usize, usize, usize), tol: f64) {
    let a = host::<T>(&rng.normals(k * m, 1.0), &[k, m]);
    let b = host::<T>(&rng.normals(k * n, 1.0), &[k, n]);
    let (av, bv) = (values(&a), values(&b));
    let reference: Vec<f64> = (0..m * n)
        .map(|e| (0..k).map(|l| av[l * m + e / n] * bv[l * n + e % n]).sum())
        .collect();
    let grid = cdiv(m, 128) * cdiv(n, 128);
    let mut want = host::<T>(&vec![f64::NAN; m * n], &[m, n]);
    transposed_a_matmul::launch::<T, 128, 128, 32, _>(&Cpu, grid, &a, &b, &mut want).unwrap();
    let what = format!("a^T @ b {} {m}x{n}x{k}", T::DTYPE);
    assert_close(&what, &values(&want), &reference, tol);
    let Some(d) = d else { return };
    let s = d.stream();
    let (ad, bd) = (s.upload(&a).unwrap(), s.upload(&b).unwrap());
    on_every_path(d, || {
        let mut cd = s.upload(&host::<T>(&vec![f64::NAN; m * n], &[m, n])).unwrap();
        transposed_a_matmul::launch::<T, 128, 128, 32, _>(&s, grid, &ad, &bd, &mut cd).unwrap();
        same(&s, &what, &cd, &want, tol);
    });
}

fn mma_takes_a_transposed_a_operand(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(29);
    // Ragged M, N and K (multiples of 8, so that the vector variants run), and more tiles than SMs.
    for shape in [(200, 136, 264), (1800, 1160, 96)] {
        transposed_a_case::<f32>(d.as_ref(), &mut rng, shape, 2e-3);
        transposed_a_case::<bf16>(d.as_ref(), &mut rng, shape, bf16::TOL);
    }
    if let Some(d) = d {
        assert_launched_on_sm90a(
            &d,
            &[
                "transposed_a_matmul_f32_128_128_32_wgmma",
                "transposed_a_matmul_bf16_128_128_32_wgmma",
            ],
        );
    }
}

// ---- a product's rows reduced: warps split rows --------------------------------

/// The maximum of each row of `a @ b` over a K-loop. Reducing the
/// product's rows makes the warps split its rows first
/// (`layout::WarpSplit::Rows`), the loaded `a` then staged in `wgmma`'s
/// register-fragment layout on sm_90a, read through a descriptor.
#[tile::kernel(T = [f32, bf16], BM = [64], BN = [64], BK = [32], num_warps = 4)]
fn row_max_of_product<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    out: &mut Tensor<f32>,
) {
    let m = block_id(0);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, 0], [BK, BN]), acc);
    }
    out.store([m, 0], acc.max(1));
}

fn row_max_case<T: Num>(d: Option<&Arc<tile::Device>>, rng: &mut Rng, (m, k): (usize, usize), tol: f64) {
    let n = 64;
    let a = host::<T>(&rng.normals(m * k, 1.0), &[m, k]);
    let b = host::<T>(&rng.normals(k * n, 1.0), &[k, n]);
    let (av, bv) = (values(&a), values(&b));
    let reference: Vec<f64> = (0..m)
        .map(|r| {
            (0..n)
                .map(|c| (0..k).map(|l| av[r * k + l] * bv[l * n + c]).sum::<f64>())
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect();
    let mut want = HostTensor::full(&[m, 1], f32::NAN);
    row_max_of_product::launch::<T, 64, 64, 32, _>(&Cpu, cdiv(m, 64), &a, &b, &mut want).unwrap();
    let what = format!("row max of a @ b {} {m}x{n}x{k}", T::DTYPE);
    assert_close(&what, &values(&want), &reference, tol);
    let Some(d) = d else { return };
    let s = d.stream();
    let (ad, bd) = (s.upload(&a).unwrap(), s.upload(&b).unwrap());
    on_every_path(d, || {
        let mut od = s.upload(&HostTensor::full(&[m, 1], f32::NAN)).unwrap();
        row_max_of_product::launch::<T, 64, 64, 32, _>(&s, cdiv(m, 64), &ad, &bd, &mut od).unwrap();
        same(&s, &what, &od, &want, tol);
    });
}

fn a_products_rows_reduce_within_warps(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(37);
    // Ragged M and K.
    for shape in [(200, 96), (64, 40)] {
        row_max_case::<f32>(d.as_ref(), &mut rng, shape, 2e-3);
        row_max_case::<bf16>(d.as_ref(), &mut rng, shape, 1e-5);
    }
    if let Some(d) = d {
        // `out`'s one-element rows are not 16-byte aligned, but a tile of
        // one-element rows is stored element by element: the variant with
        // vectors everywhere.
        assert_launched_on_sm90a(&d, &["row_max_of_product_bf16_64_64_32_wgmma"]);
    }
}

// ---- an accumulator read inside its K-loop -------------------------------------

/// `total` adds up the running product after every K-step, so each
/// step's product is read as soon as it is made: on sm_90a its `wgmma`s
/// are awaited at once (none left running into the next step).
#[tile::kernel(T = [bf16], BM = [64], BN = [64], BK = [32], num_warps = 4)]
fn running_products<T, const BM: usize, const BN: usize, const BK: usize>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    out: &mut Tensor<f32>,
) {
    let m = block_id(0);
    let n = block_id(1);
    let mut acc = zeros([BM, BN]);
    let mut total = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
        total = total + acc;
    }
    out.store([m, n], total);
}

fn an_accumulator_read_inside_its_loop_is_complete(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(41);
    // Ragged M, N and K; more tiles than SMs.
    for (m, n, k) in [(200, 136, 96), (1100, 1160, 72)] {
        let a = host::<bf16>(&rng.normals(m * k, 1.0), &[m, k]);
        let b = host::<bf16>(&rng.normals(k * n, 1.0), &[k, n]);
        let (av, bv) = (values(&a), values(&b));
        // Step s adds the product over K up to (s + 1) * 32: element (i, j)
        // sums a[i, l] b[l, j] once per step at or after l's.
        let steps = k.div_ceil(32);
        let reference: Vec<f64> = (0..m * n)
            .map(|e| {
                let (i, j) = (e / n, e % n);
                (0..k)
                    .map(|l| (steps - l / 32) as f64 * av[i * k + l] * bv[l * n + j])
                    .sum()
            })
            .collect();
        let grid = (cdiv(m, 64), cdiv(n, 64));
        let mut want = HostTensor::full(&[m, n], f32::NAN);
        running_products::launch::<bf16, 64, 64, 32, _>(&Cpu, grid, &a, &b, &mut want).unwrap();
        let what = format!("running products {m}x{n}x{k}");
        assert_close(&what, &values(&want), &reference, 1e-5);
        let Some(d) = &d else { continue };
        let s = d.stream();
        let (ad, bd) = (s.upload(&a).unwrap(), s.upload(&b).unwrap());
        on_every_path(d, || {
            let mut od = s.upload(&HostTensor::full(&[m, n], f32::NAN)).unwrap();
            running_products::launch::<bf16, 64, 64, 32, _>(&s, grid, &ad, &bd, &mut od).unwrap();
            same(&s, &what, &od, &want, 1e-5);
        });
    }
    if let Some(d) = d {
        assert_launched_on_sm90a(&d, &["running_products_bf16_64_64_32_wgmma"]);
    }
}

// ---- a batched x @ w^T: three-dimensional tiles ------------------------------------

/// `y[i] = x[i] @ w[i]^T` on `[1, rows, cols]` tiles: on sm_90a an f32 `y`
/// is stored through TMA, a 128-byte panel at a time, with 3-d boxes.
#[tile::kernel(BM = [128], BN = [128], BK = [32])]
fn batched_linear<const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    y: &mut Tensor<f32>,
) {
    let batch = block_id(1);
    let [m, n] = group_tiles(block_id(0), cdiv(x.shape(1), BM), cdiv(w.shape(1), BN), 8);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(x.shape(2), BK) {
        let xk = x.load([batch, m, k], [1, BM, BK]).reshape([BM, BK]);
        let wk = w.load([batch, n, k], [1, BN, BK]).reshape([BN, BK]);
        acc = mma(xk, wk.transpose(), acc);
    }
    y.store([batch, m, n], acc.reshape([1, BM, BN]));
}

fn batched_tiles_are_stored_with_their_batch_index(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(37);
    // Ragged M and N (N a multiple of 4, so that `y` is 16-byte aligned), K under a tile.
    let (batch, m, n, k) = (3, 200, 260, 24);
    let x = host::<f32>(&rng.normals(batch * m * k, 1.0), &[batch, m, k]);
    let w = host::<f32>(&rng.normals(batch * n * k, 1.0), &[batch, n, k]);
    let (xv, wv) = (values(&x), values(&w));
    let reference: Vec<f64> = (0..batch * m * n)
        .map(|e| {
            let (i, r, c) = (e / (m * n), e / n % m, e % n);
            (0..k).map(|l| xv[(i * m + r) * k + l] * wv[(i * n + c) * k + l]).sum()
        })
        .collect();
    let grid = (cdiv(m, 128) * cdiv(n, 128), batch as u32);
    let mut want = host::<f32>(&vec![f64::NAN; batch * m * n], &[batch, m, n]);
    batched_linear::launch::<128, 128, 32, _>(&Cpu, grid, &x, &w, &mut want).unwrap();
    assert_close("batched x @ w^T", &values(&want), &reference, 2e-3);
    let Some(d) = d else { return };
    let s = d.stream();
    let (xd, wd) = (s.upload(&x).unwrap(), s.upload(&w).unwrap());
    let mut yd = s
        .upload(&host::<f32>(&vec![f64::NAN; batch * m * n], &[batch, m, n]))
        .unwrap();
    batched_linear::launch::<128, 128, 32, _>(&s, grid, &xd, &wd, &mut yd).unwrap();
    same(&s, "batched x @ w^T", &yd, &want, 2e-3);
    assert_launched_on_sm90a(&d, &["batched_linear_128_128_32_wgmma"]);
}

// ---- loops with carried tiles and scalars ------------------------------------------

#[tile::kernel(B = [256])]
fn row_sums_looped<const B: usize>(x: &Tensor<f32>, out: &mut Tensor<f32>, counts: &mut Tensor<i32>) {
    let r = block_id(0);
    let mut acc = zeros([1, B]);
    let mut n = 0;
    for j in 0..cdiv(x.shape(1), B) {
        acc = acc + x.load([r, j], [1, B]);
        n = n + 1;
    }
    out.store([r, 0], acc.sum(1));
    counts.store([r, 0], full([1, 1], n));
}

fn loops_carry_tiles_and_scalars(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(24);
    for cols in [1, 255, 256, 1000] {
        let rows = 5;
        let x = random_f32(&mut rng, &[rows, cols], 1.0);
        let mut out = HostTensor::full(&[rows, 1], f32::NAN);
        let mut counts = HostTensor::full(&[rows, 1], -1);
        row_sums_looped::launch::<256, _>(&Cpu, rows as u32, &x, &mut out, &mut counts).unwrap();
        let xs = x.to_vec();
        let want: Vec<f64> = (0..rows)
            .map(|r| xs[r * cols..(r + 1) * cols].iter().map(|&v| v as f64).sum())
            .collect();
        assert_close("looped row sums", &as_f64(&out), &want, 1e-6);
        assert!(counts.to_vec().iter().all(|&c| c as usize == cols.div_ceil(256)));
        let Some(s) = gpu(&d) else {
            continue;
        };
        let mut od = s.full(&[rows, 1], f32::NAN).unwrap();
        let mut cd = s.full(&[rows, 1], -1).unwrap();
        row_sums_looped::launch::<256, _>(&s, rows as u32, &s.upload(&x).unwrap(), &mut od, &mut cd).unwrap();
        same(&s, "looped row sums", &od, &out, 1e-6);
        same(&s, "loop counts", &cd, &counts, 0.0);
    }
}

// ---- block-uniform branches ---------------------------------------------------------

#[tile::kernel(B = [1024])]
fn branchy<const B: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>, mode: i32) {
    let i = block_id(0);
    let t = x.load([i], [B]);
    let mut scale = 1.0;
    if mode == 1 {
        scale = 2.0;
    } else if mode == 2 {
        scale = -1.0;
    }
    if i % 2 == 0 {
        y.store([i], t * scale);
    } else {
        y.store([i], t + scale);
    }
}

fn branches_on_block_uniform_scalars(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(25);
    let n = 5000;
    let x = random_f32(&mut rng, &[n], 1.0);
    for mode in [0, 1, 2] {
        let mut y = HostTensor::full(&[n], f32::NAN);
        branchy::launch::<1024, _>(&Cpu, cdiv(n, 1024), &x, &mut y, mode).unwrap();
        let scale = [1.0f32, 2.0, -1.0][mode as usize];
        for k in 0..n {
            let v = x.at(&[k]);
            let want = if (k / 1024) % 2 == 0 { v * scale } else { v + scale };
            assert_eq!(y.at(&[k]), want);
        }
        let Some(s) = gpu(&d) else {
            continue;
        };
        let mut yd = s.full(&[n], f32::NAN).unwrap();
        branchy::launch::<1024, _>(&s, cdiv(n, 1024), &s.upload(&x).unwrap(), &mut yd, mode).unwrap();
        same(&s, "branchy", &yd, &y, 0.0);
    }
}

// ---- integer arithmetic, bit operations, select ---------------------------------------

#[tile::kernel(B = [512])]
fn int_ops<const B: usize>(a: &Tensor<i32>, b: &Tensor<i32>, out: &mut Tensor<i32>) {
    let i = block_id(0);
    let x = a.load([0, i], [1, B]);
    let y = b.load([0, i], [1, B]);
    let d = select(y == 0, 1, y);
    out.store([0, i], (x * 3 + y) % 7);
    out.store([1, i], x / d);
    out.store([2, i], (x << 3) ^ (y & 255) | (x >> 2));
    out.store([3, i], max(x, y) - min(x, y) + abs(x));
    out.store([4, i], select(x > y, x, -y));
    out.store([5, i], (x * 1000003 + arange(B)).cast::<u32>().cast::<i32>() / 3);
}

fn int_ops_ref(x: i32, y: i32, k: usize) -> [i32; 6] {
    let d = if y == 0 { 1 } else { y };
    [
        x.wrapping_mul(3).wrapping_add(y) % 7,
        x / d,
        ((x << 3) ^ (y & 255)) | (x >> 2),
        x.max(y) - x.min(y) + x.abs(),
        if x > y { x } else { -y },
        x.wrapping_mul(1000003).wrapping_add((k % 512) as i32) / 3,
    ]
}

fn integer_operations(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(26);
    let n = 1500;
    let a = random_i32(&mut rng, &[1, n], 2000);
    let b = random_i32(&mut rng, &[1, n], 40);
    let mut out = HostTensor::full(&[6, n], i32::MIN);
    int_ops::launch::<512, _>(&Cpu, cdiv(n, 512), &a, &b, &mut out).unwrap();
    for k in 0..n {
        let want = int_ops_ref(a.at(&[0, k]), b.at(&[0, k]), k);
        for (row, w) in want.iter().enumerate() {
            assert_eq!(out.at(&[row, k]), *w, "row {row} element {k}");
        }
    }
    let Some(s) = gpu(&d) else { return };
    let mut od = s.full(&[6, n], i32::MIN).unwrap();
    int_ops::launch::<512, _>(
        &s,
        cdiv(n, 512),
        &s.upload(&a).unwrap(),
        &s.upload(&b).unwrap(),
        &mut od,
    )
    .unwrap();
    same(&s, "int ops", &od, &out, 0.0);
}

// ---- casts and half-precision arithmetic ------------------------------------------------

#[tile::kernel(B = [256])]
fn casts<const B: usize>(
    x: &Tensor<f32>,
    h: &Tensor<f16>,
    ints: &mut Tensor<i32>,
    halves: &mut Tensor<f16>,
    sums: &mut Tensor<f16>,
) {
    let i = block_id(0);
    let t = x.load([i], [B]);
    ints.store([i], (t * 100.0).cast::<i32>());
    halves.store([i], t.cast::<f16>());
    let hv = h.load([i], [B]);
    sums.store([i], hv + hv * hv);
}

fn casts_and_half_arithmetic_round_like_the_reference(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(27);
    let n = 700;
    let x = random_f32(&mut rng, &[n], 3.0);
    let h = host::<f16>(&rng.normals(n, 2.0), &[n]);
    let mut ints = HostTensor::full(&[n], 0);
    let mut halves = HostTensor::full(&[n], f16::NAN);
    let mut sums = HostTensor::full(&[n], f16::NAN);
    casts::launch::<256, _>(&Cpu, cdiv(n, 256), &x, &h, &mut ints, &mut halves, &mut sums).unwrap();
    for k in 0..n {
        let v = x.at(&[k]);
        assert_eq!(ints.at(&[k]), (v * 100.0) as i32);
        assert_eq!(halves.at(&[k]), f16::from_f32(v));
        let hv = h.at(&[k]);
        let sq = f16::from_f32(hv.to_f32() * hv.to_f32());
        assert_eq!(sums.at(&[k]), f16::from_f32(hv.to_f32() + sq.to_f32()));
    }
    let Some(s) = gpu(&d) else {
        return;
    };
    let mut i_d = s.full(&[n], 0).unwrap();
    let mut h_d = s.full(&[n], f16::NAN).unwrap();
    let mut s_d = s.full(&[n], f16::NAN).unwrap();
    casts::launch::<256, _>(
        &s,
        cdiv(n, 256),
        &s.upload(&x).unwrap(),
        &s.upload(&h).unwrap(),
        &mut i_d,
        &mut h_d,
        &mut s_d,
    )
    .unwrap();
    same(&s, "f32 -> i32", &i_d, &ints, 0.0);
    same(&s, "f32 -> f16", &h_d, &halves, 0.0);
    same(&s, "f16 arithmetic", &s_d, &sums, 0.0);
}

#[tile::kernel(B = [256])]
fn float_bits<const B: usize>(
    x: &Tensor<f32>,
    bits: &mut Tensor<u32>,
    back: &mut Tensor<f32>,
    negated: &mut Tensor<f32>,
) {
    let i = block_id(0);
    let b = x.load([i], [B]).bitcast::<u32>();
    bits.store([i], b);
    back.store([i], b.bitcast::<f32>());
    // Flipping the sign bit through i32 negates, NaN included.
    negated.store([i], (b.bitcast::<i32>() ^ i32::MIN).bitcast::<f32>());
}

fn bitcast_keeps_every_bit(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(28);
    let n = 300;
    let mut x = random_f32(&mut rng, &[n], 3.0);
    let special = [
        -0.0,
        0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e-45,
        -f32::MAX,
    ];
    for (k, v) in special.into_iter().enumerate() {
        x.set(&[k], v);
    }
    let bits_of = |v: Vec<f32>| v.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    let want = bits_of(x.to_vec());
    let negated: Vec<u32> = want.iter().map(|b| b ^ 0x8000_0000).collect();
    let (mut b, mut back, mut neg) = (
        HostTensor::full(&[n], 0u32),
        HostTensor::zeros(&[n]),
        HostTensor::zeros(&[n]),
    );
    float_bits::launch::<256, _>(&Cpu, cdiv(n, 256), &x, &mut b, &mut back, &mut neg).unwrap();
    assert_eq!(b.to_vec(), want);
    assert_eq!(
        (bits_of(back.to_vec()), bits_of(neg.to_vec())),
        (want.clone(), negated.clone())
    );
    let Some(s) = gpu(&d) else {
        return;
    };
    let (mut b, mut back, mut neg) = (
        s.full(&[n], 0u32).unwrap(),
        s.zeros(&[n]).unwrap(),
        s.zeros(&[n]).unwrap(),
    );
    float_bits::launch::<256, _>(&s, cdiv(n, 256), &s.upload(&x).unwrap(), &mut b, &mut back, &mut neg).unwrap();
    assert_eq!(s.download(&b).unwrap().to_vec(), want, "bits");
    let back = bits_of(s.download(&back).unwrap().to_vec());
    let neg = bits_of(s.download(&neg).unwrap().to_vec());
    assert_eq!((back, neg), (want, negated), "back, negated");
}

// ---- math functions ------------------------------------------------------------------------

#[tile::kernel(B = [256])]
fn math<const B: usize>(x: &Tensor<f32>, out: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([0, i], [1, B]);
    let p = abs(t) + 0.5;
    out.store([0, i], exp(t));
    out.store([1, i], exp2(t));
    out.store([2, i], log(p));
    out.store([3, i], log2(p));
    out.store([4, i], sqrt(p));
    out.store([5, i], rsqrt(p));
    out.store([6, i], tanh(t));
    out.store([7, i], erf(t));
    out.store([8, i], -abs(t));
    out.store([9, i], gelu(t));
}

fn math_functions_match_f64(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(28);
    let n = 600;
    let x = random_f32(&mut rng, &[1, n], 2.0);
    let mut out = HostTensor::full(&[10, n], f32::NAN);
    math::launch::<256, _>(&Cpu, cdiv(n, 256), &x, &mut out).unwrap();
    let fs: [fn(f64) -> f64; 10] = [
        f64::exp,
        f64::exp2,
        |t| (t.abs() + 0.5).ln(),
        |t| (t.abs() + 0.5).log2(),
        |t| (t.abs() + 0.5).sqrt(),
        |t| 1.0 / (t.abs() + 0.5).sqrt(),
        f64::tanh,
        |t| libm_erf(t),
        |t| -t.abs(),
        gelu_ref,
    ];
    let xs: Vec<f64> = x.to_vec().iter().map(|&v| v as f64).collect();
    let row = |t: &HostTensor<f32>, r: usize| -> Vec<f64> { (0..n).map(|k| t.at(&[r, k]) as f64).collect() };
    for (r, f) in fs.iter().enumerate() {
        let want: Vec<f64> = xs.iter().map(|&t| f(t)).collect();
        assert_close(&format!("math row {r} (cpu)"), &row(&out, r), &want, 1e-6);
    }
    let Some(s) = gpu(&d) else {
        return;
    };
    let mut od = s.full(&[10, n], f32::NAN).unwrap();
    math::launch::<256, _>(&s, cdiv(n, 256), &s.upload(&x).unwrap(), &mut od).unwrap();
    let got = s.download(&od).unwrap();
    for (r, f) in fs.iter().enumerate() {
        let want: Vec<f64> = xs.iter().map(|&t| f(t)).collect();
        // ex2/lg2/rsqrt/tanh are the GPU's approximations: tanh.approx is the loosest (2^-11).
        assert_close(&format!("math row {r} (gpu)"), &row(&got, r), &want, 1e-3);
    }
}

/// erf in f64 (Abramowitz and Stegun 7.1.28 is too coarse; use the series/continued fraction).
fn libm_erf(x: f64) -> f64 {
    // Maclaurin series converges fast for |x| < 3; beyond, erf is 1 to f32 precision.
    if x.abs() > 3.5 {
        return x.signum();
    }
    let mut term = x;
    let mut sum = x;
    for n in 1..80 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

// ---- reshape, expand_dims, broadcast_to, 3-D tiles ----------------------------------------------

#[tile::kernel(B = [16])]
fn shapes<const B: usize>(
    x: &Tensor<f32>,
    flat: &mut Tensor<f32>,
    outer: &mut Tensor<f32>,
    cube: &Tensor<f32>,
    plane: &mut Tensor<f32>,
) {
    let t = x.load([0, 0], [8, B]);
    flat.store([0, 0], t.reshape([2, 4 * B]));
    let row = t.sum(1).reshape([8]);
    let col = arange(B).cast::<f32>();
    outer.store([0, 0], row.expand_dims(1) * col.expand_dims(0).broadcast_to([8, B]));
    plane.store(
        [0, 0],
        cube.load([0, 0, 0], [2, 4, 32]).sum(1).reshape([2, 32]).permute([1, 0]),
    );
}

fn reshapes_broadcasts_and_3d_tiles(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(29);
    let x = random_f32(&mut rng, &[8, 16], 1.0);
    let cube = random_f32(&mut rng, &[2, 3, 30], 1.0);
    let mut flat = HostTensor::full(&[2, 64], f32::NAN);
    let mut outer = HostTensor::full(&[8, 16], f32::NAN);
    let mut plane = HostTensor::full(&[30, 2], f32::NAN);
    shapes::launch::<16, _>(&Cpu, 1, &x, &mut flat, &mut outer, &cube, &mut plane).unwrap();
    assert_eq!(flat.to_vec(), x.to_vec());
    for r in 0..8 {
        let s: f32 = (0..16).map(|c| x.at(&[r, c])).sum();
        for c in 0..16 {
            assert!((outer.at(&[r, c]) - s * c as f32).abs() < 1e-4);
        }
    }
    for a in 0..2 {
        for k in 0..30 {
            let s: f32 = (0..3).map(|j| cube.at(&[a, j, k])).sum();
            assert!((plane.at(&[k, a]) - s).abs() < 1e-5);
        }
    }
    let Some(s) = gpu(&d) else {
        return;
    };
    let mut fd = s.full(&[2, 64], f32::NAN).unwrap();
    let mut od = s.full(&[8, 16], f32::NAN).unwrap();
    let mut pd = s.full(&[30, 2], f32::NAN).unwrap();
    shapes::launch::<16, _>(
        &s,
        1,
        &s.upload(&x).unwrap(),
        &mut fd,
        &mut od,
        &s.upload(&cube).unwrap(),
        &mut pd,
    )
    .unwrap();
    same(&s, "reshape", &fd, &flat, 0.0);
    same(&s, "outer product", &od, &outer, 1e-6);
    same(&s, "3-D reduce + permute", &pd, &plane, 1e-6);
}

// ---- gather and scatter -----------------------------------------------------------------------------

#[tile::kernel(R = [16], C = [64])]
fn gather_rows<const R: usize, const C: usize>(
    ids: &Tensor<i32>,
    table: &Tensor<f32>,
    out: &mut Tensor<f32>,
    perm: &Tensor<i32>,
    moved: &mut Tensor<f32>,
) {
    let b = block_id(0);
    let rows = ids.load([b], [R]).reshape([R, 1]);
    let cols = arange(C).reshape([1, C]);
    let picked = table.gather([rows, cols]).pad(-1.0);
    out.store([b, 0], picked);
    // Lanes past the end get index -1: out of bounds, so they scatter nothing.
    let dest = perm.load([b], [R]).pad(-1);
    moved.scatter([dest], picked.sum(1).reshape([R]));
}

fn gather_and_scatter_by_index_tiles(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(30);
    let (vocab, c, n) = (40, 50, 37);
    let table = random_f32(&mut rng, &[vocab, c], 1.0);
    // Some ids fall outside the table: their rows read the padding.
    let ids = HostTensor::from_vec((0..n).map(|_| rng.below(vocab + 5) as i32).collect(), &[n]).unwrap();
    let mut order: Vec<i32> = (0..n as i32).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let perm = HostTensor::from_vec(order.clone(), &[n]).unwrap();
    let mut out = HostTensor::full(&[n, 64], f32::NAN);
    let mut moved = HostTensor::full(&[n], f32::NAN);
    gather_rows::launch::<16, 64, _>(&Cpu, cdiv(n, 16), &ids, &table, &mut out, &perm, &mut moved).unwrap();
    for (i, &dest) in order.iter().enumerate() {
        let id = ids.at(&[i]) as usize;
        let mut sum = 0.0f64;
        for j in 0..c {
            let want = if id < vocab { table.at(&[id, j]) } else { -1.0 };
            assert_eq!(out.at(&[i, j]), want);
            sum += want as f64;
        }
        sum -= (64 - c) as f64;
        assert!((moved.at(&[dest as usize]) as f64 - sum).abs() < 1e-4);
    }
    let Some(s) = gpu(&d) else {
        return;
    };
    let mut od = s.full(&[n, 64], f32::NAN).unwrap();
    let mut md = s.full(&[n], f32::NAN).unwrap();
    gather_rows::launch::<16, 64, _>(
        &s,
        cdiv(n, 16),
        &s.upload(&ids).unwrap(),
        &s.upload(&table).unwrap(),
        &mut od,
        &s.upload(&perm).unwrap(),
        &mut md,
    )
    .unwrap();
    same(&s, "gather", &od, &out, 0.0);
    same(&s, "scatter", &md, &moved, 1e-6);
}

// ---- scalars: get, num_blocks, scalar arithmetic --------------------------------------------------

#[tile::kernel(B = [128])]
fn scalars<const B: usize>(x: &Tensor<f32>, params: &Tensor<f32>, y: &mut Tensor<f32>, shift: i32) {
    let i = block_id(0);
    let n = num_blocks(0);
    let gain = params.get([0]) * 2.0 + params.get([7]);
    let t = x.load([(i + shift) % n], [B]);
    y.store([i], t * gain + (i * 10) as f32);
}

fn block_uniform_scalars(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(31);
    let n = 128 * 5;
    let x = random_f32(&mut rng, &[n], 1.0);
    let params = HostTensor::from_vec(vec![1.5f32, 0.0, 0.0], &[3]).unwrap();
    let mut y = HostTensor::full(&[n], f32::NAN);
    scalars::launch::<128, _>(&Cpu, 5, &x, &params, &mut y, 2).unwrap();
    for i in 0..5 {
        for k in 0..128 {
            let src = x.at(&[((i + 2) % 5) * 128 + k]);
            // params.get([7]) is out of bounds: it reads 0.
            assert_eq!(y.at(&[i * 128 + k]), src * 3.0 + (i * 10) as f32);
        }
    }
    let Some(s) = gpu(&d) else { return };
    let mut yd = s.full(&[n], f32::NAN).unwrap();
    scalars::launch::<128, _>(&s, 5, &s.upload(&x).unwrap(), &s.upload(&params).unwrap(), &mut yd, 2).unwrap();
    // ptxas fuses the multiply-add into one FMA: the last bit may differ from the CPU.
    same(&s, "scalars", &yd, &y, 1e-7);
}

// ---- grouped tile order ------------------------------------------------------------------------------

#[tile::kernel]
fn tile_order(order: &mut Tensor<i32>, tiles_m: i32, tiles_n: i32) {
    let [m, n] = group_tiles(block_id(0), tiles_m, tiles_n, 4);
    order.store([m, n], full([1, 1], block_id(0)));
}

fn group_tiles_visits_every_tile_once_in_groups_of_rows(d: Option<Arc<Device>>) {
    let (tm, tn) = (10, 7);
    let mut order = HostTensor::full(&[tm, tn], -1);
    tile_order::launch(&Cpu, (tm * tn) as u32, &mut order, tm as i32, tn as i32).unwrap();
    let mut seen: Vec<i32> = order.to_vec();
    // Blocks 0..3 take column 0 of rows 0..3, then column 1 of the same rows.
    assert_eq!((order.at(&[0, 0]), order.at(&[3, 0]), order.at(&[0, 1])), (0, 3, 4));
    // The last group has only two rows (10 = 4 + 4 + 2).
    assert_eq!((order.at(&[8, 0]), order.at(&[9, 0]), order.at(&[8, 1])), (56, 57, 58));
    seen.sort();
    assert_eq!(seen, (0..(tm * tn) as i32).collect::<Vec<_>>());
    let Some(s) = gpu(&d) else {
        return;
    };
    let mut od = s.full(&[tm, tn], -1).unwrap();
    tile_order::launch(&s, (tm * tn) as u32, &mut od, tm as i32, tn as i32).unwrap();
    same(&s, "group_tiles", &od, &order, 0.0);
}

// ---- two products in one loop, one of a computed tile: attention with `mma` ---------------------

/// Causal attention of one sequence with both products on the tensor cores:
/// the scores `q @ k^T`, then `p @ v` with `p` computed in the loop (the
/// online softmax's numerators), not loaded. `q, k, v, out: [T, D]`;
/// weights `2^(scale * q.k)`, normalized.
#[tile::kernel(T = [f32, bf16], BQ = [32], BK = [32], D = [64])]
fn mma_attention<T, const BQ: usize, const BK: usize, const D: usize>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &mut Tensor<T>,
    scale: f32,
) {
    let qb = block_id(0);
    let qt = q.load([qb, 0], [BQ, D]);
    let q_pos = (qb * BQ + arange(BQ)).reshape([BQ, 1]);
    let mut m = full([BQ, 1], f32::NEG_INFINITY);
    let mut l = zeros([BQ, 1]);
    let mut acc = zeros([BQ, D]);
    for j in 0..cdiv((qb + 1) * BQ, BK) {
        let k_pos = (j * BK + arange(BK)).reshape([1, BK]);
        let s = mma(qt, k.load([j, 0], [BK, D]).transpose(), zeros([BQ, BK])) * scale;
        let s = select(k_pos <= q_pos, s, f32::NEG_INFINITY);
        let m_new = max(m, s.max(1));
        let p = exp2(s - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + p.sum(1);
        acc = mma(p.cast::<T>(), v.load([j, 0], [BK, D]), acc * alpha);
        m = m_new;
    }
    out.store([qb, 0], (acc / l).cast::<T>());
}

fn mma_attention_case<T: Num>(d: Option<&Arc<tile::Device>>, rng: &mut Rng, t: usize, tol: f64) {
    let (dim, scale) = (64, 0.125f32);
    let [q, k, v] = [0, 1, 2].map(|_| host::<T>(&rng.normals(t * dim, 1.0), &[t, dim]));
    let (qv, kv, vv) = (values(&q), values(&k), values(&v));
    let mut reference = vec![0.0; t * dim];
    for i in 0..t {
        let s: Vec<f64> = (0..=i)
            .map(|j| scale as f64 * (0..dim).map(|e| qv[i * dim + e] * kv[j * dim + e]).sum::<f64>())
            .collect();
        let top = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - top).exp2()).collect();
        let total: f64 = w.iter().sum();
        for e in 0..dim {
            reference[i * dim + e] = (0..=i).map(|j| w[j] * vv[j * dim + e]).sum::<f64>() / total;
        }
    }
    let mut want = host::<T>(&vec![f64::NAN; t * dim], &[t, dim]);
    mma_attention::launch::<T, 32, 32, 64, _>(&Cpu, cdiv(t, 32), &q, &k, &v, &mut want, scale).unwrap();
    let what = format!("mma attention {} T={t}", T::DTYPE);
    // The CPU's `mma` is exact; `p` is rounded to `T` before the second product.
    assert_close(&what, &values(&want), &reference, T::TOL.max(1e-5));
    let Some(d) = d else { return };
    let s = d.stream();
    let [qd, kd, vd] = [&q, &k, &v].map(|x| s.upload(x).unwrap());
    on_every_path(d, || {
        let mut od = s.upload(&host::<T>(&vec![f64::NAN; t * dim], &[t, dim])).unwrap();
        mma_attention::launch::<T, 32, 32, 64, _>(&s, cdiv(t, 32), &qd, &kd, &vd, &mut od, scale).unwrap();
        same(&s, &what, &od, &want, tol);
    });
}

fn mma_multiplies_computed_tiles_in_a_loop(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(31);
    // A sequence shorter than one tile, and a ragged one of several.
    for t in [20, 133] {
        mma_attention_case::<f32>(d.as_ref(), &mut rng, t, 2e-3);
        mma_attention_case::<bf16>(d.as_ref(), &mut rng, t, bf16::TOL);
    }
}

// ---- shape contracts ----------------------------------------------------------

/// `y = x * w` row by row, and per row its mean and the row count: the
/// body reads the declared symbols `M` and `N`; `w` is as long as the
/// const `B`, `stats` two wide, and `y` may be wider than `x`.
#[tile::kernel(B = [64])]
fn scaled_rows<const B: usize>(
    x: &Tensor<f32, { [M, N] }>,
    w: &Tensor<f32, { [B] }>,
    stats: &mut Tensor<f32, { [M, 2] }>,
    y: &mut Tensor<f32, { [M, _] }>,
) {
    let r = block_id(0);
    let t = x.load([r, 0], [1, B]) * w.load([0], [B]);
    y.store([r, 0], t);
    let mean = t.sum(1) / N as f32;
    stats.store([r, 0], select(arange(2).reshape([1, 2]) == 0, mean, M as f32));
}

fn declared_shapes_are_checked_at_launch(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(41);
    let (m, n) = (5, 37);
    let x = random_f32(&mut rng, &[m, n], 1.0);
    let w = random_f32(&mut rng, &[64], 1.0);
    let run = |x: &HostTensor<f32>, w: &HostTensor<f32>, stats: &[usize], y: &[usize]| {
        let mut st = HostTensor::full(stats, f32::NAN);
        let mut yt = HostTensor::full(y, f32::NAN);
        let grid = x.shape()[0] as u32;
        let r = match &s {
            None => scaled_rows::launch::<64, _>(&Cpu, grid, x, w, &mut st, &mut yt),
            Some(s) => {
                let (xg, wg) = (s.upload(x).unwrap(), s.upload(w).unwrap());
                let (mut sg, mut yg) = (s.upload(&st).unwrap(), s.upload(&yt).unwrap());
                let r = scaled_rows::launch::<64, _>(s, grid, &xg, &wg, &mut sg, &mut yg);
                st = s.download(&sg).unwrap();
                yt = s.download(&yg).unwrap();
                r
            }
        };
        (r, st, yt)
    };

    // Shapes that keep the contract run; the body's `M` and `N` are the
    // sizes. `y`'s columns past `x`'s are its padding times `w`: zeros.
    let (r, stats, y) = run(&x, &w, &[m, 2], &[m, n + 3]);
    r.unwrap();
    let (xv, wv) = (as_f64(&x), as_f64(&w));
    let mut want_y = vec![0.0; m * (n + 3)];
    let mut want_stats = Vec::new();
    for i in 0..m {
        let row: Vec<f64> = (0..n).map(|j| xv[i * n + j] * wv[j]).collect();
        want_y[i * (n + 3)..i * (n + 3) + n].copy_from_slice(&row);
        want_stats.extend([row.iter().sum::<f64>() / n as f64, m as f64]);
    }
    assert_close("scaled rows", &as_f64(&y), &want_y, 1e-5);
    assert_close("row stats", &as_f64(&stats), &want_stats, 1e-5);

    // Each broken contract is a typed error naming the tensor and the
    // dimension, and nothing is written.
    let broken =
        |what: &str, w: &HostTensor<f32>, (stats, y): (&[usize], &[usize]), want: (&str, usize, usize, usize)| {
            let (r, stats, y) = run(&x, w, stats, y);
            match r {
                Err(tile::Error::ShapeContract {
                    param,
                    axis,
                    found,
                    expected,
                    ..
                }) => assert_eq!((param, axis, found, expected), want, "{what}"),
                other => panic!("{what}: expected a shape-contract error, got {other:?}"),
            }
            assert!(
                as_f64(&stats).iter().chain(&as_f64(&y)).all(|v| v.is_nan()),
                "{what}: a launch that breaks its contract wrote output"
            );
        };
    let short_w = random_f32(&mut rng, &[63], 1.0);
    broken(
        "w shorter than the const B",
        &short_w,
        (&[m, 2], &[m, n]),
        ("w", 0, 63, 64),
    );
    broken("stats three wide", &w, (&[m, 3], &[m, n]), ("stats", 1, 3, 2));
    broken("y a row short", &w, (&[m, 2], &[m - 1, n]), ("y", 0, m - 1, m));
    let (r, _, _) = run(&x, &w, &[m, 2], &[m - 1, n]);
    assert_eq!(
        r.unwrap_err().to_string(),
        "scaled_rows: tensor `y` is declared [M, _], so its dimension 0 must be 5 (`M` is `x`'s dimension 0), but it is 4"
    );
}

// ---- scans ------------------------------------------------------------------------

/// Scans of each row of `x` in `[R, C]` tiles (`C >= N`): forward cumsum,
/// cumprod, cummax, cummin, then cumsum and cummax from the end (padding
/// loads as 0 and -inf: neither changes them).
#[tile::kernel(R = [4], C = [64])]
fn row_scans<const R: usize, const C: usize>(x: &Tensor<f32, { [M, N] }>, out: &mut Tensor<f32, { [6, M, N] }>) {
    let i = block_id(0);
    let t = x.load([i, 0], [R, C]);
    out.store([0, i, 0], t.cumsum(1).reshape([1, R, C]));
    out.store([1, i, 0], t.cumprod(1).reshape([1, R, C]));
    out.store([2, i, 0], t.cummax(1).reshape([1, R, C]));
    out.store([3, i, 0], t.cummin(1).reshape([1, R, C]));
    out.store([4, i, 0], t.cumsum_rev(1).reshape([1, R, C]));
    let low = x.load([i, 0], [R, C]).pad(f32::NEG_INFINITY);
    out.store([5, i, 0], low.cummax_rev(1).reshape([1, R, C]));
}

/// Running sums of `x` in `[B]` tiles, each tile on its own, over four
/// warps (the scanned axis spans them); and down the columns of
/// each tile seen as `[B / 8, 8]`, running minima from the bottom, a scan
/// along axis 0 (the padding, which a scan from the end meets first, is
/// larger than every value).
#[tile::kernel(T = [i32, bf16], B = [1024], num_warps = 4)]
fn line_scans<T, const B: usize>(x: &Tensor<T, { [N] }>, sums: &mut Tensor<T, { [N] }>, mins: &mut Tensor<T, { [N] }>) {
    let i = block_id(0);
    sums.store([i], x.load([i], [B]).cumsum(0));
    let t = x.load([i], [B]).pad(10000);
    mins.store([i], t.reshape([B / 8, 8]).cummin_rev(0).reshape([B]));
}

/// The f64 scan of each `len`-long line of `x` (`stride` apart, lines
/// starting at `starts`), from the end where `reverse`.
fn scan_ref(
    x: &[f64],
    starts: &[usize],
    (len, stride): (usize, usize),
    f: fn(f64, f64) -> f64,
    reverse: bool,
) -> Vec<f64> {
    let mut out = x.to_vec();
    for &s in starts {
        let mut order: Vec<usize> = (0..len).map(|k| s + k * stride).collect();
        if reverse {
            order.reverse();
        }
        let mut acc: Option<f64> = None;
        for at in order {
            let v = acc.map_or(x[at], |a| f(a, x[at]));
            acc = Some(v);
            out[at] = v;
        }
    }
    out
}

fn scans_match_f64_on_ragged_rows(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(43);
    for (m, n) in [(5, 37), (3, 1), (4, 64), (9, 50)] {
        // Near 1, so that products stay in range.
        let xs: Vec<f64> = (0..m * n).map(|_| 1.0 + 0.2 * rng.normal()).collect();
        let x = host::<f32>(&xs, &[m, n]);
        let mut out = HostTensor::full(&[6, m, n], f32::NAN);
        let grid = cdiv(m, 4);
        row_scans::launch::<4, 64, _>(&Cpu, grid, &x, &mut out).unwrap();
        let rows: Vec<usize> = (0..m).map(|r| r * n).collect();
        let line = (n, 1);
        let wants = [
            scan_ref(&xs, &rows, line, |a, b| a + b, false),
            scan_ref(&xs, &rows, line, |a, b| a * b, false),
            scan_ref(&xs, &rows, line, f64::max, false),
            scan_ref(&xs, &rows, line, f64::min, false),
            scan_ref(&xs, &rows, line, |a, b| a + b, true),
            scan_ref(&xs, &rows, line, f64::max, true),
        ];
        let got = as_f64(&out);
        for (k, want) in wants.iter().enumerate() {
            let what = format!("row scan {k} of [{m}, {n}]");
            assert_close(&what, &got[k * m * n..(k + 1) * m * n], want, 1e-6);
        }
        if let Some(s) = &s {
            let mut od = s.upload(&HostTensor::full(&[6, m, n], f32::NAN)).unwrap();
            row_scans::launch::<4, 64, _>(s, grid, &s.upload(&x).unwrap(), &mut od).unwrap();
            same(s, &format!("row scans of [{m}, {n}]"), &od, &out, 1e-5);
        }
    }

    // All equal, and a NaN: the running maximum skips it (NaN loses, as in
    // `max`), the running sum carries it.
    let mut xs = vec![2.0; 8];
    xs[3] = f64::NAN;
    let x = host::<f32>(&xs, &[1, 8]);
    let mut out = HostTensor::full(&[6, 1, 8], f32::NAN);
    row_scans::launch::<4, 64, _>(&Cpu, 1, &x, &mut out).unwrap();
    let got = as_f64(&out);
    assert_eq!(&got[16..24], &[2.0; 8], "cummax skips NaN");
    assert!(got[3..8].iter().all(|v| v.is_nan()) && got[..3] == [2.0, 4.0, 6.0]);
    if let Some(s) = &s {
        let mut od = s.upload(&HostTensor::full(&[6, 1, 8], f32::NAN)).unwrap();
        row_scans::launch::<4, 64, _>(s, 1, &s.upload(&x).unwrap(), &mut od).unwrap();
        let g = as_f64(&s.download(&od).unwrap());
        assert_eq!(&g[16..24], &[2.0; 8], "GPU cummax skips NaN");
    }

    let n = 2500;
    let ints: Vec<f64> = (0..n).map(|_| rng.below(200) as f64 - 100.0).collect();
    line_case::<i32>(&s, &ints, 0.0);
    let halves: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    line_case::<bf16>(&s, &halves, 2e-2);
}

/// [`line_scans`] on `xs` against f64: sums within each 1024-long tile, and
/// minima from the bottom of each column of a tile seen as `[128, 8]`.
fn line_case<T: Num>(s: &Option<Stream>, xs: &[f64], tol: f64) {
    let n = xs.len();
    let x = host::<T>(xs, &[n]);
    let xv = as_f64(&x);
    let tiles: Vec<usize> = (0..n).step_by(1024).collect();
    let mut want_sums = Vec::new();
    for &t in &tiles {
        let len = (n - t).min(1024);
        want_sums.extend(scan_ref(&xv[t..t + len], &[0], (len, 1), |a, b| a + b, false));
    }
    // Columns of 8-wide rows, each to the tile's end (padding: 10000).
    let mut padded = xv.clone();
    padded.resize(tiles.len() * 1024, 10000.0);
    let starts: Vec<usize> = tiles.iter().flat_map(|&t| (0..8).map(move |c| t + c)).collect();
    let mut want_mins = scan_ref(&padded, &starts, (128, 8), f64::min, true);
    want_mins.truncate(n);
    let (mut sums, mut mins) = (HostTensor::<T>::zeros(&[n]), HostTensor::<T>::zeros(&[n]));
    let grid = cdiv(n, 1024);
    line_scans::launch::<T, 1024, _>(&Cpu, grid, &x, &mut sums, &mut mins).unwrap();
    assert_close(
        &format!("{} line cumsum", T::DTYPE),
        &as_f64(&sums),
        &want_sums,
        tol.max(1e-9),
    );
    assert_close(
        &format!("{} column cummin_rev", T::DTYPE),
        &as_f64(&mins),
        &want_mins,
        1e-9,
    );
    if let Some(s) = s {
        let (mut sd, mut md) = (s.zeros::<T>(&[n]).unwrap(), s.zeros::<T>(&[n]).unwrap());
        line_scans::launch::<T, 1024, _>(s, grid, &s.upload(&x).unwrap(), &mut sd, &mut md).unwrap();
        same(s, &format!("{} line cumsum", T::DTYPE), &sd, &sums, tol);
        same(s, &format!("{} column cummin_rev", T::DTYPE), &md, &mins, 0.0);
    }
}

// ---- sorts ------------------------------------------------------------------------

/// Each row of `x` in `[R, C]` tiles sorted ascending and descending, with
/// the positions of the descending order. The padding (zeros) sorts among
/// the values; the first `N` are stored.
#[tile::kernel(T = [f32, i32, bf16], R = [2], C = [64])]
fn row_sorts<T, const R: usize, const C: usize>(
    x: &Tensor<T, { [M, N] }>,
    up: &mut Tensor<T, { [M, N] }>,
    down: &mut Tensor<T, { [M, N] }>,
    order: &mut Tensor<i32, { [M, N] }>,
) {
    let i = block_id(0);
    let t = x.load([i, 0], [R, C]);
    up.store([i, 0], t.sort(1));
    down.store([i, 0], t.sort_desc(1));
    order.store([i, 0], t.argsort_desc(1));
}

/// One `[B]` tile per block sorted over four warps (the axis spans them),
/// and its columns seen as `[B / 8, 8]` sorted: a sort along axis 0.
#[tile::kernel(B = [1024], num_warps = 4)]
fn line_sorts<const B: usize>(
    x: &Tensor<f32, { [N] }>,
    sorted: &mut Tensor<f32, { [N] }>,
    columns: &mut Tensor<i32, { [N] }>,
) {
    let i = block_id(0);
    let t = x.load([i], [B]);
    sorted.store([i], t.sort(0));
    columns.store([i], t.reshape([B / 8, 8]).argsort(0).reshape([B]));
}

/// `len` elements `stride` apart from each of `starts`, ordered: their
/// positions in sorted order (NaN the largest, ties in position order).
fn argsort_ref(x: &[f64], starts: &[usize], (len, stride): (usize, usize), descending: bool) -> Vec<Vec<usize>> {
    starts
        .iter()
        .map(|&s| {
            let key = |i: usize| {
                let v = x[s + i * stride];
                (v.is_nan(), if v.is_nan() { 0.0 } else { v })
            };
            let mut order: Vec<usize> = (0..len).collect();
            order.sort_by(|&i, &j| {
                let o = key(i).partial_cmp(&key(j)).unwrap();
                if descending { o.reverse() } else { o }
            });
            order
        })
        .collect()
}

fn sorts_order_rows_with_ties_and_nan(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(47);
    for (m, n) in [(5, 37), (3, 1), (4, 64)] {
        // Few distinct values: many ties.
        let mut xs: Vec<f64> = (0..m * n).map(|_| rng.below(9) as f64 - 4.0).collect();
        xs[n / 2] = f64::NAN;
        sorts_case::<f32>(&s, &xs, (m, n));
        let ints: Vec<f64> = xs.iter().map(|v| if v.is_nan() { 7.0 } else { *v }).collect();
        sorts_case::<i32>(&s, &ints, (m, n));
        sorts_case::<bf16>(&s, &xs, (m, n));
    }

    let n = 2100;
    let xs: Vec<f64> = (0..n).map(|_| rng.below(50) as f64).collect();
    let x = host::<f32>(&xs, &[n]);
    let (mut sorted, mut columns) = (HostTensor::<f32>::zeros(&[n]), HostTensor::<i32>::zeros(&[n]));
    let grid = cdiv(n, 1024);
    line_sorts::launch::<1024, _>(&Cpu, grid, &x, &mut sorted, &mut columns).unwrap();
    for (t, tile) in (0..n).step_by(1024).enumerate() {
        // Padding (0) sorts among the values: the stored prefix of a sorted
        // padded tile.
        let mut padded: Vec<f64> = xs[tile..(tile + 1024).min(n)].to_vec();
        padded.resize(1024, 0.0);
        let mut want = padded.clone();
        want.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let len = (n - tile).min(1024);
        assert_eq!(&as_f64(&sorted)[tile..tile + len], &want[..len], "tile {t} sorted");
        let starts: Vec<usize> = (0..8).collect();
        let orders = argsort_ref(&padded, &starts, (128, 8), false);
        let got = columns.to_vec();
        for (c, order) in orders.iter().enumerate() {
            for (k, &i) in order.iter().enumerate() {
                let at = tile + k * 8 + c;
                if at < n {
                    assert_eq!(got[at], i as i32, "tile {t} column {c} rank {k}");
                }
            }
        }
    }
    if let Some(s) = &s {
        let (mut sd, mut cd) = (s.zeros::<f32>(&[n]).unwrap(), s.zeros::<i32>(&[n]).unwrap());
        line_sorts::launch::<1024, _>(s, grid, &s.upload(&x).unwrap(), &mut sd, &mut cd).unwrap();
        same(s, "line sort", &sd, &sorted, 0.0);
        same(s, "column argsort", &cd, &columns, 0.0);
    }
}

/// [`row_sorts`] of `xs` (`[m, n]`) on the CPU against f64 orders, then
/// the GPU against the CPU, exactly.
fn sorts_case<T: Num>(s: &Option<Stream>, xs: &[f64], (m, n): (usize, usize)) {
    let x = host::<T>(xs, &[m, n]);
    let xv = as_f64(&x);
    let out = || HostTensor::<T>::full(&[m, n], T::of(0.5));
    let (mut up, mut down, mut order) = (out(), out(), HostTensor::<i32>::full(&[m, n], -1));
    let grid = cdiv(m, 2);
    row_sorts::launch::<T, 2, 64, _>(&Cpu, grid, &x, &mut up, &mut down, &mut order).unwrap();
    let what = format!("{} rows [{m}, {n}]", T::DTYPE);
    // Ascending, padding (0) included: the first N of the padded row sorted.
    let mut padded = Vec::new();
    for r in 0..m {
        padded.extend_from_slice(&xv[r * n..r * n + n]);
        padded.resize((r + 1) * 64, 0.0);
    }
    let rows64: Vec<usize> = (0..m).map(|r| r * 64).collect();
    let ups = argsort_ref(&padded, &rows64, (64, 1), false);
    let downs = argsort_ref(&padded, &rows64, (64, 1), true);
    let (gu, gd, go) = (as_f64(&up), as_f64(&down), order.to_vec());
    for r in 0..m {
        for k in 0..n {
            let same_value = |got: f64, want: f64| got == want || (got.is_nan() && want.is_nan());
            let want_up = padded[r * 64 + ups[r][k]];
            assert!(same_value(gu[r * n + k], want_up), "{what}: sort row {r} rank {k}");
            let i = downs[r][k];
            assert!(
                same_value(gd[r * n + k], padded[r * 64 + i]),
                "{what}: sort_desc row {r} rank {k}"
            );
            assert_eq!(go[r * n + k], i as i32, "{what}: argsort_desc row {r} rank {k}");
        }
    }
    if let Some(s) = s {
        let xd = s.upload(&x).unwrap();
        let (mut ud, mut dd, mut od) = (
            s.upload(&out()).unwrap(),
            s.upload(&out()).unwrap(),
            s.upload(&HostTensor::<i32>::full(&[m, n], -1)).unwrap(),
        );
        row_sorts::launch::<T, 2, 64, _>(s, grid, &xd, &mut ud, &mut dd, &mut od).unwrap();
        for (name, got, want) in [("sort", &ud, &up), ("sort_desc", &dd, &down)] {
            let (g, w) = (as_f64(&s.download(got).unwrap()), as_f64(want));
            let equal = g.iter().zip(&w).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            assert!(equal, "{what}: GPU {name} differs from the CPU backend");
        }
        same(s, &format!("{what}: argsort_desc"), &od, &order, 0.0);
    }
}

/// The `K` largest of each row of `x` in `[R, C]` tiles, largest first,
/// and their columns. The padding (-inf) sorts below every value.
#[tile::kernel(T = [f32, bf16], R = [4], C = [512], K = [1, 8, 64], num_warps = 4)]
fn row_topk<T, const R: usize, const C: usize, const K: usize>(
    x: &Tensor<T, { [M, N] }>,
    values: &mut Tensor<T, { [M, J] }>,
    columns: &mut Tensor<i32, { [M, J] }>,
) {
    let i = block_id(0);
    let t = x.load([i, 0], [R, C]).pad(f32::NEG_INFINITY);
    values.store([i, 0], t.topk(1, K));
    columns.store([i, 0], t.argtopk(1, K));
}

/// [`row_topk`] of `xs` (`[m, n]`) on the CPU against f64 orders, then
/// the GPU against the CPU, exactly.
fn topk_case<T: Num, const K: usize>(s: &Option<Stream>, xs: &[f64], (m, n): (usize, usize)) {
    let x = host::<T>(xs, &[m, n]);
    let xv = as_f64(&x);
    let mut padded = Vec::new();
    for r in 0..m {
        padded.extend_from_slice(&xv[r * n..r * n + n]);
        padded.resize((r + 1) * 512, f64::NEG_INFINITY);
    }
    let starts: Vec<usize> = (0..m).map(|r| r * 512).collect();
    let orders = argsort_ref(&padded, &starts, (512, 1), true);
    let what = format!("{} rows [{m}, {n}], top {K}", T::DTYPE);
    let fresh = || {
        (
            HostTensor::<T>::full(&[m, K], T::of(0.5)),
            HostTensor::<i32>::full(&[m, K], -1),
        )
    };
    let (mut v, mut c) = fresh();
    let grid = cdiv(m, 4);
    row_topk::launch::<T, 4, 512, K, _>(&Cpu, grid, &x, &mut v, &mut c).unwrap();
    let (gv, gc) = (as_f64(&v), c.to_vec());
    for (r, order) in orders.iter().enumerate() {
        for k in 0..K {
            let want = padded[r * 512 + order[k]];
            let got = gv[r * K + k];
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "{what}: row {r} rank {k}: {got} against {want}"
            );
            assert_eq!(gc[r * K + k], order[k] as i32, "{what}: row {r} rank {k} column");
        }
    }
    if let Some(s) = s {
        let (v0, c0) = fresh();
        let (mut vd, mut cd) = (s.upload(&v0).unwrap(), s.upload(&c0).unwrap());
        row_topk::launch::<T, 4, 512, K, _>(s, grid, &s.upload(&x).unwrap(), &mut vd, &mut cd).unwrap();
        let (g, w) = (as_f64(&s.download(&vd).unwrap()), as_f64(&v));
        let equal = g.iter().zip(&w).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
        assert!(equal, "{what}: GPU topk differs from the CPU backend");
        same(s, &format!("{what}: argtopk"), &cd, &c, 0.0);
    }
}

fn topk_keeps_the_largest_with_ties_and_nan(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(56);
    for (m, n) in [(5, 300), (3, 512), (2, 37), (1, 1)] {
        // Few distinct values: many ties.
        let mut xs: Vec<f64> = (0..m * n).map(|_| rng.below(23) as f64 - 11.0).collect();
        xs[n / 2] = f64::NAN;
        topk_case::<f32, 1>(&s, &xs, (m, n));
        topk_case::<f32, 8>(&s, &xs, (m, n));
        topk_case::<f32, 64>(&s, &xs, (m, n));
        topk_case::<bf16, 64>(&s, &xs, (m, n));
        let wide: Vec<f64> = rng.normals(m * n, 3.0);
        topk_case::<f32, 64>(&s, &wide, (m, n));
        topk_case::<bf16, 8>(&s, &wide, (m, n));
    }
}

// ---- atomics ------------------------------------------------------------------------

/// A histogram of `x`, one `[T]` tile per block: per bin the count and the
/// sum of `w` (values outside `0..BINS` are dropped, as a scatter drops
/// them), and the largest and smallest value in `extremes`.
#[tile::kernel(T = [256])]
fn histogram<const T: usize>(
    x: &Tensor<i32, { [N] }>,
    w: &Tensor<f32, { [N] }>,
    counts: &mut Tensor<u32, { [BINS] }>,
    sums: &mut Tensor<f32, { [BINS] }>,
    extremes: &mut Tensor<i32, { [2] }>,
) {
    let i = block_id(0);
    let v = x.load([i], [T]).pad(-1);
    counts.atomic_add([v], full([T], 1u32));
    sums.atomic_add([v], w.load([i], [T]));
    let inside = i * T + arange(T) < N;
    extremes.atomic_max([full([T], 0)], select(inside, v, -2147483648));
    extremes.atomic_min([full([T], 1)], select(inside, v, 2147483647));
}

/// `sums[x[e]] += w[e]` in a 16-bit float type.
#[tile::kernel(T = [f16, bf16], B = [256])]
fn scatter_add<T, const B: usize>(x: &Tensor<i32, { [N] }>, w: &Tensor<T, { [N] }>, sums: &mut Tensor<T, { [BINS] }>) {
    let i = block_id(0);
    sums.atomic_add([x.load([i], [B]).pad(-1)], w.load([i], [B]));
}

fn half_scatter_add<T: Num>(s: &Option<Stream>, rng: &mut Rng) {
    let (n, bins) = (300, 37);
    let xs: Vec<i32> = (0..n).map(|_| rng.below(bins) as i32).collect();
    let w = host::<T>(&rng.normals(n, 1.0), &[n]);
    let mut want = vec![0.0f64; bins];
    for (v, wv) in xs.iter().zip(as_f64(&w)) {
        want[*v as usize] += wv;
    }
    let x = HostTensor::from_vec(xs, &[n]).unwrap();
    let mut sums = HostTensor::<T>::zeros(&[bins]);
    let grid = cdiv(n, 256);
    scatter_add::launch::<T, 256, _>(&Cpu, grid, &x, &w, &mut sums).unwrap();
    // Each add rounds to the 16-bit type.
    let what = format!("{} scatter-add", T::DTYPE);
    assert_close(&what, &as_f64(&sums), &want, 4.0 * T::TOL);
    if let Some(s) = s {
        let mut sd = s.zeros::<T>(&[bins]).unwrap();
        scatter_add::launch::<T, 256, _>(s, grid, &s.upload(&x).unwrap(), &s.upload(&w).unwrap(), &mut sd).unwrap();
        assert_close(&what, &as_f64(&s.download(&sd).unwrap()), &want, 4.0 * T::TOL);
    }
}

fn atomics_combine_every_element(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(53);
    let (n, bins) = (3000, 37);
    // Some values outside the bins on both sides.
    let xs: Vec<i32> = (0..n).map(|_| rng.below(bins + 6) as i32 - 3).collect();
    let ws = rng.normals(n, 1.0);
    let x = HostTensor::from_vec(xs.clone(), &[n]).unwrap();
    let w = host::<f32>(&ws, &[n]);
    let mut want_counts = vec![0u32; bins];
    let mut want_sums = vec![0.0f64; bins];
    for (v, wv) in xs.iter().zip(&as_f64(&w)) {
        if (0..bins as i32).contains(v) {
            want_counts[*v as usize] += 1;
            want_sums[*v as usize] += wv;
        }
    }
    let want_extremes = vec![*xs.iter().max().unwrap(), *xs.iter().min().unwrap()];
    let fresh = || {
        (
            HostTensor::<u32>::zeros(&[bins]),
            HostTensor::<f32>::zeros(&[bins]),
            HostTensor::from_vec(vec![i32::MIN, i32::MAX], &[2]).unwrap(),
        )
    };
    let grid = cdiv(n, 256);
    let (mut counts, mut sums, mut extremes) = fresh();
    histogram::launch::<256, _>(&Cpu, grid, &x, &w, &mut counts, &mut sums, &mut extremes).unwrap();
    assert_eq!(counts.to_vec(), want_counts);
    assert_close("histogram sums", &as_f64(&sums), &want_sums, 1e-6);
    assert_eq!(extremes.to_vec(), want_extremes);
    if let Some(s) = &s {
        let (c, w0, e) = fresh();
        let (mut cd, mut sd, mut ed) = (s.upload(&c).unwrap(), s.upload(&w0).unwrap(), s.upload(&e).unwrap());
        histogram::launch::<256, _>(
            s,
            grid,
            &s.upload(&x).unwrap(),
            &s.upload(&w).unwrap(),
            &mut cd,
            &mut sd,
            &mut ed,
        )
        .unwrap();
        assert_eq!(s.download(&cd).unwrap().to_vec(), want_counts, "GPU counts");
        // The GPU adds in no fixed order.
        assert_close(
            "GPU histogram sums",
            &as_f64(&s.download(&sd).unwrap()),
            &want_sums,
            1e-5,
        );
        assert_eq!(s.download(&ed).unwrap().to_vec(), want_extremes, "GPU extremes");
    }
    half_scatter_add::<f16>(&s, &mut rng);
    half_scatter_add::<bf16>(&s, &mut rng);
}

/// Each block stores its tile's sum and counts itself in; the last to
/// count reads every block's sum into `total` and sets the count back to
/// 0. `tickets` gets each block's count before its own, and `misses` what
/// a `fetch_add` outside the tensor gives.
#[tile::kernel(T = [256], P = [1024])]
fn last_block_sums<const T: usize, const P: usize>(
    x: &Tensor<f32, { [N] }>,
    partial: &mut Tensor<f32, { [G] }>,
    count: &mut Tensor<u32, { [2] }>,
    tickets: &mut Tensor<u32, { [G] }>,
    misses: &mut Tensor<u32, { [G] }>,
    total: &mut Tensor<f32, { [1] }>,
) {
    let i = block_id(0);
    partial.store([i], x.load([i], [T]).sum(0));
    let ticket = count.fetch_add([0], 1u32);
    tickets.store([i], full([1], ticket));
    if ticket == num_blocks(0).cast::<u32>() - 1 {
        total.store([0], partial.load([0], [P]).sum(0));
        count.store([0], zeros::<u32>([1]));
    }
    misses.store([i], full([1], count.fetch_add([2], 7u32)));
}

fn fetch_add_lets_the_last_block_read_every_block(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(54);
    let blocks = 1000;
    let n = blocks * 256 - 77;
    let xs = rng.normals(n, 1.0);
    let x = host::<f32>(&xs, &[n]);
    let want = as_f64(&x).iter().sum::<f64>();
    let check = |what: &str, (count, tickets, misses, total): Counted| {
        assert_eq!(
            count,
            [0, 0],
            "{what}: the count is set back, the element outside untouched"
        );
        let mut sorted = tickets.clone();
        sorted.sort_unstable();
        assert!(
            sorted.iter().copied().eq(0..blocks as u32),
            "{what}: tickets {tickets:?}"
        );
        assert!(misses.iter().all(|&m| m == 0), "{what}: outside gives 0");
        assert!(
            (total as f64 - want).abs() <= 1e-5 * as_f64(&x).iter().map(|v| v.abs()).sum::<f64>(),
            "{what}: total {total} against {want}"
        );
    };
    // The second launch on a backend finds the count at 0 again.
    let cpu = launches(&Cpu, &x, blocks, 2);
    for (run, got) in cpu.into_iter().enumerate() {
        // Blocks run in order on the CPU.
        assert!(got.1.iter().copied().eq(0..blocks as u32));
        check(&format!("CPU run {run}"), got);
    }
    if let Some(s) = &s {
        for (run, got) in launches(s, &x, blocks, 20).into_iter().enumerate() {
            check(&format!("GPU run {run}"), got);
        }
    }
}

/// Each block loads its `[R, C]` tile of `x` (rows past the end read 0)
/// and gathers it across its cluster of `N` blocks, and its index as a
/// `[1, 1]` tile (the two share a meeting), then the column sums of what
/// it gathered (a gather of a gathered tile, after a meeting): every
/// block stores what it got, the stacked tiles in a cluster's first block
/// and zeros in the others.
#[tile::kernel(T = [f32, bf16], N = [2, 4, 8], R = [2], C = [32])]
fn cluster_tiles<T, const N: usize, const R: usize, const C: usize>(
    x: &Tensor<T>,
    gathered: &mut Tensor<T>,
    ids: &mut Tensor<i32>,
    sums: &mut Tensor<f32>,
) {
    let b = block_id(0);
    let tile = x.load([b, 0], [R, C]);
    let all = tile.cluster_gather(N);
    let who = full([1, 1], b + 100 * block_id(1)).cluster_gather(N);
    let summed = all.cast::<f32>().sum(0).cluster_gather(N);
    gathered.store([b, 0, 0], all.reshape([1, N * R, C]));
    ids.store([b, block_id(1), 0], who.reshape([1, 1, N]));
    sums.store([b, 0, 0], summed.reshape([1, N, C]));
}

fn cluster_gather_hands_every_tile_to_the_first_block(d: Option<Arc<Device>>) {
    fn case<T: Num>(s: &Option<Stream>, rng: &mut Rng, n: usize, clusters: usize) {
        let (r, c) = (2, 32);
        let blocks = n * clusters;
        // Ragged: the last block's tile is cut short, the last block has none.
        let rows = blocks * r - 3;
        let x = host::<T>(&rng.normals(rows * c, 1.0), &[rows, c]);
        let xs = as_f64(&x);
        let mut want = vec![0.0; blocks * n * r * c];
        let mut want_ids = vec![0; blocks * 2 * n];
        let mut want_sums = vec![0.0; blocks * n * c];
        for b in (0..blocks).step_by(n) {
            for k in 0..n {
                for i in 0..r * c {
                    let row = (b + k) * r + i / c;
                    if row < rows {
                        want[(b * n * r) * c + k * r * c + i] = xs[row * c + i % c];
                    }
                }
                for y in 0..2 {
                    want_ids[(b * 2 + y) * n + k] = (b + k + 100 * y) as i32;
                }
            }
            // The first block's column sums; the others gathered zeros.
            for j in 0..c {
                want_sums[b * n * c + j] = (0..n * r).map(|i| want[b * n * r * c + i * c + j]).sum::<f64>();
            }
        }
        let grid = (blocks as u32, 2);
        let consts = [n, r, c];
        let mut g = HostTensor::full(&[blocks, n * r, c], T::of(f64::NAN));
        let mut ids = HostTensor::full(&[blocks, 2, n], -1);
        let mut sums = HostTensor::full(&[blocks, n, c], f32::NAN);
        cluster_tiles::launch_with(&Cpu, &consts, grid, &x, &mut g, &mut ids, &mut sums).unwrap();
        let what = format!("{} tiles in clusters of {n}", std::any::type_name::<T>());
        assert_eq!(as_f64(&g), want, "{what}, CPU");
        assert_eq!(ids.to_vec(), want_ids, "{what}, CPU: block ids");
        assert_close(&format!("{what}, CPU: sums"), &as_f64(&sums), &want_sums, 1e-6);
        // A grid whose x is not a multiple of the cluster's blocks is refused.
        let short = (blocks as u32 - 1, 2);
        let refused = cluster_tiles::launch_with(&Cpu, &consts, short, &x, &mut g, &mut ids, &mut sums);
        assert!(matches!(refused, Err(tile::Error::Grid { .. })), "{what}: {refused:?}");
        let Some(s) = s else { return };
        let xd = s.upload(&x).unwrap();
        let mut gd = s.full(&[blocks, n * r, c], T::of(f64::NAN)).unwrap();
        let mut idd = s.full(&[blocks, 2, n], -1).unwrap();
        let mut sd = s.full(&[blocks, n, c], f32::NAN).unwrap();
        for _ in 0..3 {
            cluster_tiles::launch_with(s, &consts, grid, &xd, &mut gd, &mut idd, &mut sd).unwrap();
        }
        same(s, &format!("{what}, GPU"), &gd, &g, 0.0);
        same(s, &format!("{what}, GPU: block ids"), &idd, &ids, 0.0);
        same(s, &format!("{what}, GPU: sums"), &sd, &sums, 1e-6);
        let refused = cluster_tiles::launch_with(s, &consts, short, &xd, &mut gd, &mut idd, &mut sd);
        assert!(
            matches!(refused, Err(tile::Error::Grid { .. })),
            "{what}, GPU: {refused:?}"
        );
    }
    let s = gpu(&d);
    let mut rng = Rng::new(61);
    for (n, clusters) in [(2, 1), (2, 5), (4, 3), (8, 2), (8, 40)] {
        case::<f32>(&s, &mut rng, n, clusters);
        case::<bf16>(&s, &mut rng, n, clusters);
    }
}

/// `y = x @ w^T` split along K: block `(n + tiles·s, m)` multiplies the
/// `s`-th of `S` runs of K-steps of output tile `(m, n)` and stores it in
/// `partial[s]`; the tile's last block to count itself in sums the `S`
/// partials into `y` and sets the count back to 0. On sm_90a the K-loop
/// takes `wgmma` with ping-pong consumers, two of a persistent block's
/// tiles at once: each consumer warpgroup counts for its own tile.
#[tile::kernel(T = [bf16], BM = [64], BN = [64], BK = [64], num_warps = 4)]
fn split_k_product<T, const BM: usize, const BN: usize, const BK: usize>(
    x: &Tensor<T, { [M, K] }>,
    w: &Tensor<T, { [N, K] }>,
    partial: &mut Tensor<f32, { [S, M, N] }>,
    arrived: &mut Tensor<i32, { [TILES] }>,
    y: &mut Tensor<f32, { [M, N] }>,
) {
    let tiles = cdiv(N, BN);
    let n = block_id(0) % tiles;
    let split = block_id(0) / tiles;
    let m = block_id(1);
    let steps = cdiv(cdiv(K, BK), S);
    let mut acc = zeros([BM, BN]);
    for k in split * steps..min(split * steps + steps, cdiv(K, BK)) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    partial.store([split, m, n], acc.reshape([1, BM, BN]));
    let tile = m * tiles + n;
    if arrived.fetch_add([tile], 1) == S - 1 {
        let mut total = zeros([BM, BN]);
        for s in 0..S {
            total = total + partial.load([s, m, n], [1, BM, BN]).reshape([BM, BN]);
        }
        y.store([m, n], total);
        arrived.store([tile], zeros::<i32>([1]));
    }
}

fn split_k_products_combine_in_the_last_block(d: Option<Arc<Device>>) {
    let mut rng = Rng::new(58);
    // Ragged M and K; 36 column tiles of 8 splits: more blocks than SMs,
    // so persistent blocks take several, both consumers computing.
    let (m, k, n, splits) = (70, 1000, 2304, 8);
    let x = host::<bf16>(&rng.normals(m * k, 1.0), &[m, k]);
    let w = host::<bf16>(&rng.normals(n * k, 1.0), &[n, k]);
    let (xv, wv) = (values(&x), values(&w));
    let reference: Vec<f64> = (0..m * n)
        .map(|i| (0..k).map(|l| xv[i / n * k + l] * wv[i % n * k + l]).sum())
        .collect();
    let grid = (cdiv(n, 64) * splits as u32, cdiv(m, 64));
    let counters = (n / 64) * m.div_ceil(64);
    let what = format!("split-K x @ w^T {m}x{k}x{n}, {splits} splits");
    let mut want = HostTensor::full(&[m, n], f32::NAN);
    let mut partial = HostTensor::full(&[splits, m, n], f32::NAN);
    let mut arrived = HostTensor::<i32>::full(&[counters], 0);
    split_k_product::launch::<bf16, 64, 64, 64, _>(&Cpu, grid, &x, &w, &mut partial, &mut arrived, &mut want).unwrap();
    assert_close(&what, &values(&want), &reference, 1e-5);
    assert!(arrived.to_vec().iter().all(|&c| c == 0), "{what}: counts set back");
    let Some(d) = d else { return };
    let s = d.stream();
    let (xd, wd) = (s.upload(&x).unwrap(), s.upload(&w).unwrap());
    let mut partial = s.upload(&HostTensor::full(&[splits, m, n], f32::NAN)).unwrap();
    let mut arrived = s.upload(&HostTensor::<i32>::full(&[counters], 0)).unwrap();
    on_every_path(&d, || {
        // The second launch finds the counts at 0 again.
        for run in 0..2 {
            let mut yd = s.upload(&HostTensor::full(&[m, n], f32::NAN)).unwrap();
            split_k_product::launch::<bf16, 64, 64, 64, _>(&s, grid, &xd, &wd, &mut partial, &mut arrived, &mut yd)
                .unwrap();
            same(&s, &format!("{what}, run {run}"), &yd, &want, 1e-5);
        }
    });
    assert_launched_on_sm90a(&d, &["split_k_product_bf16_64_64_64_wgmma"]);
}

/// Each element of a `[T]` tile takes a ticket from `counter`: its value
/// before the element's add. Elements past `N` add nothing (index -1), and
/// `misses` gets what adds outside the counter give back.
#[tile::kernel(T = [8, 256], num_warps = 4)]
fn take_tickets<const T: usize>(
    counter: &mut Tensor<u32, { [2] }>,
    tickets: &mut Tensor<u32, { [N] }>,
    misses: &mut Tensor<u32, { [N] }>,
) {
    let i = block_id(0);
    let at = i * T + arange(T);
    tickets.store([i], counter.atomic_add([select(at < N, 0, -1)], full([T], 1u32)));
    misses.store([i], counter.atomic_add([full([T], 2)], full([T], 5u32)));
}

/// Every element swaps its position into one slot, releasing the block's
/// accesses, and gets what it found there.
#[tile::kernel(T = [64], num_warps = 4)]
fn swap_in<const T: usize>(slot: &mut Tensor<i32, { [1] }>, found: &mut Tensor<i32, { [N] }>) {
    let at = block_id(0) * T + arange(T);
    found.store(
        [block_id(0)],
        slot.atomic_exch([select(at < N, 0, -1)], at, Ordering::Release),
    );
}

/// Every element claims slot `at % S` with its position where the slot
/// still holds -1, acquiring, and gets what the slot held.
#[tile::kernel(T = [128], num_warps = 4)]
fn claim<const T: usize>(slots: &mut Tensor<i32, { [S] }>, found: &mut Tensor<i32, { [N] }>) {
    let at = block_id(0) * T + arange(T);
    let got = slots.atomic_cas([select(at < N, at % S, -1)], -1, at, Ordering::Acquire);
    found.store([block_id(0)], got);
}

/// `x[e]` becomes 7 where it has `expected[e]`'s bits; `old` gets `x` before.
#[tile::kernel(T = [4])]
fn replace_matching_bits<const T: usize>(
    x: &mut Tensor<f32, { [N] }>,
    expected: &Tensor<f32, { [N] }>,
    old: &mut Tensor<f32, { [N] }>,
) {
    old.store([0], x.atomic_cas([arange(T)], expected.load([0], [T]), full([T], 7.0)));
}

/// `last_block_sums` with a tile atomic: every block stores its sum and
/// counts itself in with acquire-release ordering; the block that counts
/// last adds every block's sum into `total` and sets the count back.
#[tile::kernel(T = [256], P = [1024])]
fn last_tile_sums<const T: usize, const P: usize>(
    x: &Tensor<f32, { [N] }>,
    partial: &mut Tensor<f32, { [G] }>,
    count: &mut Tensor<u32, { [1] }>,
    total: &mut Tensor<f32, { [1] }>,
) {
    let i = block_id(0);
    partial.store([i], x.load([i], [T]).sum(0));
    let ticket = count.atomic_add([zeros::<i32>([1])], full([1], 1u32), Ordering::AcqRel);
    let last = select(ticket == num_blocks(0).cast::<u32>() - 1, 0, -1);
    total.scatter([last], partial.load([0], [P]).sum(0));
    count.scatter([last], zeros::<u32>([1]));
}

fn tile_atomics_give_old_values(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let n = 3 * 256 - 41;
    // Tickets: `T = 8` holds each element on 16 threads of 4 warps.
    let tickets = |t: usize| {
        let run = |on: &dyn Fn(u32, &mut [Vec<u32>; 3])| {
            let mut got = [vec![0, 0], vec![0; n], vec![0; n]];
            on(cdiv(n, t), &mut got);
            got
        };
        let cpu = run(&|grid, got| {
            let mut c = HostTensor::<u32>::zeros(&[2]);
            let (mut tk, mut m) = (HostTensor::<u32>::zeros(&[n]), HostTensor::<u32>::zeros(&[n]));
            match t {
                8 => take_tickets::launch::<8, _>(&Cpu, grid, &mut c, &mut tk, &mut m).unwrap(),
                _ => take_tickets::launch::<256, _>(&Cpu, grid, &mut c, &mut tk, &mut m).unwrap(),
            }
            *got = [c.to_vec(), tk.to_vec(), m.to_vec()];
        });
        assert_eq!(cpu[0], [n as u32, 0], "T = {t}: CPU counter");
        assert!(cpu[1].iter().copied().eq(0..n as u32), "T = {t}: CPU tickets in order");
        assert!(cpu[2].iter().all(|&m| m == 0), "T = {t}: outside gives 0");
        if let Some(s) = &s {
            let gpu = run(&|grid, got| {
                let mut c = s.zeros::<u32>(&[2]).unwrap();
                let (mut tk, mut m) = (s.zeros::<u32>(&[n]).unwrap(), s.zeros::<u32>(&[n]).unwrap());
                match t {
                    8 => take_tickets::launch::<8, _>(s, grid, &mut c, &mut tk, &mut m).unwrap(),
                    _ => take_tickets::launch::<256, _>(s, grid, &mut c, &mut tk, &mut m).unwrap(),
                }
                let d = |x: &tile::Tensor<u32>| s.download(x).unwrap().to_vec();
                *got = [d(&c), d(&tk), d(&m)];
            });
            assert_eq!(gpu[0], [n as u32, 0], "T = {t}: GPU counter");
            let mut sorted = gpu[1].clone();
            sorted.sort_unstable();
            assert!(
                sorted.iter().copied().eq(0..n as u32),
                "T = {t}: GPU tickets {:?}",
                gpu[1]
            );
            assert!(gpu[2].iter().all(|&m| m == 0), "T = {t}: GPU outside gives 0");
        }
    };
    tickets(8);
    tickets(256);

    // Exchange: what the elements found, and what the slot holds last, are
    // -1 and every position once. `T = 64` holds each element twice.
    let swapped = |found: Vec<i32>, last: i32, what: &str| {
        let mut all: Vec<i32> = found.into_iter().chain([last]).collect();
        all.sort_unstable();
        assert!(all.iter().copied().eq(-1..n as i32), "{what}: {all:?}");
    };
    let grid = cdiv(n, 64);
    let mut slot = HostTensor::from_vec(vec![-1], &[1]).unwrap();
    let mut found = HostTensor::<i32>::zeros(&[n]);
    swap_in::launch::<64, _>(&Cpu, grid, &mut slot, &mut found).unwrap();
    assert!(found.to_vec().iter().copied().eq(-1..n as i32 - 1), "CPU: in order");
    swapped(found.to_vec(), slot.to_vec()[0], "CPU exchange");
    if let Some(s) = &s {
        let mut sd = s.upload(&HostTensor::from_vec(vec![-1], &[1]).unwrap()).unwrap();
        let mut fd = s.zeros::<i32>(&[n]).unwrap();
        swap_in::launch::<64, _>(s, grid, &mut sd, &mut fd).unwrap();
        swapped(
            s.download(&fd).unwrap().to_vec(),
            s.download(&sd).unwrap().to_vec()[0],
            "GPU exchange",
        );
    }

    // Compare-and-swap: one element claims each slot; the others find it.
    let slots = 29;
    let claimed = |found: &[i32], held: &[i32], what: &str| {
        for (k, &h) in held.iter().enumerate() {
            let mine: Vec<usize> = (k..n).step_by(slots).collect();
            let winners: Vec<usize> = mine.iter().copied().filter(|&e| found[e] == -1).collect();
            assert_eq!(winners.len(), 1, "{what}: slot {k} claimed by {winners:?}");
            assert_eq!(h, winners[0] as i32, "{what}: slot {k}");
            assert!(
                mine.iter().all(|&e| e == winners[0] || found[e] == h),
                "{what}: slot {k}: the others find the winner"
            );
        }
    };
    let grid = cdiv(n, 128);
    let mut held = HostTensor::from_vec(vec![-1; slots], &[slots]).unwrap();
    let mut found = HostTensor::<i32>::zeros(&[n]);
    claim::launch::<128, _>(&Cpu, grid, &mut held, &mut found).unwrap();
    assert!(
        held.to_vec().iter().copied().eq(0..slots as i32),
        "CPU: the first claims"
    );
    claimed(&found.to_vec(), &held.to_vec(), "CPU compare-and-swap");
    if let Some(s) = &s {
        let mut hd = s
            .upload(&HostTensor::from_vec(vec![-1; slots], &[slots]).unwrap())
            .unwrap();
        let mut fd = s.zeros::<i32>(&[n]).unwrap();
        claim::launch::<128, _>(s, grid, &mut hd, &mut fd).unwrap();
        let (f, h) = (s.download(&fd).unwrap().to_vec(), s.download(&hd).unwrap().to_vec());
        claimed(&f, &h, "GPU compare-and-swap");
    }

    // Floats compare by their bits: -0.0 is not 0.0, a NaN is itself.
    let x = [0.0f32, -0.0, f32::NAN, 1.0];
    let expected = HostTensor::from_vec(vec![0.0f32, 0.0, f32::NAN, 2.0], &[4]).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let want = bits(&[7.0, -0.0, 7.0, 1.0]);
    let mut xc = HostTensor::from_vec(x.to_vec(), &[4]).unwrap();
    let mut old = HostTensor::<f32>::zeros(&[4]);
    replace_matching_bits::launch::<4, _>(&Cpu, 1, &mut xc, &expected, &mut old).unwrap();
    assert_eq!(bits(&xc.to_vec()), want, "CPU: f32 compare-and-swap");
    assert_eq!(bits(&old.to_vec()), bits(&x), "CPU: f32 old values");
    if let Some(s) = &s {
        let mut xd = s.upload(&HostTensor::from_vec(x.to_vec(), &[4]).unwrap()).unwrap();
        let mut od = s.zeros::<f32>(&[4]).unwrap();
        replace_matching_bits::launch::<4, _>(s, 1, &mut xd, &s.upload(&expected).unwrap(), &mut od).unwrap();
        assert_eq!(
            bits(&s.download(&xd).unwrap().to_vec()),
            want,
            "GPU: f32 compare-and-swap"
        );
        assert_eq!(
            bits(&s.download(&od).unwrap().to_vec()),
            bits(&x),
            "GPU: f32 old values"
        );
    }
}

fn acq_rel_tile_atomics_let_the_last_block_read_every_block(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(55);
    let blocks = 1000;
    let n = blocks * 256 - 77;
    let x = host::<f32>(&rng.normals(n, 1.0), &[n]);
    let want = as_f64(&x).iter().sum::<f64>();
    let scale = as_f64(&x).iter().map(|v| v.abs()).sum::<f64>();
    fn sums<B: tile::Backend>(on: &B, x: &HostTensor<f32>, blocks: usize, runs: usize) -> Vec<(u32, f32)> {
        let x = on.upload(x).unwrap();
        let mut partial = on.zeros::<f32>(&[blocks]).unwrap();
        let mut count = on.zeros::<u32>(&[1]).unwrap();
        let mut total = on.zeros::<f32>(&[1]).unwrap();
        (0..runs)
            .map(|_| {
                last_tile_sums::launch::<256, 1024, _>(on, blocks as u32, &x, &mut partial, &mut count, &mut total)
                    .unwrap();
                let c = on.download(&count).unwrap().to_vec()[0];
                (c, on.download(&total).unwrap().to_vec()[0])
            })
            .collect()
    }
    let check = |what: &str, (count, total): (u32, f32)| {
        assert_eq!(count, 0, "{what}: the count is set back");
        assert!(
            (total as f64 - want).abs() <= 1e-5 * scale,
            "{what}: total {total} against {want}"
        );
    };
    for got in sums(&Cpu, &x, blocks, 2) {
        check("CPU", got);
    }
    if let Some(s) = &s {
        for (run, got) in sums(s, &x, blocks, 20).into_iter().enumerate() {
            check(&format!("GPU run {run}"), got);
        }
    }
}

/// After a `last_block_sums` launch: the count, the tickets, the misses and
/// the total.
/// A running sum handed from block to block: block `i` waits for block
/// `i - 1` to signal `round`, adds its tile's sum to the sum that block
/// left, and signals its own flag with `round` (a chained scan).
#[tile::kernel(B = [128])]
fn chained_sums<const B: usize>(
    x: &Tensor<f32, { [N] }>,
    sums: &mut Tensor<f32, { [G] }>,
    flags: &mut Tensor<u32, { [G] }>,
    round: u32,
) {
    let i = block_id(0);
    let mut before = zeros::<f32>([1]);
    if i > 0 {
        flags.wait([i - 1], round);
        before = sums.load([i - 1], [1]);
    }
    sums.store([i], before + x.load([i], [B]).sum(0));
    flags.signal([i], round);
}

/// Waits for `flags[0]` to reach `v`.
#[tile::kernel]
fn waits_for(flags: &Tensor<u32, { [1] }>, v: u32) {
    flags.wait([0], v);
}

/// `signal` and `wait` hand each block's running sum to the next, over
/// rounds that wrap past `u32::MAX`; on the CPU, a wait nothing will
/// satisfy is `Error::Deadlock`.
fn signal_and_wait_chain_blocks(d: Option<Arc<Device>>) {
    let s = gpu(&d);
    let mut rng = Rng::new(61);
    let blocks = 60;
    let n = blocks * 128 - 41;
    let x = host::<f32>(&rng.normals(n, 1.0), &[n]);
    let xs = as_f64(&x);
    let want: Vec<f64> = (0..blocks).map(|i| xs[..((i + 1) * 128).min(n)].iter().sum()).collect();
    let rounds = [u32::MAX - 1, u32::MAX, 0, 1];
    fn chain<B: tile::Backend>(
        on: &B,
        x: &HostTensor<f32>,
        blocks: usize,
        rounds: &[u32],
    ) -> Vec<(Vec<f32>, Vec<u32>)> {
        let x = on.upload(x).unwrap();
        let mut flags = on
            .upload(&HostTensor::from_vec(vec![u32::MAX - 2; blocks], &[blocks]).unwrap())
            .unwrap();
        let mut sums = on.zeros::<f32>(&[blocks]).unwrap();
        rounds
            .iter()
            .map(|&r| {
                chained_sums::launch::<128, _>(on, blocks as u32, &x, &mut sums, &mut flags, r).unwrap();
                (
                    on.download(&sums).unwrap().to_vec(),
                    on.download(&flags).unwrap().to_vec(),
                )
            })
            .collect()
    }
    let check = |what: &str, got: Vec<(Vec<f32>, Vec<u32>)>| {
        for ((sums, flags), r) in got.into_iter().zip(rounds) {
            assert!(flags.iter().all(|&f| f == r), "{what}: round {r}: flags {flags:?}");
            let got: Vec<f64> = sums.iter().map(|&v| v as f64).collect();
            assert_close(&format!("{what}: round {r}"), &got, &want, 1e-5);
        }
    };
    check("CPU", chain(&Cpu, &x, blocks, &rounds));
    let flag = |v: u32| HostTensor::from_vec(vec![v], &[1]).unwrap();
    for (held, v) in [(5, 5), (5, 4), (0, u32::MAX), (u32::MAX, u32::MAX - 3)] {
        waits_for::launch(&Cpu, 1, &flag(held), v).unwrap();
    }
    for (held, v) in [(5, 6), (u32::MAX, 0), (0, 1 << 31)] {
        match waits_for::launch(&Cpu, 1, &flag(held), v) {
            Err(tile::Error::Deadlock { kernel, reason }) => {
                assert_eq!(kernel, "waits_for");
                assert!(reason.contains("`flags`[0]"), "{reason}");
            }
            other => panic!("a CPU wait for {v} on a flag at {held} gave {other:?}"),
        }
    }
    if let Some(s) = &s {
        check("GPU", chain(s, &x, blocks, &rounds));
        for (held, v) in [(5, 5), (5, 4), (0, u32::MAX)] {
            waits_for::launch(s, 1, &s.upload(&flag(held)).unwrap(), v).unwrap();
        }
        s.synchronize().unwrap();
    }
}

/// Each block's row handed to the next through flagged lines: block `i`
/// stores its row of `x` into row `i` of `lines`, flagged with `round`,
/// and reads row `i - 1` as block `i - 1` flagged it into `out`.
#[tile::kernel(T = [f32, bf16], B = [256])]
fn flagged_chain<T, const B: usize>(
    x: &Tensor<T, { [G, N] }>,
    lines: &mut Tensor<T, { [G, L] }>,
    out: &mut Tensor<T, { [G, N] }>,
    round: u32,
) {
    let i = block_id(0);
    lines.store_flagged([i, 0], x.load([i, 0], [1, B]), round);
    if i > 0 {
        out.store([i, 0], lines.load_flagged([i - 1, 0], [1, B], round));
    }
}

/// Reads row 0 of `lines` flagged with `round`.
#[tile::kernel]
fn reads_flagged(lines: &Tensor<f32, { [1, L] }>, out: &mut Tensor<f32, { [1, N] }>, round: u32) {
    out.store([0, 0], lines.load_flagged([0, 0], [1, 64], round));
}

/// `store_flagged` and `load_flagged` hand rows of 200 elements (tiles of
/// 256: the rest padding) from block to block over rounds that wrap past
/// `u32::MAX`. The lines hold each 4 bytes of data beside the round, the
/// same bits on the CPU and the GPU (a writer and a reader on two GPUs
/// agree whatever their variants); on the CPU, a read of a round nothing
/// wrote is `Error::Deadlock`.
fn flagged_lines_hand_rows_between_blocks(d: Option<Arc<Device>>) {
    fn run<T: Num, B: tile::Backend>(on: &B, x: &HostTensor<T>, rounds: &[u32]) -> Vec<(HostTensor<T>, HostTensor<T>)> {
        let [g, n] = [x.shape()[0], x.shape()[1]];
        let x = on.upload(x).unwrap();
        let mut lines = on.zeros::<T>(&[g, 2 * n]).unwrap();
        let mut out = on.zeros::<T>(&[g, n]).unwrap();
        rounds
            .iter()
            .map(|&r| {
                flagged_chain::launch::<T, 256, _>(on, g as u32, &x, &mut lines, &mut out, r).unwrap();
                (on.download(&lines).unwrap(), on.download(&out).unwrap())
            })
            .collect()
    }
    /// Elements compared by their bits (`bits`), as a flag that reads as
    /// f32 NaN must be.
    fn check<T: Num>(
        what: &str,
        (x, bits): (&HostTensor<T>, fn(T) -> u32),
        rounds: &[u32],
        got: &[(HostTensor<T>, HostTensor<T>)],
    ) {
        let [g, n] = [x.shape()[0], x.shape()[1]];
        let per_word = 4 / std::mem::size_of::<T>();
        let x: Vec<u32> = x.to_vec().into_iter().map(bits).collect();
        for ((lines, out), &r) in got.iter().zip(rounds) {
            let lines: Vec<u32> = lines.to_vec().into_iter().map(bits).collect();
            let out: Vec<u32> = out.to_vec().into_iter().map(bits).collect();
            let flag = match per_word {
                1 => vec![r],
                _ => vec![r & 0xffff, r >> 16],
            };
            for row in 0..g {
                let want = match row {
                    0 => vec![0; n],
                    _ => x[(row - 1) * n..row * n].to_vec(),
                };
                assert_eq!(
                    out[row * n..(row + 1) * n],
                    want[..],
                    "{what}: round {r}: row {row} of out"
                );
                for (w, line) in lines[row * 2 * n..(row + 1) * 2 * n].chunks(2 * per_word).enumerate() {
                    let data = &x[row * n + w * per_word..][..per_word];
                    assert_eq!(
                        line[..per_word],
                        *data,
                        "{what}: round {r}: the data of word {w} of row {row}"
                    );
                    assert_eq!(
                        line[per_word..],
                        flag[..],
                        "{what}: round {r}: the flag of word {w} of row {row}"
                    );
                }
            }
        }
    }
    let s = gpu(&d);
    let mut rng = Rng::new(67);
    let rounds = [1, 2, u32::MAX, 0, 7];
    let (g, n) = (60, 200);
    let xf = host::<f32>(&rng.normals(g * n, 1.0), &[g, n]);
    let xb = host::<bf16>(&rng.normals(g * n, 1.0), &[g, n]);
    let (cpu_f, cpu_b) = (run(&Cpu, &xf, &rounds), run(&Cpu, &xb, &rounds));
    let f32_bits: fn(f32) -> u32 = f32::to_bits;
    let bf16_bits: fn(bf16) -> u32 = |v| v.to_bits() as u32;
    check("CPU f32", (&xf, f32_bits), &rounds, &cpu_f);
    check("CPU bf16", (&xb, bf16_bits), &rounds, &cpu_b);
    let lines = HostTensor::from_vec(vec![0.0f32; 128], &[1, 128]).unwrap();
    let mut out = HostTensor::from_vec(vec![0.0f32; 64], &[1, 64]).unwrap();
    match reads_flagged::launch(&Cpu, 1, &lines, &mut out, 3) {
        Err(tile::Error::Deadlock { kernel, reason }) => {
            assert_eq!(kernel, "reads_flagged");
            assert!(reason.contains("`lines`"), "{reason}");
        }
        other => panic!("a CPU read of a round nothing wrote gave {other:?}"),
    }
    if let Some(s) = &s {
        let (gpu_f, gpu_b) = (run(s, &xf, &rounds), run(s, &xb, &rounds));
        check("GPU f32", (&xf, f32_bits), &rounds, &gpu_f);
        check("GPU bf16", (&xb, bf16_bits), &rounds, &gpu_b);
    }
}

type Counted = (Vec<u32>, Vec<u32>, Vec<u32>, f32);

/// `last_block_sums` launched `runs` times on `on` over `x` in `blocks`
/// blocks with one count, what each left.
fn launches<B: tile::Backend>(on: &B, x: &HostTensor<f32>, blocks: usize, runs: usize) -> Vec<Counted> {
    let x = on.upload(x).unwrap();
    let mut partial = on.zeros::<f32>(&[blocks]).unwrap();
    let mut count = on.zeros::<u32>(&[2]).unwrap();
    let (mut tickets, mut misses) = (on.zeros::<u32>(&[blocks]).unwrap(), on.zeros::<u32>(&[blocks]).unwrap());
    let mut total = on.zeros::<f32>(&[1]).unwrap();
    (0..runs)
        .map(|_| {
            let (p, c, t, m) = (&mut partial, &mut count, &mut tickets, &mut misses);
            last_block_sums::launch::<256, 1024, _>(on, blocks as u32, &x, p, c, t, m, &mut total).unwrap();
            let got = |t: &B::Tensor<u32>| on.download(t).unwrap().to_vec();
            let sum = on.download(&total).unwrap().to_vec()[0];
            (got(&count), got(&tickets), got(&misses), sum)
        })
        .collect()
}

fn main() -> ExitCode {
    harness::run(
        [
            Test::cpu_then_gpu("reductions_along_axis_0", reductions_along_axis_0),
            Test::cpu_then_gpu(
                "argmax_and_argmin_pick_the_first_extreme",
                argmax_and_argmin_pick_the_first_extreme,
            ),
            Test::cpu_then_gpu("transpose_moves_elements", transpose_moves_elements),
            Test::cpu_then_gpu("mma_takes_a_transposed_a_operand", mma_takes_a_transposed_a_operand),
            Test::cpu_then_gpu(
                "a_products_rows_reduce_within_warps",
                a_products_rows_reduce_within_warps,
            ),
            Test::cpu_then_gpu(
                "an_accumulator_read_inside_its_loop_is_complete",
                an_accumulator_read_inside_its_loop_is_complete,
            ),
            Test::cpu_then_gpu(
                "batched_tiles_are_stored_with_their_batch_index",
                batched_tiles_are_stored_with_their_batch_index,
            ),
            Test::cpu_then_gpu("loops_carry_tiles_and_scalars", loops_carry_tiles_and_scalars),
            Test::cpu_then_gpu("branches_on_block_uniform_scalars", branches_on_block_uniform_scalars),
            Test::cpu_then_gpu("integer_operations", integer_operations),
            Test::cpu_then_gpu(
                "casts_and_half_arithmetic_round_like_the_reference",
                casts_and_half_arithmetic_round_like_the_reference,
            ),
            Test::cpu_then_gpu("bitcast_keeps_every_bit", bitcast_keeps_every_bit),
            Test::cpu_then_gpu("math_functions_match_f64", math_functions_match_f64),
            Test::cpu_then_gpu("reshapes_broadcasts_and_3d_tiles", reshapes_broadcasts_and_3d_tiles),
            Test::cpu_then_gpu("gather_and_scatter_by_index_tiles", gather_and_scatter_by_index_tiles),
            Test::cpu_then_gpu("block_uniform_scalars", block_uniform_scalars),
            Test::cpu_then_gpu(
                "group_tiles_visits_every_tile_once_in_groups_of_rows",
                group_tiles_visits_every_tile_once_in_groups_of_rows,
            ),
            Test::cpu_then_gpu(
                "mma_multiplies_computed_tiles_in_a_loop",
                mma_multiplies_computed_tiles_in_a_loop,
            ),
            Test::cpu_then_gpu(
                "declared_shapes_are_checked_at_launch",
                declared_shapes_are_checked_at_launch,
            ),
            Test::cpu_then_gpu("scans_match_f64_on_ragged_rows", scans_match_f64_on_ragged_rows),
            Test::cpu_then_gpu("sorts_order_rows_with_ties_and_nan", sorts_order_rows_with_ties_and_nan),
            Test::cpu_then_gpu(
                "topk_keeps_the_largest_with_ties_and_nan",
                topk_keeps_the_largest_with_ties_and_nan,
            ),
            Test::cpu_then_gpu("atomics_combine_every_element", atomics_combine_every_element),
            Test::cpu_then_gpu(
                "fetch_add_lets_the_last_block_read_every_block",
                fetch_add_lets_the_last_block_read_every_block,
            ),
            Test::cpu_then_gpu(
                "cluster_gather_hands_every_tile_to_the_first_block",
                cluster_gather_hands_every_tile_to_the_first_block,
            ),
            Test::cpu_then_gpu(
                "split_k_products_combine_in_the_last_block",
                split_k_products_combine_in_the_last_block,
            ),
            Test::cpu_then_gpu("tile_atomics_give_old_values", tile_atomics_give_old_values),
            Test::cpu_then_gpu("signal_and_wait_chain_blocks", signal_and_wait_chain_blocks),
            Test::cpu_then_gpu(
                "flagged_lines_hand_rows_between_blocks",
                flagged_lines_hand_rows_between_blocks,
            ),
            Test::cpu_then_gpu(
                "acq_rel_tile_atomics_let_the_last_block_read_every_block",
                acq_rel_tile_atomics_let_the_last_block_read_every_block,
            ),
        ]
        .into_iter()
        .flatten(),
    )
}
