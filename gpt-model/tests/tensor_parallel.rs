//! A model split over ranks (tensor parallelism) against the whole model:
//! prefill and decode logits within the dtype's tolerance (the row-parallel
//! sums add in another order) and the same greedy tokens, on a ragged
//! batch. On the CPU, ranks are threads of this process joined by a host
//! all-reduce (TP = 2 and 3); on GPUs, the one-shot all-reduce (with NCCL
//! for large tensors) joins GPUs 0 and 1, NCCL 0 to 2 and 0 to 3 where the
//! machine has them.

#[allow(dead_code)]
#[path = "../../tests/common/harness.rs"]
mod harness;

use gpt_model::{Checkpoint, Collective, Float, Gpt, GptError, Request, Sampling, TensorParallel, generate};
use half::bf16;
use harness::{Missing, Test};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use tile::{Cpu, Device};
use tile_kernels::collective::{CAPACITY, PeerAllReduce};

fn embedded() -> Checkpoint {
    Checkpoint::embedded().unwrap()
}

fn tiny() -> Checkpoint {
    Checkpoint::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gpt2")).unwrap()
}

/// `|got - want| / |want|` over the whole vector.
fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Prompts of different lengths, within both test models' vocabularies.
fn prompts() -> Vec<Vec<u32>> {
    vec![vec![5, 17, 30, 12, 12, 9, 41], vec![3], vec![20, 21, 22, 23]]
}

/// The model split over `ranks` against the whole model on `whole`: the
/// logits of a prefill and of eight decode steps within `tol`, and, where
/// `same_tokens` (IEEE f32: the rounding of a reordered sum is far below the
/// margins), 24 greedy tokens per sequence identical.
fn split_equals_whole<B: Collective<T> + Clone, T: Float>(
    whole: &B,
    ranks: Vec<B>,
    checkpoint: &Checkpoint,
    what: &str,
    (tol, same_tokens): (f64, bool),
) {
    let n = ranks.len();
    let mut model: Gpt<B, T> = Gpt::load(whole, checkpoint).unwrap();
    let mut split: TensorParallel<B, T> = TensorParallel::load(ranks, checkpoint).unwrap();
    // f32 in IEEE f32, as the parity asks (bf16 is not affected).
    model.allow_tf32(false);
    split.allow_tf32(false);
    let prompts = prompts();
    let mut cache = model.cache(whole, prompts.len(), 48).unwrap();
    let mut split_cache = split.cache(prompts.len(), 48).unwrap();
    let mut want = model.prefill(whole, &mut cache, &prompts).unwrap();
    let mut got = split.prefill(&mut split_cache, &prompts).unwrap();
    let v = split.config().vocab_size;
    for step in 0..=8 {
        let e = rel_err(got, want);
        println!("{what}, TP={n}: step {step}: logits' relative error to one rank {e:.2e}");
        assert!(e <= tol, "{what}, TP={n}: step {step}: {e:.2e} > {tol:.0e}");
        let next: Vec<Option<u32>> = want
            .chunks_exact(v)
            .map(|row| Some(gpt_model::sample::argmax(row)))
            .collect();
        want = model.decode(whole, &mut cache, &next).unwrap();
        got = split.decode(&mut split_cache, &next).unwrap();
    }
    assert_eq!(split_cache.lengths(), cache.lengths());
    let request = Request {
        prompts,
        max_new_tokens: 24,
        sampling: Sampling::GREEDY,
        stop: None,
    };
    let want = generate(whole, &model, &request, |_, _| true).unwrap();
    let got = split.generate(&request, |_, _| true).unwrap();
    if same_tokens {
        assert_eq!(got.tokens, want.tokens, "{what}, TP={n}: greedy tokens");
    }
    // One sequence: decode steps of one row.
    let single = Request {
        prompts: request.prompts[..1].to_vec(),
        ..request.clone()
    };
    let want = generate(whole, &model, &single, |_, _| true).unwrap();
    let got = split.generate(&single, |_, _| true).unwrap();
    if same_tokens {
        assert_eq!(got.tokens, want.tokens, "{what}, TP={n}: greedy tokens of one sequence");
    }
    // Drawn at a temperature on every rank, each token's noise the same
    // on whichever rank holds it.
    let request = Request {
        sampling: Sampling {
            temperature: 0.9,
            seed: 5,
            ..Sampling::GREEDY
        },
        ..request
    };
    let want = generate(whole, &model, &request, |_, _| true).unwrap();
    let got = split.generate(&request, |_, _| true).unwrap();
    if same_tokens {
        assert_eq!(got.tokens, want.tokens, "{what}, TP={n}: sampled tokens");
    }
    // With top-k and top-p, every rank draws from the whole row, which an
    // all-reduce gathers.
    let request = Request {
        sampling: Sampling {
            top_k: Some(12),
            top_p: Some(0.9),
            seed: 6,
            ..request.sampling
        },
        ..request
    };
    let want = generate(whole, &model, &request, |_, _| true).unwrap();
    let got = split.generate(&request, |_, _| true).unwrap();
    if same_tokens {
        assert_eq!(got.tokens, want.tokens, "{what}, TP={n}: top-k and top-p tokens");
    }
}

fn cpu_two_and_three_ranks_equal_one() {
    for n in [2, 3] {
        split_equals_whole::<Cpu, f32>(&Cpu, vec![Cpu; n], &embedded(), "embedded model, CPU f32", (1e-5, true));
    }
    split_equals_whole::<Cpu, f32>(&Cpu, vec![Cpu; 2], &tiny(), "tiny GPT-2, CPU f32", (1e-5, true));
    split_equals_whole::<Cpu, bf16>(
        &Cpu,
        vec![Cpu; 2],
        &embedded(),
        "embedded model, CPU bf16",
        (3e-2, false),
    );
}

fn every_rank_needs_a_head() {
    let tiny = tiny();
    for n in [0, 3] {
        match TensorParallel::<Cpu, f32>::load(vec![Cpu; n], &tiny) {
            Err(GptError::Parallel(m)) => println!("{n} ranks: {m}"),
            Err(e) => panic!("{n} ranks: unexpected error {e}"),
            Ok(_) => panic!("{n} ranks for a model of 2 heads: no error"),
        }
    }
}

/// The most ranks the GPU tests use: the embedded model has 4 heads, and
/// the one-shot all-reduce joins up to `collective::MOST_RANKS` (4).
const MOST_RANKS: usize = 4;

/// GPUs 0 up to [`MOST_RANKS`] - 1 (at least two), or why this machine
/// can't run the test.
fn gpus(test: &str) -> Result<Vec<Arc<Device>>, Missing> {
    let first = harness::gpu_for(test)?;
    match tile::device_count() {
        Ok(n) if n >= 2 => {
            let rest = (1..n.min(MOST_RANKS)).map(|i| Device::new(i).map_err(|e| missing(e.to_string())));
            std::iter::once(Ok(first)).chain(rest).collect()
        }
        Ok(n) => Err(missing(format!("needs 2 GPUs, found {n}"))),
        Err(e) => Err(missing(e.to_string())),
    }
}

fn missing(reason: String) -> Missing {
    Missing {
        detail: format!("{reason}: tensor parallelism runs over 2 GPUs or more"),
        reason,
    }
}

/// Over GPUs 0 and 1, then over every larger count the machine has, up to
/// [`MOST_RANKS`] (3 ranks split the embedded model's 4 heads unevenly).
fn gpu_ranks_equal_one(devices: Vec<Arc<Device>>) {
    let whole = devices[0].stream();
    for n in 2..=devices.len() {
        let ranks: Vec<_> = devices[..n].iter().map(|d| d.stream()).collect();
        // What differs from one rank is the order of the all-reduce's sums.
        split_equals_whole::<_, f32>(
            &whole,
            ranks.clone(),
            &embedded(),
            "embedded model, GPU f32",
            (1e-4, true),
        );
        if n == 2 {
            split_equals_whole::<_, f32>(&whole, ranks.clone(), &tiny(), "tiny GPT-2, GPU f32", (1e-5, true));
        }
        split_equals_whole::<_, bf16>(&whole, ranks, &embedded(), "embedded model, GPU bf16", (3e-2, false));
    }
}

/// The DSL's one-shot all-reduce over GPUs 0 and 1, then over every larger
/// count the machine has, up to [`MOST_RANKS`]: every end gets the
/// elementwise sum, bit for bit what the host adds in f32 in rank order
/// and rounds to the type, over ragged sizes (one element to
/// [`CAPACITY`]) and several rounds of each (both inbox slots); a tensor
/// over the capacity is a typed error that queues nothing.
fn gpu_one_shot_all_reduce_sums_exactly(devices: Vec<Arc<Device>>) {
    fn check<T: Float>(on: &[&tile::Stream], seed: u64) {
        let n = on.len();
        let mut ends = PeerAllReduce::<T>::join(on).unwrap();
        let mut state = seed;
        let mut random = |len: usize| -> Vec<T> {
            (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    T::from(((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0).unwrap()
                })
                .collect()
        };
        for (len, shape) in [
            (1, vec![1]),
            (1000, vec![1000]),
            (1600, vec![1, 1600]),
            (3 * 1024 + 5, vec![3 * 1024 + 5]),
            (25_600, vec![16, 1600]),
            (CAPACITY, vec![CAPACITY]),
        ] {
            for round in 0..3 {
                let parts: Vec<Vec<T>> = (0..n).map(|_| random(len)).collect();
                let want: Vec<T> = (0..len)
                    .map(|i| {
                        let sum = parts.iter().fold(None, |acc: Option<f32>, p| {
                            let v = p[i].to_f32().unwrap();
                            Some(acc.map_or(v, |a| a + v))
                        });
                        T::from(sum.unwrap()).unwrap()
                    })
                    .collect();
                let mut xs: Vec<_> = (0..n).map(|r| on[r].upload_slice(&parts[r], &shape).unwrap()).collect();
                // Queued on every GPU before any waits for the others.
                for (end, x) in ends.iter_mut().zip(&mut xs) {
                    end.sum(x).unwrap();
                    assert_eq!(x.shape(), &shape[..], "the shape is given back");
                }
                for (r, x) in xs.iter().enumerate() {
                    let got = on[r].download(x).unwrap().to_vec();
                    assert!(
                        got.iter()
                            .zip(&want)
                            .all(|(g, w)| g.to_f32().map(f32::to_bits) == w.to_f32().map(f32::to_bits)),
                        "{}: {n} ranks, rank {r}, {len} elements, round {round}: not the host's sums",
                        std::any::type_name::<T>()
                    );
                }
            }
        }
        let mut big = on[0].zeros::<T>(&[CAPACITY + 1]).unwrap();
        match ends[0].sum(&mut big) {
            Err(tile::Error::Shape(m)) => assert!(m.contains("up to"), "{m}"),
            other => panic!("{} elements: {other:?}", CAPACITY + 1),
        }
    }
    let streams: Vec<_> = devices.iter().map(|d| d.stream()).collect();
    for n in 2..=streams.len() {
        let on: Vec<&tile::Stream> = streams[..n].iter().collect();
        check::<f32>(&on, 1);
        check::<bf16>(&on, 2);
        check::<half::f16>(&on, 3);
    }
    let one = [&streams[0]];
    match PeerAllReduce::<f32>::join(&one) {
        Err(tile::Error::Shape(m)) => assert!(m.contains("2 to"), "{m}"),
        other => panic!("one rank: {:?}", other.map(|e| e.len())),
    }
}

fn main() -> ExitCode {
    harness::run([
        Test::new("cpu_two_and_three_ranks_equal_one", cpu_two_and_three_ranks_equal_one),
        Test::new("every_rank_needs_a_head", every_rank_needs_a_head),
        Test::needing(
            "gpu_one_shot_all_reduce_sums_exactly",
            || gpus("gpu_one_shot_all_reduce_sums_exactly"),
            gpu_one_shot_all_reduce_sums_exactly,
        ),
        Test::needing(
            "gpu_ranks_equal_one",
            || gpus("gpu_ranks_equal_one"),
            gpu_ranks_equal_one,
        ),
    ])
}
