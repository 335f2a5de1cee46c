//! The GPT against `transformers` and PyTorch: the embedded model's logits,
//! a tiny GPT-2 checkpoint written by `transformers.save_pretrained` (logits
//! and greedy tokens), KV-cache decoding against recomputation, ragged
//! batches against their prompts alone, queued steps against steps run
//! one at a time; and typed errors for bad
//! checkpoints, prompts and sampling parameters. On the CPU always; on the
//! GPU where there is one.

#[allow(dead_code)]
#[path = "../../tests/common/harness.rs"]
mod harness;

use gpt_model::{Checkpoint, Draw, Feed, Gpt, GptError, Request, Sampling, Tokenizer, generate};
use harness::Test;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tile::Backend;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn tokens(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// `|got - want| / |want|` over the whole vector.
fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - b).powi(2)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

fn greedy(prompts: Vec<Vec<u32>>, max_new_tokens: usize) -> Request {
    Request {
        prompts,
        max_new_tokens,
        sampling: Sampling::GREEDY,
        stop: None,
    }
}

/// The embedded model's logits for a fixed context against PyTorch's
/// (f32, TF32 products allowed there: within about 1e-3).
fn embedded_matches_pytorch<B: Backend>(on: &B, what: &str, tol: f64) {
    let checkpoint = Checkpoint::embedded().unwrap();
    let model: Gpt<B, f32> = Gpt::load(on, &checkpoint).unwrap();
    let r = json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/reference.json"));
    let ids = Tokenizer::for_checkpoint(&checkpoint)
        .encode(r["context"].as_str().unwrap())
        .unwrap();
    let logits = model.forward(on, &ids).unwrap();
    let v = model.config.vocab_size;
    let first = rel_err(&logits[..v], &floats(&r["first_logits"]));
    let last = rel_err(&logits[(ids.len() - 1) * v..], &floats(&r["last_logits"]));
    println!("{what}: logits' relative error to PyTorch {first:.2e} (first position), {last:.2e} (last)");
    assert!(first < tol && last < tol, "{what}: {first:.2e}, {last:.2e}");
}

/// The tiny GPT-2 against `transformers` (IEEE f32 on the CPU): every
/// position's logits within `tol`, and the greedy continuations, alone and
/// as one ragged batch; products through tf32 where `tf32`.
fn tiny_matches_transformers<B: Backend>(on: &B, what: &str, tol: f64, tf32: bool) {
    let checkpoint = Checkpoint::from_dir(&fixtures().join("tiny-gpt2")).unwrap();
    let r = json(&fixtures().join("tiny-gpt2-reference.json"));
    let mut model: Gpt<B, f32> = Gpt::load(on, &checkpoint).unwrap();
    model.allow_tf32(tf32);
    let v = model.config.vocab_size;
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(tokens).collect();
    let want_greedy: Vec<Vec<u32>> = r["greedy"].as_array().unwrap().iter().map(tokens).collect();
    for (i, p) in prompts.iter().enumerate() {
        let logits = model.forward(on, p).unwrap();
        let want: Vec<f64> = r["logits"][i].as_array().unwrap().iter().flat_map(floats).collect();
        let e = rel_err(&logits, &want);
        println!(
            "{what}: prompt {i}: logits' relative error to transformers {e:.2e} over {} positions",
            p.len()
        );
        assert!(e <= tol, "{what}: prompt {i}: {e:.2e}");
        assert_eq!(logits.len(), p.len() * v);
        let alone = generate(on, &model, &greedy(vec![p.clone()], 24), |_, _| true).unwrap();
        assert_eq!(alone.tokens[0], want_greedy[i], "{what}: greedy tokens of prompt {i}");
    }
    let batch = generate(on, &model, &greedy(prompts, 24), |_, _| true).unwrap();
    assert_eq!(batch.tokens, want_greedy, "{what}: greedy tokens of the batch");
}

/// Decoding with the cache gives, at every step, the logits of recomputing
/// the whole sequence; a greedy step (and a greedy prefill), their
/// largest; a step (and a prefill) sampled with top-k 3, one of their
/// three largest.
fn kv_cache_equals_recomputation<B: Backend>(on: &B, what: &str, tol: f64) {
    let checkpoint = Checkpoint::from_dir(&fixtures().join("tiny-gpt2")).unwrap();
    let model: Gpt<B, f32> = Gpt::load(on, &checkpoint).unwrap();
    let v = model.config.vocab_size;
    let mut seq = vec![5, 77, 300, 12, 12, 9];
    let mut cache = model.cache(on, 1, 40).unwrap();
    let mut logits = model.prefill(on, &mut cache, std::slice::from_ref(&seq)).unwrap();
    let top3 = Draw {
        temperature: 2.0,
        top_k: Some(3),
        top_p: None,
    };
    // A second cache decodes the same tokens greedily (replayed on a GPU),
    // a third samples them; their prefills pick too.
    let prompt = std::slice::from_ref(&seq);
    let mut greedy_cache = model.cache(on, 1, 40).unwrap();
    let mut best = Some(model.prefill_greedy(on, &mut greedy_cache, prompt).unwrap()[0]);
    let mut sampled_cache = model.cache(on, 1, 40).unwrap();
    let key = [4049];
    let mut drawn = Some(
        model
            .prefill_sampled(on, &mut sampled_cache, prompt, (top3, &key))
            .unwrap()[0],
    );
    for step in 0..12 {
        let full = model.forward(on, &seq).unwrap();
        let e = rel_err(
            logits,
            &full[(seq.len() - 1) * v..]
                .iter()
                .map(|&x| x as f64)
                .collect::<Vec<_>>(),
        );
        assert!(
            e <= tol,
            "{what}: step {step}: cached logits differ from recomputation by {e:.2e}"
        );
        let next = gpt_model::sample::argmax(logits);
        if let Some((value, token)) = best {
            assert_eq!(
                (value, token),
                (logits[next as usize], next),
                "{what}: step {step}: greedy step"
            );
        }
        if let Some((_, token)) = drawn {
            let mut order = logits.to_vec();
            order.sort_by(|a, b| b.total_cmp(a));
            let third = order[2];
            assert!(
                logits[token as usize] >= third,
                "{what}: step {step}: top-3 step drew {token}"
            );
        }
        seq.push(next);
        logits = model.decode(on, &mut cache, &[Some(next)]).unwrap();
        best = Some(model.decode_greedy(on, &mut greedy_cache, &[Some(next)]).unwrap()[0]);
        let key = [step as u32 * 7919];
        drawn = Some(
            model
                .decode_sampled(on, &mut sampled_cache, &[Some(next)], (top3, &key))
                .unwrap()[0],
        );
    }
    assert_eq!(cache.lengths(), &[18]);
    assert_eq!(greedy_cache.lengths(), &[18]);
}

/// A ragged batch, sampled on the backend, generates what each prompt
/// generates alone: with top-k and top-p, and at a plain temperature,
/// where a seed gives the same tokens again and another seed others.
fn batch_equals_alone<B: Backend>(on: &B, what: &str) {
    let checkpoint = Checkpoint::embedded().unwrap();
    let tokenizer = Tokenizer::for_checkpoint(&checkpoint);
    let model: Gpt<B, f32> = Gpt::load(on, &checkpoint).unwrap();
    let texts = ["ROMEO:\n", "JULIET:\nO Romeo, Romeo! wherefore art thou", "A"];
    let prompts: Vec<Vec<u32>> = texts.iter().map(|t| tokenizer.encode(t).unwrap()).collect();
    let filtered = Sampling {
        temperature: 0.8,
        top_k: Some(20),
        top_p: Some(0.95),
        seed: 3,
    };
    let plain = Sampling {
        top_k: None,
        top_p: None,
        ..filtered
    };
    let (f, p) = (filtered.draw().unwrap(), plain.draw().unwrap());
    assert_eq!((f.top_k, f.top_p, p.filters()), (Some(20), Some(0.95), false));
    for sampling in [filtered, plain] {
        let request = |prompts: Vec<Vec<u32>>, seed| Request {
            prompts,
            max_new_tokens: 12,
            sampling: Sampling { seed, ..sampling },
            stop: None,
        };
        let batch = generate(on, &model, &request(prompts.clone(), 3), |_, _| true).unwrap();
        for (i, p) in prompts.iter().enumerate() {
            let alone = generate(on, &model, &request(vec![p.clone()], 3), |_, _| true).unwrap();
            assert_eq!(batch.tokens[i], alone.tokens[0], "{what}: {sampling:?}: sequence {i}");
        }
        let again = generate(on, &model, &request(prompts.clone(), 3), |_, _| true).unwrap();
        let other = generate(on, &model, &request(prompts.clone(), 4), |_, _| true).unwrap();
        assert_eq!(again.tokens, batch.tokens, "{what}: {sampling:?}: the same seed");
        assert_ne!(other.tokens, batch.tokens, "{what}: {sampling:?}: another seed");
    }
}

/// Steps queued two at a time, each fed the picks of the step before on
/// the backend, pick what steps run one at a time pick, greedy and
/// sampled with top-k, over a batch whose second sequence stops growing
/// half-way; a step fed picks that aren't there, a third queued step and
/// reading with none queued are errors.
fn queued_steps_equal_synchronous<B: Backend>(on: &B, what: &str) {
    let checkpoint = Checkpoint::embedded().unwrap();
    let model: Gpt<B, f32> = Gpt::load(on, &checkpoint).unwrap();
    let prompts = vec![vec![5, 17, 30, 12, 12, 9, 41], vec![3], vec![20, 21, 22, 23]];
    let top = Draw {
        temperature: 0.9,
        top_k: Some(10),
        top_p: None,
    };
    let keys = |step: u32| [step * 31 + 1, step * 17 + 2, step + 99];
    let grows = |step: usize| [true, step < 8, true];
    let steps = 16;
    for sample in [None, Some(top)] {
        let first = |cache: &mut gpt_model::KvCache<B, f32>| -> Vec<u32> {
            let picks = match sample {
                None => model.prefill_greedy(on, cache, &prompts),
                Some(d) => model.prefill_sampled(on, cache, &prompts, (d, &keys(0))),
            };
            picks.unwrap().into_iter().map(|(_, t)| t).collect()
        };
        let mut one = model.cache(on, 3, 64).unwrap();
        let mut want = vec![first(&mut one)];
        for step in 1..steps {
            let feed: Vec<Option<u32>> = (want[step - 1].iter().zip(grows(step)))
                .map(|(&t, g)| g.then_some(t))
                .collect();
            let picks = match sample {
                None => model.decode_greedy(on, &mut one, &feed),
                Some(d) => model.decode_sampled(on, &mut one, &feed, (d, &keys(step as u32))),
            };
            want.push(picks.unwrap().into_iter().map(|(_, t)| t).collect());
        }
        let mut queued = model.cache(on, 3, 64).unwrap();
        let mut got = vec![first(&mut queued)];
        let queue = |cache: &mut gpt_model::KvCache<B, f32>, step: usize| {
            let keys = keys(step as u32);
            let sample = sample.map(|d| (d, &keys[..]));
            model.queue_decode(on, cache, Feed::Picks(&grows(step)), sample)
        };
        queue(&mut queued, 1).unwrap();
        for step in 2..steps {
            queue(&mut queued, step).unwrap();
            got.push(model.next_picks(on, &mut queued).unwrap());
        }
        got.push(model.next_picks(on, &mut queued).unwrap());
        for (step, (got, want)) in got.iter().zip(&want).enumerate() {
            // A sequence that stopped growing picks from no new token.
            let picked = |p: &[u32]| [p[0], if step < 8 { p[1] } else { 0 }, p[2]];
            assert_eq!(picked(got), picked(want), "{what}: {sample:?}: step {step}");
        }
        assert_eq!(queued.lengths(), one.lengths(), "{what}: {sample:?}");
        assert!(matches!(model.next_picks(on, &mut queued), Err(GptError::Prompt(_))));
        queue(&mut queued, 1).unwrap();
        queue(&mut queued, 2).unwrap();
        assert!(
            matches!(queue(&mut queued, 3), Err(GptError::Prompt(_))),
            "{what}: a third step"
        );
        model.next_picks(on, &mut queued).unwrap();
        model.next_picks(on, &mut queued).unwrap();
    }
    // After a prefill that left logits, no pick is there to feed a step.
    let mut cache = model.cache(on, 3, 64).unwrap();
    model.prefill(on, &mut cache, &prompts).unwrap();
    let fed = model.queue_decode(on, &mut cache, Feed::Picks(&[true; 3]), None);
    assert!(matches!(fed, Err(GptError::Prompt(_))), "{what}: picks after logits");
}

fn cpu_embedded_model_matches_pytorch() {
    embedded_matches_pytorch(&tile::Cpu, "cpu", 2e-3);
}

fn cpu_tiny_gpt2_matches_transformers() {
    tiny_matches_transformers(&tile::Cpu, "cpu", 1e-4, true);
    tiny_matches_transformers(&tile::Cpu, "cpu, no tf32", 1e-5, false);
}

fn cpu_kv_cache_decoding_equals_recomputation() {
    kv_cache_equals_recomputation(&tile::Cpu, "cpu", 1e-5);
}

fn cpu_ragged_batch_equals_its_prompts_alone() {
    batch_equals_alone(&tile::Cpu, "cpu");
}

fn cpu_queued_steps_equal_synchronous_ones() {
    queued_steps_equal_synchronous(&tile::Cpu, "cpu");
}

fn gpu_model_matches_the_references(device: Arc<tile::Device>) {
    let s = device.stream();
    embedded_matches_pytorch(&s, "gpu", 2e-3);
    // f32 through tf32 on the tensor cores, then in IEEE f32.
    tiny_matches_transformers(&s, "gpu", 3e-3, true);
    tiny_matches_transformers(&s, "gpu, no tf32", 1e-5, false);
    kv_cache_equals_recomputation(&s, "gpu", 3e-3);
    batch_equals_alone(&s, "gpu");
    queued_steps_equal_synchronous(&s, "gpu");
}

/// Decode steps replayed from a CUDA graph give exactly the logits of the
/// same steps launched kernel by kernel, on a ragged batch whose second
/// sequence finishes half-way, in f32 and bf16; a cache outlives a second
/// prefill with its recorded step.
fn gpu_replayed_decode_steps_equal_launched_ones(device: Arc<tile::Device>) {
    fn check<T: gpt_model::Float>(s: &tile::Stream, what: &str) {
        let checkpoint = Checkpoint::embedded().unwrap();
        let replayed: Gpt<_, T> = Gpt::load(s, &checkpoint).unwrap();
        let mut launched: Gpt<_, T> = Gpt::load(s, &checkpoint).unwrap();
        launched.use_cuda_graphs(false);
        let prompts = vec![vec![5, 17, 30, 12, 12, 9, 41], vec![3], vec![20, 21, 22, 23]];
        let v = checkpoint.config.vocab_size;
        let (mut a, mut b) = (replayed.cache(s, 3, 64).unwrap(), launched.cache(s, 3, 64).unwrap());
        for round in 0..2 {
            let mut got = replayed.prefill(s, &mut a, &prompts).unwrap();
            let mut want = launched.prefill(s, &mut b, &prompts).unwrap();
            for step in 0..20 {
                assert_eq!(got, want, "{what}: round {round}, step {step}");
                let next: Vec<Option<u32>> = (want.chunks_exact(v).enumerate())
                    .map(|(i, row)| (i != 1 || step < 10).then(|| gpt_model::sample::argmax(row)))
                    .collect();
                got = replayed.decode(s, &mut a, &next).unwrap();
                want = launched.decode(s, &mut b, &next).unwrap();
            }
            assert_eq!(a.lengths(), b.lengths());
        }
    }
    let s = device.stream();
    check::<f32>(&s, "f32");
    check::<tile::bf16>(&s, "bf16");
}

/// The checkpoints of `tests/shapes/make_checkpoints.py`, from the directory
/// `TILE_GPT2_SHAPES` names.
fn shapes_dir() -> Result<PathBuf, harness::Missing> {
    match std::env::var_os("TILE_GPT2_SHAPES") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Err(harness::Missing {
            reason: "no checkpoints: TILE_GPT2_SHAPES is not set".to_string(),
            detail: "python3 gpt-model/tests/shapes/make_checkpoints.py DIR writes them (transformers, on a GPU); \
                     then set TILE_GPT2_SHAPES=DIR."
                .to_string(),
        }),
    }
}

/// Where two token sequences first differ, if they do.
fn first_divergence(got: &[u32], want: &[u32]) -> Option<usize> {
    (0..want.len()).find(|&i| got.get(i) != Some(&want[i]))
}

/// Our logits (largest relative and absolute error over the prompts) and
/// greedy tokens (first divergence per prompt) in `T` (f32 through tf32
/// where `tf32`) against the reference of one checkpoint.
fn against_reference<T: gpt_model::Float>(
    s: &tile::Stream,
    (checkpoint, tf32): (&Checkpoint, bool),
    prompts: &[Vec<u32>],
    logits: &[Vec<f64>],
    want: &[Vec<u32>],
) -> (f64, f64, Vec<Option<usize>>) {
    let mut model: Gpt<_, T> = Gpt::load(s, checkpoint).unwrap();
    model.allow_tf32(tf32);
    let (mut rel, mut abs) = (0f64, 0f64);
    let mut diverged = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let got = model.forward(s, p).unwrap();
        rel = rel.max(rel_err(&got, &logits[i]));
        abs = (got.iter().zip(&logits[i])).fold(abs, |m, (a, b)| m.max((*a as f64 - b).abs()));
        let out = generate(s, &model, &greedy(vec![p.clone()], want[i].len()), |_, _| true).unwrap();
        diverged.push(first_divergence(&out.tokens[0], &want[i]));
    }
    (rel, abs, diverged)
}

/// Random-initialised GPT-2s of the family's widths and of other shapes
/// against `transformers` in IEEE f32 on the GPU: f32 (tf32 products)
/// within 1e-2 and the greedy tokens identical wherever the reference's
/// smallest margin exceeds four times our largest logit error; f32 without
/// tf32 within 1e-4 and every greedy token identical; bf16 and f16 within
/// 1e-1, their first divergence reported.
fn gpu_shapes_match_transformers((device, dir): (Arc<tile::Device>, PathBuf)) {
    let s = device.stream();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("reference.json").exists())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no checkpoints in {}", dir.display());
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let checkpoint = Checkpoint::from_dir(&path).unwrap();
        let r = json(&path.join("reference.json"));
        let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(tokens).collect();
        let want: Vec<Vec<u32>> = r["greedy"].as_array().unwrap().iter().map(tokens).collect();
        let min_gap = floats(&r["min_gap"]).into_iter().fold(f64::INFINITY, f64::min);
        let bytes = std::fs::read(path.join("reference.safetensors")).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let logits: Vec<Vec<f64>> = (0..prompts.len())
            .map(|i| {
                let t = file.tensor(&format!("logits.{i}")).unwrap();
                (t.data().chunks_exact(4))
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                    .collect()
            })
            .collect();
        let (rel, abs, diverged) = against_reference::<f32>(&s, (&checkpoint, true), &prompts, &logits, &want);
        println!(
            "{name}: f32 (tf32) logits' relative error {rel:.2e}, largest {abs:.2e}; \
             smallest greedy margin {min_gap:.2e}; first divergence of {} greedy tokens {diverged:?}",
            want[0].len()
        );
        assert!(rel <= 1e-2, "{name}: f32: {rel:.2e}");
        if min_gap > 4.0 * abs {
            assert!(
                diverged.iter().all(Option::is_none),
                "{name}: f32 greedy tokens: {diverged:?}"
            );
        }
        let (rel, abs, diverged) = against_reference::<f32>(&s, (&checkpoint, false), &prompts, &logits, &want);
        println!(
            "{name}: f32 (IEEE) logits' relative error {rel:.2e}, largest {abs:.2e}; first divergence {diverged:?}"
        );
        assert!(rel <= 1e-4, "{name}: f32 IEEE: {rel:.2e}");
        assert!(
            diverged.iter().all(Option::is_none),
            "{name}: f32 IEEE greedy tokens: {diverged:?}"
        );
        for (dtype, (rel, _, diverged)) in [
            (
                "bf16",
                against_reference::<tile::bf16>(&s, (&checkpoint, true), &prompts, &logits, &want),
            ),
            (
                "f16",
                against_reference::<tile::f16>(&s, (&checkpoint, true), &prompts, &logits, &want),
            ),
        ] {
            println!("{name}: {dtype} logits' relative error {rel:.2e}; first divergence {diverged:?}");
            assert!(rel <= 1e-1, "{name}: {dtype}: {rel:.2e}");
        }
    }
}

fn a_stop_token_ends_its_sequence_only() {
    let checkpoint = Checkpoint::from_dir(&fixtures().join("tiny-gpt2")).unwrap();
    let model: Gpt<_, f32> = Gpt::load(&tile::Cpu, &checkpoint).unwrap();
    let r = json(&fixtures().join("tiny-gpt2-reference.json"));
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(tokens).collect();
    let want: Vec<Vec<u32>> = r["greedy"].as_array().unwrap().iter().map(tokens).collect();
    // The first sequence's fourth greedy token as the stop token: each
    // sequence ends before its first.
    let stop = want[0][3];
    let mut request = greedy(prompts, 24);
    request.stop = Some(stop);
    let out = generate(&tile::Cpu, &model, &request, |_, _| true).unwrap();
    let until = |w: &[u32]| w.iter().position(|&t| t == stop).unwrap_or(w.len());
    assert!(until(&want[0]) <= 3);
    assert_eq!(out.tokens[0], want[0][..until(&want[0])]);
    assert_eq!(out.stops[0], gpt_model::Stop::EndOfText);
    assert_eq!(out.tokens[1], want[1][..until(&want[1])]);
    // A callback that refuses more tokens stops everything.
    let mut seen = 0;
    let out = generate(&tile::Cpu, &model, &greedy(vec![vec![1, 2]], 24), |_, _| {
        seen += 1;
        seen < 5
    })
    .unwrap();
    assert_eq!(out.tokens[0].len(), 5);
    assert_eq!(out.stops[0], gpt_model::Stop::Caller);
}

fn the_context_ends_generation_with_a_clear_stop() {
    let checkpoint = Checkpoint::from_dir(&fixtures().join("tiny-gpt2")).unwrap();
    let model: Gpt<_, f32> = Gpt::load(&tile::Cpu, &checkpoint).unwrap();
    // 60 prompt tokens in a context of 64: 5 more tokens, then the context is full.
    let out = generate(
        &tile::Cpu,
        &model,
        &greedy(vec![vec![7; 60], vec![8; 3]], 30),
        |_, _| true,
    )
    .unwrap();
    assert_eq!(out.tokens[0].len(), 5);
    assert_eq!(out.stops[0], gpt_model::Stop::ContextFull);
    assert_eq!(out.tokens[1].len(), 30);
    assert_eq!(out.stops[1], gpt_model::Stop::Length);
    let e = generate(&tile::Cpu, &model, &greedy(vec![vec![7; 65]], 1), |_, _| true).unwrap_err();
    assert!(matches!(e, GptError::Prompt(_)), "{e}");
}

/// A `'static` copy of `bytes`, as `Checkpoint::from_embedded` takes them.
fn leak(bytes: Vec<u8>) -> &'static [u8] {
    Box::leak(bytes.into_boxed_slice())
}

fn bad_checkpoints_are_errors_naming_the_file_and_tensor() {
    let load = |c: gpt_model::Result<Checkpoint>| -> String {
        match c.and_then(|c| Gpt::<_, f32>::load(&tile::Cpu, &c).map(|_| ())) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("a bad checkpoint was accepted"),
        }
    };
    let model = gpt_model::DEFAULT_MODEL;
    assert!(load(Checkpoint::from_embedded(&[], "empty.safetensors")).contains("empty.safetensors"));
    assert!(load(Checkpoint::from_embedded(&model[..model.len() / 2], "half")).contains("not a safetensors file"));
    let mut flipped = model.to_vec();
    flipped[0] ^= 0x55;
    assert!(!load(Checkpoint::from_embedded(leak(flipped), "flipped")).is_empty());

    // A well-formed file without the model's tensors, and one with a tensor
    // of the wrong shape.
    let meta = |config: &str| {
        Some(
            [
                ("config".to_string(), config.to_string()),
                ("vocab".to_string(), "\"ab\"".to_string()),
            ]
            .into_iter()
            .collect(),
        )
    };
    let config = r#"{"n_layer":1,"n_head":1,"n_embd":32,"n_positions":8,"vocab_size":2}"#;
    let empty: Vec<(String, safetensors::tensor::TensorView)> = vec![];
    let bytes = leak(safetensors::serialize(empty, meta(config)).unwrap());
    let e = load(Checkpoint::from_embedded(bytes, "no-tensors.safetensors"));
    assert!(
        e.contains("no-tensors.safetensors") && e.contains("missing tensor `h.0.ln_1.weight`"),
        "{e}"
    );
    let data = vec![0u8; 31 * 4];
    let ln = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![31], &data).unwrap();
    let bytes = leak(safetensors::serialize([("h.0.ln_1.weight".to_string(), ln)], meta(config)).unwrap());
    let e = load(Checkpoint::from_embedded(bytes, "shapes.safetensors"));
    assert!(e.contains("`h.0.ln_1.weight` has shape [31], expected [32]"), "{e}");
    // A config the kernels aren't built for (heads of 16).
    let bad = r#"{"n_layer":1,"n_head":2,"n_embd":32,"n_positions":8,"vocab_size":2}"#;
    let bytes =
        leak(safetensors::serialize(Vec::<(String, safetensors::tensor::TensorView)>::new(), meta(bad)).unwrap());
    assert!(load(Checkpoint::from_embedded(bytes, "heads")).contains("heads of 16"));

    // Directories: missing files name the path.
    let e = load(Checkpoint::from_dir(Path::new("/nonexistent/model")));
    assert!(e.contains("/nonexistent/model/config.json"), "{e}");
}

fn bad_prompts_and_sampling_parameters_are_errors() {
    let checkpoint = Checkpoint::embedded().unwrap();
    let tokenizer = Tokenizer::for_checkpoint(&checkpoint);
    let e = tokenizer.encode("naïve").unwrap_err().to_string();
    assert!(e.contains("'ï'") && e.contains("ABC"), "{e}");
    let model: Gpt<_, f32> = Gpt::load(&tile::Cpu, &checkpoint).unwrap();
    let vocab = model.config.vocab_size as u32;
    let err = |request: Request| generate(&tile::Cpu, &model, &request, |_, _| true).unwrap_err();
    assert!(matches!(err(greedy(vec![], 5)), GptError::Prompt(_)));
    assert!(matches!(err(greedy(vec![vec![]], 5)), GptError::Prompt(_)));
    assert!(matches!(err(greedy(vec![vec![vocab]], 5)), GptError::Prompt(_)));
    for (temperature, top_k, top_p) in [
        (f32::NAN, None, None),
        (-1.0, None, None),
        (1.0, Some(0), None),
        (1.0, None, Some(1.5)),
    ] {
        let mut r = greedy(vec![vec![1]], 5);
        r.sampling = Sampling {
            temperature,
            top_k,
            top_p,
            seed: 0,
        };
        assert!(matches!(err(r), GptError::Sampling(_)));
    }
}

fn main() -> ExitCode {
    harness::run([
        Test::new("cpu_embedded_model_matches_pytorch", cpu_embedded_model_matches_pytorch),
        Test::new("cpu_tiny_gpt2_matches_transformers", cpu_tiny_gpt2_matches_transformers),
        Test::new(
            "cpu_kv_cache_decoding_equals_recomputation",
            cpu_kv_cache_decoding_equals_recomputation,
        ),
        Test::new(
            "cpu_ragged_batch_equals_its_prompts_alone",
            cpu_ragged_batch_equals_its_prompts_alone,
        ),
        Test::new(
            "cpu_queued_steps_equal_synchronous_ones",
            cpu_queued_steps_equal_synchronous_ones,
        ),
        Test::new(
            "a_stop_token_ends_its_sequence_only",
            a_stop_token_ends_its_sequence_only,
        ),
        Test::new(
            "the_context_ends_generation_with_a_clear_stop",
            the_context_ends_generation_with_a_clear_stop,
        ),
        Test::new(
            "bad_checkpoints_are_errors_naming_the_file_and_tensor",
            bad_checkpoints_are_errors_naming_the_file_and_tensor,
        ),
        Test::new(
            "bad_prompts_and_sampling_parameters_are_errors",
            bad_prompts_and_sampling_parameters_are_errors,
        ),
        Test::gpu("gpu_model_matches_the_references", gpu_model_matches_the_references),
        Test::gpu(
            "gpu_replayed_decode_steps_equal_launched_ones",
            gpu_replayed_decode_steps_equal_launched_ones,
        ),
        Test::needing(
            "gpu_shapes_match_transformers",
            || Ok((harness::gpu_for("gpu_shapes_match_transformers")?, shapes_dir()?)),
            gpu_shapes_match_transformers,
        ),
    ])
}
