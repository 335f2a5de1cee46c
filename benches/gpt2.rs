//! GPT-2 prefill and decoding on a checkpoint in the Hugging Face layout,
//! the workloads of `benches/gpt2_transformers.py`, which times
//! `transformers` on the same checkpoint, shapes and prompts. Run on a GPU:
//!
//! ```text
//! python3 benches/gpt2_transformers.py DIR    # writes DIR (random GPT-2 124M weights) if missing
//! cargo bench --bench gpt2 -- DIR             # here, or the built binary on the GPU machine
//! ```
//!
//! - prefill: a batch of prompts of one length into a KV cache, to the
//!   logits of each prompt's last token (what generation needs), median of
//!   wall-clock runs that end with the logits on the host;
//! - time to first token: one prompt of 1,000 tokens, loaded and tuned,
//!   to its logits on the host (as above) and to its greedy token picked
//!   on the GPU (`prefill_greedy`, what `generate` runs);
//! - decode: a 16-token prompt and 256 new tokens, greedy, past any
//!   end-of-text, tokens per second after the first token (`generate`'s
//!   own timing), after one run of the same shape has tuned the kernels;
//!   steps replayed from a CUDA graph (the default), then launched kernel
//!   by kernel; and sampled (bf16) on the GPU at temperature 0.8, plain,
//!   with top-k 50, and with top-k 50 and top-p 0.95;
//! - the host's part of a decode step: the median time `queue_decode`
//!   takes, with steps queued one ahead as `generate` queues them.
//!
//! `--decode-only` times greedy decoding alone (replayed and launched, in
//! bf16 then f32), for A/B runs of two builds in one call.

#[allow(dead_code)] // the helpers this bench does not use
mod common;

use common::{gpu_stream, median_wall_ms, prompts};
use gpt_model::{Checkpoint, Feed, Float, Gpt, Request, Sampling, generate};
use std::path::Path;
use std::time::Instant;
use tile::{Stream, bf16};

/// The decode prompt: "The meaning of life is a question that has been
/// asked by the largest of all" in GPT-2's BPE, as in the Python script.
const PROMPT: [u32; 16] = [
    464, 3616, 286, 1204, 318, 257, 1808, 326, 468, 587, 1965, 416, 262, 4387, 286, 477,
];
const NEW_TOKENS: usize = 256;

/// Median milliseconds of `reps` prefills of `batch` prompts of `len`
/// tokens (after two runs that tune and warm up).
fn prefill<T: Float>(s: &Stream, model: &Gpt<Stream, T>, batch: usize, len: usize, reps: usize) -> f64 {
    let prompts = prompts(batch, len, model.config.vocab_size);
    let mut cache = model.cache(s, batch, len).unwrap();
    median_wall_ms(reps, || {
        model.prefill(s, &mut cache, &prompts).unwrap();
    })
}

/// Median milliseconds from one prompt of `len` tokens to its last logits
/// on the host, and to its greedy token picked on the GPU, over `reps`
/// runs of each, taking turns (after two of each that tune and warm up).
fn time_to_first_token<T: Float>(s: &Stream, model: &Gpt<Stream, T>, len: usize, reps: usize) -> [f64; 2] {
    let prompts = prompts(1, len, model.config.vocab_size);
    let mut cache = model.cache(s, 1, len).unwrap();
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..reps + 2 {
        let t = Instant::now();
        model.prefill(s, &mut cache, &prompts).unwrap();
        times[0].push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        model.prefill_greedy(s, &mut cache, &prompts).unwrap();
        times[1].push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.map(|mut ms| {
        let mut ms = ms.split_off(2);
        ms.sort_by(f64::total_cmp);
        ms[reps / 2]
    })
}

/// Decode tokens per second at `batch`, and the tokens of the first sequence.
fn decode<T: Float>(s: &Stream, model: &Gpt<Stream, T>, batch: usize) -> (f64, Vec<u32>) {
    decode_with(s, model, batch, Sampling::GREEDY)
}

fn decode_with<T: Float>(s: &Stream, model: &Gpt<Stream, T>, batch: usize, sampling: Sampling) -> (f64, Vec<u32>) {
    let request = Request {
        prompts: vec![PROMPT.to_vec(); batch],
        max_new_tokens: NEW_TOKENS,
        sampling,
        stop: None,
    };
    generate(s, model, &request, |_, _| true).unwrap();
    let out = generate(s, model, &request, |_, _| true).unwrap();
    let rate = out.decode_tokens as f64 / out.decode.as_secs_f64();
    (rate, out.tokens[0].clone())
}

/// The host's part of a greedy decode step at `batch`, queued one ahead
/// as `generate` queues them: median µs of `queue_decode` (the step's
/// positions written, its graph replayed, its picks' copy queued), and of
/// a whole step (that, then `next_picks` waiting for the step before).
fn host_time<T: Float>(s: &Stream, model: &Gpt<Stream, T>, batch: usize) -> [f64; 2] {
    let prompts = vec![PROMPT.to_vec(); batch];
    let mut cache = model.cache(s, batch, PROMPT.len() + NEW_TOKENS).unwrap();
    let first: Vec<Option<u32>> = (model.prefill_greedy(s, &mut cache, &prompts).unwrap())
        .into_iter()
        .map(|(_, t)| Some(t))
        .collect();
    let running = vec![true; batch];
    model.queue_decode(s, &mut cache, Feed::Tokens(&first), None).unwrap();
    let mut times = [Vec::new(), Vec::new()];
    for _ in 2..NEW_TOKENS {
        let t = Instant::now();
        model.queue_decode(s, &mut cache, Feed::Picks(&running), None).unwrap();
        times[0].push(t.elapsed().as_secs_f64() * 1e6);
        model.next_picks(s, &mut cache).unwrap();
        times[1].push(t.elapsed().as_secs_f64() * 1e6);
    }
    model.next_picks(s, &mut cache).unwrap();
    times.map(|mut us| {
        us.sort_by(f64::total_cmp);
        us[us.len() / 2]
    })
}

fn report<T: Float>(s: &Stream, checkpoint: &Checkpoint, dtype: &str, decode_only: bool) {
    let loading = Instant::now();
    let model: Gpt<Stream, T> = Gpt::load(s, checkpoint).unwrap();
    let ctx = model.config.n_positions;
    println!("{dtype}: load {:.2} s", loading.elapsed().as_secs_f64());
    if !decode_only {
        let (b, t) = if dtype == "f32" { (8, 128) } else { (16, 1024.min(ctx)) };
        println!("{dtype}: prefill B={b} T={t}: {:.2} ms", prefill(s, &model, b, t, 10));
    }
    if dtype == "bf16" && !decode_only {
        let t = 1000.min(ctx);
        let [logits, token] = time_to_first_token(s, &model, t, 9);
        println!(
            "{dtype}: time to first token, {t}-token prompt: {logits:.2} ms to the logits on the host, \
             {token:.2} ms to the greedy token (picked on the GPU)"
        );
    }
    let mut launched: Gpt<Stream, T> = Gpt::load(s, checkpoint).unwrap();
    launched.use_cuda_graphs(false);
    for batch in [1, 16] {
        let (rate, tokens) = decode(s, &model, batch);
        let (launched_rate, launched_tokens) = decode(s, &launched, batch);
        println!(
            "{dtype}: decode batch {batch}: {rate:.1} tokens/s (steps replayed from a CUDA graph); \
             {launched_rate:.1} tokens/s (launched kernel by kernel)"
        );
        assert_eq!(
            tokens, launched_tokens,
            "replayed and launched steps pick the same tokens"
        );
        if batch == 1 {
            println!("{dtype}: greedy tokens {:?}", &tokens[..16]);
        }
        let [host, step] = host_time(s, &model, batch);
        println!(
            "{dtype}: decode batch {batch}: the host's part of a step {host:.1} µs (queue_decode), \
             of {step:.1} µs a step"
        );
        if dtype == "bf16" && !decode_only {
            let plain = Sampling {
                temperature: 0.8,
                seed: 1,
                ..Sampling::GREEDY
            };
            let top_k = Sampling {
                top_k: Some(50),
                ..plain
            };
            let top_p = Sampling {
                top_p: Some(0.95),
                ..top_k
            };
            let (plain, _) = decode_with(s, &model, batch, plain);
            let (top_k, _) = decode_with(s, &model, batch, top_k);
            let (top_p, _) = decode_with(s, &model, batch, top_p);
            println!(
                "{dtype}: decode batch {batch}, sampled on the GPU at temperature 0.8: {plain:.1} tokens/s; \
                 {top_k:.1} with top-k 50; {top_p:.1} with top-k 50 and top-p 0.95"
            );
        }
    }
}

fn main() {
    let Some(dir) = std::env::args().skip(1).find(|a| !a.starts_with("--")) else {
        eprintln!("usage: cargo bench --bench gpt2 -- DIR (a GPT-2 checkpoint; see benches/gpt2_transformers.py)");
        return;
    };
    let Some(s) = gpu_stream("gpt2") else { return };
    let checkpoint = Checkpoint::from_dir(Path::new(&dir)).unwrap();
    let decode_only = std::env::args().any(|a| a == "--decode-only");
    report::<bf16>(&s, &checkpoint, "bf16", decode_only);
    report::<f32>(&s, &checkpoint, "f32", decode_only);
}
