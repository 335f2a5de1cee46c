//! Decode attention with a KV cache (`tile_kernels::decode`) against an f64
//! reference of softmax attention over each sequence's keys up to its position,
//! and against the causal prefill kernel: on the CPU versions here, and
//! the same cases on the GPU (reported as ignored without one; a failure
//! under `TILE_REQUIRE_GPU=1`).
//!
//! Every case is written once, generic over the backend.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::harness::{self, Test};
use common::{Num, Rng, host, rel_err, rounded, values};
use std::process::ExitCode;
use std::sync::Arc;
use tile::Error;
use tile::prelude::*;
use tile_kernels::attention;
use tile_kernels::decode::{self, MAX_SPLITS};

/// A `[batch, rows, cols]` host tensor of `data` whose rows are `cols + pad`
/// elements apart: with `pad` breaking 16-byte alignment, a GPU launch
/// takes the variants without vector accesses.
fn rows_apart<T: Num>(data: &[f64], [batch, rows, cols]: [usize; 3], pad: usize) -> HostTensor<T> {
    let stride = cols + pad;
    let mut storage = vec![T::of(0.0); batch * rows * stride];
    for (r, row) in data.chunks(cols).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            storage[r * stride + c] = T::of(x);
        }
    }
    HostTensor::from_vec_strided(storage, &[batch, rows, cols], &[rows * stride, stride, 1]).unwrap()
}

/// Each of `rows` rows of `got` within `tol` of `want`, so that a short
/// sequence's error is not hidden by the others'.
fn assert_rows_close(what: &str, got: &[f64], want: &[f64], rows: usize, tol: f64) {
    let n = got.len() / rows;
    for (r, (g, w)) in got.chunks(n).zip(want.chunks(n)).enumerate() {
        let e = rel_err(g, w);
        assert!(
            e <= tol,
            "{what}, row {r}: relative error {e:.3e} over tolerance {tol:.1e}"
        );
    }
}

/// Softmax attention of each sequence's query `q: [B, C]` over the keys
/// and values of `k, v: [B, S, C]` at rows `0..=pos[b]` (clamped to the
/// cache) in `heads` heads, scale `1 / sqrt(D)`, into `[B, C]`; zeros
/// without keys.
fn decode_ref(q: &[f64], (k, v): (&[f64], &[f64]), pos: &[i32], capacity: usize, heads: usize) -> Vec<f64> {
    let batch = pos.len();
    let c = q.len() / batch;
    let d = c / heads;
    let mut out = vec![0.0; batch * c];
    for b in 0..batch {
        let n = (i64::from(pos[b]) + 1).clamp(0, capacity as i64) as usize;
        if n == 0 {
            continue;
        }
        let row = |j: usize| (b * capacity + j) * c;
        for h in 0..heads {
            let cols = h * d..(h + 1) * d;
            let scores: Vec<f64> = (0..n)
                .map(|j| {
                    let dot: f64 = cols.clone().map(|e| q[b * c + e] * k[row(j) + e]).sum();
                    dot / (d as f64).sqrt()
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f64 = p.iter().sum();
            for e in cols.clone() {
                out[b * c + e] = (0..n).map(|j| p[j] * v[row(j) + e]).sum::<f64>() / sum;
            }
        }
    }
    out
}

/// The shape of a decode case: sequences, cache capacity, heads, head size,
/// and the padding between the caches' rows.
#[derive(Clone, Copy, Debug)]
struct Shape {
    batch: usize,
    capacity: usize,
    heads: usize,
    d: usize,
    pad: usize,
}

/// Decode attention on `on` for random tokens and caches at the positions
/// `pos`, with `splits` splits (or those `decode::splits` picks), against
/// the f64 reference row by row, the token's key and value at row `pos`;
/// the caches must then hold them there and be unchanged elsewhere.
/// Returns the output.
fn decode_case<T: Num, B: Backend>(
    on: &B,
    rng: &mut Rng,
    shape: Shape,
    pos: &[i32],
    splits: Option<usize>,
    tol: f64,
) -> Vec<f64> {
    let Shape {
        batch,
        capacity,
        heads,
        d,
        pad,
    } = shape;
    let c = heads * d;
    assert_eq!(pos.len(), batch);
    let qkv = rng.normals(batch * 3 * c, 1.0);
    let (k, v) = (
        rng.normals(batch * capacity * c, 1.0),
        rng.normals(batch * capacity * c, 1.0),
    );
    let qkv_d = on.upload(&host::<T>(&qkv, &[batch, 1, 3 * c])).unwrap();
    let mut k_d = on.upload(&rows_apart::<T>(&k, [batch, capacity, c], pad)).unwrap();
    let mut v_d = on.upload(&rows_apart::<T>(&v, [batch, capacity, c], pad)).unwrap();
    let pos_d = on.upload_slice(pos, &[batch]).unwrap();
    let mut out = on.upload(&HostTensor::full(&[batch, 1, c], T::of(f64::NAN))).unwrap();
    let splits = splits.unwrap_or_else(|| decode::splits(on, &k_d, heads).unwrap());
    decode::attention(on, &qkv_d, (&mut k_d, &mut v_d), &pos_d, &mut out, heads, splits).unwrap();
    let got = values(&on.download(&out).unwrap());

    let qkv = rounded::<T>(&qkv);
    let (mut k, mut v) = (rounded::<T>(&k), rounded::<T>(&v));
    for (b, &p) in pos.iter().enumerate() {
        if (0..capacity as i32).contains(&p) {
            let (from, to) = (b * 3 * c, (b * capacity + p as usize) * c);
            k[to..to + c].copy_from_slice(&qkv[from + c..from + 2 * c]);
            v[to..to + c].copy_from_slice(&qkv[from + 2 * c..from + 3 * c]);
        }
    }
    let q: Vec<f64> = qkv.chunks(3 * c).flat_map(|row| row[..c].to_vec()).collect();
    let want = decode_ref(&q, (&k, &v), pos, capacity, heads);
    let what = format!("decode {} {shape:?} pos {pos:?} splits {splits}", T::DTYPE);
    assert_rows_close(&what, &got, &want, batch, tol);
    assert!(values(&on.download(&k_d).unwrap()) == k, "{what}: keys cached");
    assert!(values(&on.download(&v_d).unwrap()) == v, "{what}: values cached");
    got
}

/// Positions for a cache of `capacity` over `keys` keys per step: one key,
/// one step, one key more, a full cache, and a random one.
fn ragged_positions(rng: &mut Rng, capacity: usize, keys: usize) -> [i32; 5] {
    [0, keys - 1, keys, capacity - 1, rng.below(capacity)].map(|p| p as i32)
}

/// Every head size and `T` at ragged positions, with one split, several,
/// those `decode::splits` picks for `on`, and [`MAX_SPLITS`] (most of
/// them empty): caches of 300 positions, several tiles of keys for every
/// head size and not a multiple of any.
fn ragged_cases<T: Num, B: Backend>(on: &B, rng: &mut Rng, pad: usize, tol: f64) {
    for (heads, d) in [(3, 32), (2, 64), (3, 128)] {
        let capacity = 300;
        let shape = Shape {
            batch: 5,
            capacity,
            heads,
            d,
            pad,
        };
        for splits in [Some(1), Some(2), Some(4), None, Some(MAX_SPLITS)] {
            let pos = ragged_positions(rng, capacity, decode::keys_per_step(d));
            decode_case::<T, B>(on, rng, shape, &pos, splits, tol);
        }
    }
}

fn decode_attention_matches_f64_reference() {
    let mut rng = Rng::new(1);
    ragged_cases::<f32, _>(&Cpu, &mut rng, 0, f32::TOL);
    ragged_cases::<bf16, _>(&Cpu, &mut rng, 0, bf16::TOL);
    ragged_cases::<f16, _>(&Cpu, &mut rng, 0, f16::TOL);
}

/// One key: the output is that key's value, exactly, however many splits
/// are left empty.
fn one_key_gives_its_value_exactly_over_empty_splits() {
    fn case<T: Num>(rng: &mut Rng) {
        let shape = Shape {
            batch: 2,
            capacity: 40,
            heads: 2,
            d: 64,
            pad: 0,
        };
        for splits in [1, 2, MAX_SPLITS] {
            decode_case::<T, _>(&Cpu, rng, shape, &[0, 0], Some(splits), 0.0);
        }
    }
    let mut rng = Rng::new(2);
    case::<f32>(&mut rng);
    case::<bf16>(&mut rng);
    case::<f16>(&mut rng);
}

/// `pos` is device data, clamped by the kernels: past the cache's last row
/// it attends to every cached key, and below 0 gives zeros, not NaN.
fn positions_outside_the_cache_are_clamped() {
    let mut rng = Rng::new(3);
    for splits in [Some(1), Some(4), None] {
        let shape = Shape {
            batch: 6,
            capacity: 70,
            heads: 2,
            d: 32,
            pad: 0,
        };
        let pos = [-1, 70, i32::MAX, -5, i32::MIN, 69];
        let got = decode_case::<f32, _>(&Cpu, &mut rng, shape, &pos, splits, f32::TOL);
        let c = shape.heads * shape.d;
        for b in [0, 3, 4] {
            assert!(
                got[b * c..(b + 1) * c].iter().all(|&x| x == 0.0),
                "pos {}: {got:?}",
                pos[b]
            );
        }
        decode_case::<bf16, _>(&Cpu, &mut rng, shape, &pos, splits, bf16::TOL);
    }
}

/// `kv_write` on `on` for `qkv: [B, T, 3C]` at `start`, into caches
/// prefilled with a sentinel: every row `start[b] + t` inside the cache
/// holds the token's key and value, everything else the sentinel.
fn kv_write_case<T: Num, B: Backend>(
    on: &B,
    rng: &mut Rng,
    (seq, capacity, c, pad): (usize, usize, usize, usize),
    start: &[i32],
) {
    let batch = start.len();
    let qkv = rng.normals(batch * seq * 3 * c, 1.0);
    let sentinel = -3.0;
    let cache = vec![sentinel; batch * capacity * c];
    let qkv_d = on.upload(&rows_apart::<T>(&qkv, [batch, seq, 3 * c], pad)).unwrap();
    let mut k_d = on.upload(&rows_apart::<T>(&cache, [batch, capacity, c], pad)).unwrap();
    let mut v_d = on.upload(&rows_apart::<T>(&cache, [batch, capacity, c], pad)).unwrap();
    let start_d = on.upload_slice(start, &[batch]).unwrap();
    decode::write_kv(on, &qkv_d, &mut k_d, &mut v_d, &start_d).unwrap();
    let (k, v) = (values(&on.download(&k_d).unwrap()), values(&on.download(&v_d).unwrap()));

    let qkv = rounded::<T>(&qkv);
    let (mut want_k, mut want_v) = (cache.clone(), cache);
    for (b, &first) in start.iter().enumerate() {
        for t in 0..seq {
            let row = first as i64 + t as i64;
            if (0..capacity as i64).contains(&row) {
                let (from, to) = ((b * seq + t) * 3 * c, (b * capacity + row as usize) * c);
                want_k[to..to + c].copy_from_slice(&qkv[from + c..from + 2 * c]);
                want_v[to..to + c].copy_from_slice(&qkv[from + 2 * c..from + 3 * c]);
            }
        }
    }
    let what = format!(
        "kv_write {} T={seq} S={capacity} C={c} pad {pad} start {start:?}",
        T::DTYPE
    );
    assert!(k == want_k, "{what}: keys differ");
    assert!(v == want_v, "{what}: values differ");
}

/// Starts: at 0; near the end (the last rows dropped); negative (the first
/// dropped); past the end (all dropped); in the middle.
const STARTS: [i32; 6] = [0, 17, -2, 25, 9, i32::MAX];

/// Every column tile `write_kv` picks (C = 96, 192, 128, 768: 32, 64,
/// 128 and 256 columns per block).
const WIDTHS: [usize; 4] = [96, 192, 128, 768];

fn kv_write_copies_at_ragged_starts_and_drops_rows_outside_the_cache() {
    let mut rng = Rng::new(4);
    for c in WIDTHS {
        kv_write_case::<f32, _>(&Cpu, &mut rng, (6, 20, c, 0), &STARTS);
        kv_write_case::<bf16, _>(&Cpu, &mut rng, (6, 20, c, 0), &STARTS);
        kv_write_case::<f16, _>(&Cpu, &mut rng, (1, 20, c, 0), &STARTS);
    }
}

/// Generation against prefill, on `on`: the caches filled by `write_kv`
/// from a right-padded batch of prompts of lengths `prompts` (the padding
/// rows random, as pad tokens' keys would be), then `steps` tokens decoded
/// one at a time (each appended at its position by its step, attending up to and
/// including itself). Each query's output, the prompts' last included,
/// must equal that row of the causal prefill kernel (`attention::run`)
/// over the whole sequences.
fn generation_case<T: Num, B: Backend>(
    on: &B,
    rng: &mut Rng,
    (heads, d): (usize, usize),
    prompts: &[usize],
    steps: usize,
    tol: f64,
) {
    let (batch, c) = (prompts.len(), heads * d);
    let longest = *prompts.iter().max().unwrap();
    let seq = longest + steps;
    let capacity = seq + 3;
    let tokens = rng.normals(batch * seq * 3 * c, 1.0);
    let token = |b: usize, t: usize| &tokens[(b * seq + t) * 3 * c..(b * seq + t + 1) * 3 * c];

    let qkv = on.upload(&host::<T>(&tokens, &[batch, seq, 3 * c])).unwrap();
    let mut prefill = on.zeros::<T>(&[batch, seq, c]).unwrap();
    attention::run(on, &qkv, &mut prefill, heads).unwrap();
    let prefill = values(&on.download(&prefill).unwrap());
    let prefill_row = |b: usize, t: usize| &prefill[(b * seq + t) * c..(b * seq + t + 1) * c];

    let mut prompt = rng.normals(batch * longest * 3 * c, 1.0);
    for (b, &n) in prompts.iter().enumerate() {
        for t in 0..n {
            prompt[(b * longest + t) * 3 * c..][..3 * c].copy_from_slice(token(b, t));
        }
    }
    let mut k_cache = on.zeros::<T>(&[batch, capacity, c]).unwrap();
    let mut v_cache = on.zeros::<T>(&[batch, capacity, c]).unwrap();
    let prompt = on.upload(&host::<T>(&prompt, &[batch, longest, 3 * c])).unwrap();
    let zeros = on.zeros::<i32>(&[batch]).unwrap();
    decode::write_kv(on, &prompt, &mut k_cache, &mut v_cache, &zeros).unwrap();

    let splits = decode::splits(on, &k_cache, heads).unwrap();
    let mut out = on.zeros::<T>(&[batch, 1, c]).unwrap();
    // Step 0 is the prompts' last token, already cached; step i > 0 the
    // token at position prompt + i - 1, which the step appends.
    for i in 0..=steps {
        let pos: Vec<usize> = prompts.iter().map(|&n| n + i - 1).collect();
        let step: Vec<f64> = pos
            .iter()
            .enumerate()
            .flat_map(|(b, &p)| token(b, p).to_vec())
            .collect();
        let step = on.upload(&host::<T>(&step, &[batch, 1, 3 * c])).unwrap();
        let at: Vec<i32> = pos.iter().map(|&p| p as i32).collect();
        let at = on.upload_slice(&at, &[batch]).unwrap();
        let caches = (&mut k_cache, &mut v_cache);
        decode::attention(on, &step, caches, &at, &mut out, heads, splits).unwrap();
        let got = values(&on.download(&out).unwrap());
        let want: Vec<f64> = pos
            .iter()
            .enumerate()
            .flat_map(|(b, &p)| prefill_row(b, p).to_vec())
            .collect();
        let what = format!("{} heads {heads}x{d} prompts {prompts:?} step {i}", T::DTYPE);
        assert_rows_close(&what, &got, &want, batch, tol);
    }
}

/// Prompts of ragged lengths: one token, a few, past one tile of keys for
/// every head size.
const PROMPTS: [usize; 4] = [1, 5, 70, 33];

fn decode_after_prefill_matches_causal_prefill() {
    let mut rng = Rng::new(5);
    for (heads, d) in [(2, 32), (3, 64), (1, 128)] {
        generation_case::<f32, _>(&Cpu, &mut rng, (heads, d), &PROMPTS, 4, f32::TOL);
        // The prefill kernel rounds the softmax's numerators to T before its
        // second product; decode keeps them in f32.
        generation_case::<bf16, _>(&Cpu, &mut rng, (heads, d), &PROMPTS, 4, bf16::TOL);
        generation_case::<f16, _>(&Cpu, &mut rng, (heads, d), &PROMPTS, 4, 4e-3);
    }
}

/// A shape error, a wrapper's or a kernel's declared shapes', whose text names `names`.
fn is_shape_error<T>(r: tile::Result<T>, names: &str) -> bool {
    matches!(&r, Err(e @ (Error::Shape(_) | Error::ShapeContract { .. })) if e.to_string().contains(names))
}

fn mismatched_shapes_are_typed_errors_and_launch_nothing() {
    let (batch, capacity, heads, d) = (2, 16, 3, 32);
    let c = heads * d;
    let t = |shape: &[usize]| HostTensor::<f32>::full(shape, 1.0);
    let (qkv, k, v) = (
        t(&[batch, 1, 3 * c]),
        t(&[batch, capacity, c]),
        t(&[batch, capacity, c]),
    );
    let pos = HostTensor::<i32>::full(&[batch], 0);
    let mut out = HostTensor::full(&[batch, 1, c], f32::NAN);
    let attend = |qkv: &HostTensor<f32>,
                  (k, v): (&HostTensor<f32>, &HostTensor<f32>),
                  pos: &HostTensor<i32>,
                  out: &mut HostTensor<f32>,
                  heads| {
        let (mut k, mut v) = (k.clone(), v.clone());
        let r = decode::attention(&Cpu, qkv, (&mut k, &mut v), pos, out, heads, 1);
        assert!(
            r.is_ok() || k.to_vec().iter().all(|&x| x == 1.0),
            "a failed call wrote the cache"
        );
        r
    };

    assert!(is_shape_error(
        attend(&t(&[batch, 3 * c]), (&k, &v), &pos, &mut out, heads),
        "qkv"
    ));
    assert!(is_shape_error(
        attend(&t(&[batch, 2, 3 * c]), (&k, &v), &pos, &mut out, heads),
        "qkv"
    ));
    assert!(is_shape_error(
        attend(&t(&[batch, 1, 3 * c + 3]), (&k, &v), &pos, &mut out, heads),
        "qkv"
    ));
    assert!(is_shape_error(
        attend(&qkv, (&t(&[capacity, c]), &v), &pos, &mut out, heads),
        "k_cache"
    ));
    let short = t(&[batch, capacity - 1, c]);
    assert!(is_shape_error(
        attend(&qkv, (&k, &short), &pos, &mut out, heads),
        "v_cache"
    ));
    let pos3 = HostTensor::<i32>::full(&[batch + 1], 0);
    assert!(is_shape_error(attend(&qkv, (&k, &v), &pos3, &mut out, heads), "pos"));
    assert!(is_shape_error(
        attend(&qkv, (&k, &v), &pos, &mut t(&[batch, c]), heads),
        "out"
    ));
    // Heads of 48 columns are not built; 5 heads do not divide 96; nor do 0.
    for heads in [2, 5, 0] {
        assert!(is_shape_error(attend(&qkv, (&k, &v), &pos, &mut out, heads), "heads"));
    }
    // Heads of 96 pass the checks above: not built either.
    assert!(is_shape_error(
        attend(&qkv, (&k, &v), &pos, &mut out, 1),
        "heads of 32, 64 or 128"
    ));
    assert!(out.to_vec().iter().all(|x| x.is_nan()), "a failed call wrote out");

    // Splits a cluster does not take: none, not a power of two, too many.
    for splits in [0, 3, MAX_SPLITS + 1, 2 * MAX_SPLITS] {
        let (mut k1, mut v1) = (k.clone(), v.clone());
        let r = decode::attention(&Cpu, &qkv, (&mut k1, &mut v1), &pos, &mut out, heads, splits);
        assert!(is_shape_error(r, "splits"));
        assert!(k1.to_vec().iter().all(|&x| x == 1.0), "a failed call wrote the cache");
    }
    assert!(out.to_vec().iter().all(|x| x.is_nan()), "a failed call wrote out");
    assert!(is_shape_error(decode::splits(&Cpu, &k, 2), "heads"));
    assert!(is_shape_error(decode::splits(&Cpu, &t(&[c]), heads), "k_cache"));

    // write_kv: every tensor's shape, and C a multiple of 32.
    let (mut k, mut v) = (k.clone(), v.clone());
    let start = HostTensor::<i32>::zeros(&[batch]);
    let prompt = t(&[batch, 5, 3 * c]);
    assert!(is_shape_error(
        decode::write_kv(&Cpu, &t(&[batch, 5, 3 * c - 1]), &mut k, &mut v, &start),
        "qkv"
    ));
    assert!(is_shape_error(
        decode::write_kv(&Cpu, &t(&[batch, 3 * c]), &mut k, &mut v, &start),
        "qkv"
    ));
    let mut v_short = t(&[batch, capacity - 1, c]);
    assert!(is_shape_error(
        decode::write_kv(&Cpu, &prompt, &mut k, &mut v_short, &start),
        "v_cache"
    ));
    let start3 = HostTensor::<i32>::zeros(&[batch + 1]);
    assert!(is_shape_error(
        decode::write_kv(&Cpu, &prompt, &mut k, &mut v, &start3),
        "start"
    ));
    let (mut k48, mut v48) = (t(&[batch, capacity, 48]), t(&[batch, capacity, 48]));
    let r = decode::write_kv(&Cpu, &t(&[batch, 5, 144]), &mut k48, &mut v48, &start);
    assert!(is_shape_error(r, "multiple of 32"));
    assert!(k.to_vec().iter().all(|&x| x == 1.0), "a failed call wrote the cache");
}

// ---- the same on the GPU ----------------------------------------------------

fn gpu_decode_attention_matches_f64_reference_and_cpu(device: Arc<Device>) {
    let s = device.stream();
    // exp2 and log2 are the hardware's approximations on the GPU.
    let f32_tol = 5e-5;
    for pad in [0, 1] {
        let mut rng = Rng::new(6);
        ragged_cases::<f32, _>(&s, &mut rng, pad, f32_tol);
        ragged_cases::<bf16, _>(&s, &mut rng, pad, bf16::TOL);
        ragged_cases::<f16, _>(&s, &mut rng, pad, f16::TOL);
    }
    // The same inputs on both backends, one split: the GPU within rounding of the CPU.
    let shape = Shape {
        batch: 4,
        capacity: 1000,
        heads: 12,
        d: 64,
        pad: 0,
    };
    let pos = [0, 999, 512, 63];
    let gpu = decode_case::<bf16, _>(&s, &mut Rng::new(7), shape, &pos, Some(1), bf16::TOL);
    let cpu = decode_case::<bf16, _>(&Cpu, &mut Rng::new(7), shape, &pos, Some(1), bf16::TOL);
    assert_rows_close("decode bf16 GPU vs CPU", &gpu, &cpu, shape.batch, 1e-2);
    // A long cache at batch 1: the splits the device picks, and the most.
    let shape = Shape {
        batch: 1,
        capacity: 20000,
        heads: 4,
        d: 128,
        pad: 0,
    };
    for splits in [None, Some(MAX_SPLITS)] {
        decode_case::<f16, _>(&s, &mut Rng::new(8), shape, &[19998], splits, f16::TOL);
    }
    let mut rng = Rng::new(9);
    for splits in [Some(4), None] {
        let shape = Shape {
            batch: 6,
            capacity: 70,
            heads: 2,
            d: 32,
            pad: 0,
        };
        let got = decode_case::<f32, _>(
            &s,
            &mut rng,
            shape,
            &[-1, 70, i32::MAX, -5, i32::MIN, 69],
            splits,
            f32_tol,
        );
        assert!(got[..64].iter().all(|&x| x == 0.0), "pos -1 gave {:?}", &got[..64]);
    }
}

fn gpu_kv_write_matches_cpu(device: Arc<Device>) {
    let s = device.stream();
    let mut rng = Rng::new(10);
    for c in WIDTHS {
        for pad in [0, 1] {
            kv_write_case::<f32, _>(&s, &mut rng, (6, 20, c, pad), &STARTS);
            kv_write_case::<bf16, _>(&s, &mut rng, (6, 20, c, pad), &STARTS);
            kv_write_case::<f16, _>(&s, &mut rng, (6, 20, c, pad), &STARTS);
        }
    }
}

fn gpu_decode_after_prefill_matches_causal_prefill(device: Arc<Device>) {
    let s = device.stream();
    let mut rng = Rng::new(11);
    for (heads, d) in [(2, 32), (3, 64), (1, 128), (12, 64)] {
        // f32 prefill multiplies through tf32 on the GPU.
        generation_case::<f32, _>(&s, &mut rng, (heads, d), &PROMPTS, 4, 3e-3);
        generation_case::<bf16, _>(&s, &mut rng, (heads, d), &PROMPTS, 4, bf16::TOL);
        generation_case::<f16, _>(&s, &mut rng, (heads, d), &PROMPTS, 4, 4e-3);
    }
}

fn main() -> ExitCode {
    harness::run([
        Test::new(
            "decode_attention_matches_f64_reference",
            decode_attention_matches_f64_reference,
        ),
        Test::new(
            "one_key_gives_its_value_exactly_over_empty_splits",
            one_key_gives_its_value_exactly_over_empty_splits,
        ),
        Test::new(
            "positions_outside_the_cache_are_clamped",
            positions_outside_the_cache_are_clamped,
        ),
        Test::new(
            "kv_write_copies_at_ragged_starts_and_drops_rows_outside_the_cache",
            kv_write_copies_at_ragged_starts_and_drops_rows_outside_the_cache,
        ),
        Test::new(
            "decode_after_prefill_matches_causal_prefill",
            decode_after_prefill_matches_causal_prefill,
        ),
        Test::new(
            "mismatched_shapes_are_typed_errors_and_launch_nothing",
            mismatched_shapes_are_typed_errors_and_launch_nothing,
        ),
        Test::gpu(
            "gpu_decode_attention_matches_f64_reference_and_cpu",
            gpu_decode_attention_matches_f64_reference_and_cpu,
        ),
        Test::gpu("gpu_kv_write_matches_cpu", gpu_kv_write_matches_cpu),
        Test::gpu(
            "gpu_decode_after_prefill_matches_causal_prefill",
            gpu_decode_after_prefill_matches_causal_prefill,
        ),
    ])
}
