//! A GPT-2 split over GPUs (tensor parallelism through NCCL) against one
//! GPU, on a checkpoint in the Hugging Face layout, bf16. Run on a machine
//! with 2 GPUs or more:
//!
//! ```text
//! python3 benches/gpt2_transformers.py DIR --shape xl --write-only   # gpt2-xl-shaped, random weights
//! cargo bench --bench tensor_parallel -- DIR                         # or the built binary there
//! ```
//!
//! For 1, 2, 4 and 8 GPUs, as many as the machine has: decode tokens per
//! second at batch 1 and 16 (a 16-token prompt, 256 new tokens, greedy,
//! after a run that tunes the kernels), and a prefill of 4 × 1,024 tokens
//! (median wall-clock ms, ending with the logits on the host). With
//! several GPUs, the all-reduces' share of a decode step: the same
//! all-reduces (two per layer, `[batch, n_embd]`) timed alone, replayed
//! from a CUDA graph as a step replays them, over the step's time; and
//! the same launched one by one from the host.

#[allow(dead_code)] // the helpers this bench does not use
mod common;

use common::{median_wall_ms, prompts};
use gpt_model::{Checkpoint, Collective, Request, Sampling, TensorParallel};
use std::path::Path;
use std::time::Instant;
use tile::{Device, Graph, Stream, bf16};

const NEW_TOKENS: usize = 256;

/// Decode tokens per second at `batch`, and the tokens of the first sequence.
fn decode(model: &TensorParallel<Stream, bf16>, batch: usize) -> (f64, Vec<u32>) {
    let request = Request {
        prompts: vec![(0..16).map(|i| 464 + 37 * i).collect(); batch],
        max_new_tokens: NEW_TOKENS,
        sampling: Sampling::GREEDY,
        stop: None,
    };
    model.generate(&request, |_, _| true).unwrap();
    let out = model.generate(&request, |_, _| true).unwrap();
    (
        out.decode_tokens as f64 / out.decode.as_secs_f64(),
        out.tokens[0].clone(),
    )
}

/// Median wall-clock ms of prefilling `batch` prompts of `len` tokens.
fn prefill(model: &TensorParallel<Stream, bf16>, batch: usize, len: usize) -> f64 {
    let prompts = prompts(batch, len, model.config().vocab_size);
    let mut cache = model.cache(batch, len).unwrap();
    median_wall_ms(5, || {
        model.prefill(&mut cache, &prompts).unwrap();
    })
}

/// `f` on each of `items` (one per rank) at once, a thread each, as a
/// decode step runs its ranks; the results in rank order.
fn on_every_rank<I: Send, R: Send>(items: impl IntoIterator<Item = I>, f: impl Fn(I) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let running: Vec<_> = items.into_iter().map(|i| s.spawn(move || f(i))).collect();
        running.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// Milliseconds of `count` all-reduces of `[batch, width]` across `ranks`,
/// each rank on its own thread, as a decode step issues them: replayed
/// from a CUDA graph of the `count` (as a step replays them; the mean of
/// `REPLAYS`), and launched one by one from the host.
fn all_reduces(ranks: &[Stream], batch: usize, width: usize, count: usize) -> (f64, f64) {
    const REPLAYS: usize = 20;
    let joined = <Stream as Collective<bf16>>::join(ranks).unwrap();
    let mut xs: Vec<_> = ranks
        .iter()
        .map(|on| on.zeros::<bf16>(&[batch, width]).unwrap())
        .collect();
    let mut launch = || {
        on_every_rank(ranks.iter().zip(&joined).zip(&mut xs), |((on, all_reduce), x)| {
            for _ in 0..count {
                all_reduce.sum(on, x).unwrap();
            }
            on.synchronize().unwrap();
        })
    };
    // The first launches also connect NCCL's ranks, which a capture can't.
    launch();
    let t = Instant::now();
    launch();
    let launched = t.elapsed().as_secs_f64() * 1e3;
    let graphs: Vec<Graph> = on_every_rank(ranks.iter().zip(&joined).zip(&mut xs), |((on, all_reduce), x)| {
        on.capture(|| (0..count).try_for_each(|_| all_reduce.sum(on, x)))
            .unwrap()
    });
    let replay = |times: usize| {
        on_every_rank(ranks.iter().zip(&graphs), |(on, graph)| {
            for _ in 0..times {
                on.replay(graph).unwrap();
            }
            on.synchronize().unwrap();
        })
    };
    replay(2);
    let t = Instant::now();
    replay(REPLAYS);
    (t.elapsed().as_secs_f64() * 1e3 / REPLAYS as f64, launched)
}

fn main() {
    let Some(dir) = std::env::args().skip(1).find(|a| !a.starts_with("--")) else {
        eprintln!("usage: cargo bench --bench tensor_parallel -- DIR (see benches/gpt2_transformers.py --shape xl)");
        return;
    };
    let gpus = match tile::device_count() {
        Ok(n) if n >= 2 => n,
        found => {
            let why = format!("needs 2 GPUs, found {found:?}");
            if std::env::var_os("TILE_REQUIRE_GPU").is_some_and(|v| v == "1") {
                panic!("tensor_parallel: {why}");
            }
            eprintln!("tensor_parallel: skipped ({why})");
            return;
        }
    };
    let devices: Vec<_> = (0..gpus).map(|i| Device::new(i).unwrap()).collect();
    let checkpoint = Checkpoint::from_dir(Path::new(&dir)).unwrap();
    let cfg = checkpoint.config;
    println!(
        "{} × {gpus}; {} layers, {} heads, {} channels, bf16",
        devices[0].name(),
        cfg.n_layer,
        cfg.n_head,
        cfg.n_embd
    );
    let mut first_tokens = Vec::new();
    for n in [1, 2, 4, 8].into_iter().filter(|&n| n <= gpus) {
        let ranks: Vec<Stream> = devices[..n].iter().map(|d| d.stream()).collect();
        let loading = Instant::now();
        let model: TensorParallel<Stream, bf16> = TensorParallel::load(ranks.clone(), &checkpoint).unwrap();
        println!("{n} GPU: load {:.2} s", loading.elapsed().as_secs_f64());
        println!(
            "{n} GPU: prefill 4 × 1024: {:.2} ms",
            prefill(&model, 4, 1024.min(cfg.n_positions))
        );
        for batch in [1, 16] {
            let (rate, tokens) = decode(&model, batch);
            println!(
                "{n} GPU: decode batch {batch}: {rate:.1} tokens/s ({:.3} ms a step)",
                1e3 * batch as f64 / rate
            );
            if n > 1 {
                let (replayed, launched) = all_reduces(&ranks, batch, cfg.n_embd, 2 * cfg.n_layer);
                println!(
                    "{n} GPU: batch {batch}: {} all-reduces of [{batch}, {}] alone: {replayed:.3} ms from a CUDA graph, {:.0}% of a step; {launched:.3} ms launched one by one from the host",
                    2 * cfg.n_layer,
                    cfg.n_embd,
                    100.0 * replayed * rate / (1e3 * batch as f64)
                );
            }
            if batch == 1 {
                first_tokens.push(tokens[..16].to_vec());
            }
        }
    }
    println!("greedy tokens (batch 1) per GPU count: {first_tokens:?}");
}
