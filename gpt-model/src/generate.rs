//! Generation: prefill a batch of prompts, then decode a token per sequence
//! per step until each sequence stops, streaming tokens as they come.

use crate::config::Config;
use crate::kv_cache::{Feed, KvCache};
use crate::model::{Float, Gpt};
use crate::sample::{Sampler, Sampling};
use crate::{GptError, Result};
use std::time::{Duration, Instant};
use tile::Backend;
use tile_kernels::argmax::Draw;

/// What to generate.
#[derive(Clone, Debug)]
pub struct Request {
    /// One prompt per sequence, as tokens, each non-empty.
    pub prompts: Vec<Vec<u32>>,
    /// Tokens to generate per sequence, at most.
    pub max_new_tokens: usize,
    /// How each next token is picked.
    pub sampling: Sampling,
    /// The token that ends a sequence (GPT-2's end of text), if any.
    pub stop: Option<u32>,
}

impl Request {
    /// Whether a model of `config` can run the request: at least one
    /// prompt, each of 1 to `n_positions` tokens within the vocabulary, and
    /// valid sampling parameters.
    pub fn check(&self, config: &Config) -> Result<()> {
        self.sampling.validate()?;
        if self.prompts.is_empty() {
            return Err(GptError::Prompt("no prompt given".into()));
        }
        for (i, p) in self.prompts.iter().enumerate() {
            if p.is_empty() || p.len() > config.n_positions {
                return Err(GptError::Prompt(format!(
                    "prompt {} has {} tokens: the model takes 1 to {}",
                    i + 1,
                    p.len(),
                    config.n_positions
                )));
            }
            if let Some(t) = p.iter().find(|&&t| t as usize >= config.vocab_size) {
                return Err(GptError::Prompt(format!(
                    "prompt {} holds token id {t}, outside the model's vocabulary of {}",
                    i + 1,
                    config.vocab_size
                )));
            }
        }
        Ok(())
    }
}

/// Why a sequence stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// It generated `max_new_tokens`.
    Length,
    /// It generated the stop token (which is not part of its output).
    EndOfText,
    /// It filled the model's context.
    ContextFull,
    /// The token callback asked to stop.
    Caller,
}

/// The outcome of a request.
#[derive(Clone, Debug)]
pub struct Output {
    /// Each sequence's generated tokens.
    pub tokens: Vec<Vec<u32>>,
    /// Why each sequence stopped.
    pub stops: Vec<Stop>,
    /// Prompt tokens, all sequences together.
    pub prompt_tokens: usize,
    /// From the request to the first generated token.
    pub time_to_first_token: Duration,
    /// The prefill pass, sampling its tokens included.
    pub prefill: Duration,
    /// From the first generated token to the last: the decode steps, each
    /// with its pick (sampling) and the token callbacks.
    pub decode: Duration,
    /// Tokens the decode steps generated, all sequences together.
    pub decode_tokens: usize,
}

/// Runs `request` on `model`, calling `on_token(sequence, token)` for each
/// generated token as soon as it is picked; returning `false` from it stops
/// generation (a closed output, say).
pub fn generate<B: Backend, T: Float>(
    on: &B,
    model: &Gpt<B, T>,
    request: &Request,
    on_token: impl FnMut(usize, u32) -> bool,
) -> Result<Output> {
    run(&(on, model), request, on_token)
}

/// What generation drives: a model on one backend, or one split over
/// ranks ([`TensorParallel`](crate::TensorParallel)).
pub(crate) trait Decoder {
    /// Its KV cache.
    type Cache;
    fn config(&self) -> &Config;
    fn cache(&self, batch: usize, capacity: usize) -> Result<Self::Cache>;
    fn prefill<'c>(&self, cache: &'c mut Self::Cache, prompts: &[Vec<u32>]) -> Result<&'c [f32]>;
    /// The prefill, then each prompt's next token as `decode_greedy` picks.
    fn prefill_greedy(&self, cache: &mut Self::Cache, prompts: &[Vec<u32>]) -> Result<Vec<(f32, u32)>>;
    /// The prefill, then each prompt's next token as `decode_sampled` draws.
    fn prefill_sampled(
        &self,
        cache: &mut Self::Cache,
        prompts: &[Vec<u32>],
        sample: (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>>;
    fn decode<'c>(&self, cache: &'c mut Self::Cache, tokens: &[Option<u32>]) -> Result<&'c [f32]>;
    /// Queues a decode step on `feed`'s tokens that picks each sequence's
    /// next token on the backend: greedily, or drawn as `sample` says.
    fn queue(&self, cache: &mut Self::Cache, feed: Feed, sample: Option<(Draw, &[u32])>) -> Result<()>;
    /// The tokens of the oldest queued step not yet returned (waits for them).
    fn next_picks(&self, cache: &mut Self::Cache) -> Result<Vec<u32>>;

    fn lengths(cache: &Self::Cache) -> &[usize];
}

impl<B: Backend, T: Float> Decoder for (&B, &Gpt<B, T>) {
    type Cache = KvCache<B, T>;

    fn config(&self) -> &Config {
        &self.1.config
    }
    fn cache(&self, batch: usize, capacity: usize) -> Result<KvCache<B, T>> {
        self.1.cache(self.0, batch, capacity)
    }
    fn prefill<'c>(&self, cache: &'c mut KvCache<B, T>, prompts: &[Vec<u32>]) -> Result<&'c [f32]> {
        self.1.prefill(self.0, cache, prompts)
    }
    fn prefill_greedy(&self, cache: &mut KvCache<B, T>, prompts: &[Vec<u32>]) -> Result<Vec<(f32, u32)>> {
        self.1.prefill_greedy(self.0, cache, prompts)
    }
    fn prefill_sampled(
        &self,
        cache: &mut KvCache<B, T>,
        prompts: &[Vec<u32>],
        sample: (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>> {
        self.1.prefill_sampled(self.0, cache, prompts, sample)
    }
    fn decode<'c>(&self, cache: &'c mut KvCache<B, T>, tokens: &[Option<u32>]) -> Result<&'c [f32]> {
        self.1.decode(self.0, cache, tokens)
    }
    fn queue(&self, cache: &mut KvCache<B, T>, feed: Feed, sample: Option<(Draw, &[u32])>) -> Result<()> {
        self.1.queue_decode(self.0, cache, feed, sample)
    }
    fn next_picks(&self, cache: &mut KvCache<B, T>) -> Result<Vec<u32>> {
        self.1.next_picks(self.0, cache)
    }

    fn lengths(cache: &KvCache<B, T>) -> &[usize] {
        cache.lengths()
    }
}

/// The generation loop of [`generate`] and
/// [`TensorParallel::generate`](crate::TensorParallel::generate).
pub(crate) fn run<D: Decoder>(
    model: &D,
    request: &Request,
    mut on_token: impl FnMut(usize, u32) -> bool,
) -> Result<Output> {
    request.check(model.config())?;
    let sampling = request.sampling;
    let batch = request.prompts.len();
    let context = model.config().n_positions;
    let longest = request.prompts.iter().map(Vec::len).max().unwrap_or(0);
    let start = Instant::now();
    let capacity = (longest + request.max_new_tokens).min(context);
    let mut cache = model.cache(batch, capacity)?;
    let mut samplers: Vec<Sampler> = (0..batch).map(|_| Sampler::new(sampling)).collect();
    // Decode steps pick on the backend.
    let draw = sampling.draw();
    let mut out = Output {
        tokens: vec![Vec::new(); batch],
        stops: vec![Stop::Length; batch],
        prompt_tokens: request.prompts.iter().map(Vec::len).sum(),
        time_to_first_token: Duration::ZERO,
        prefill: Duration::ZERO,
        decode: Duration::ZERO,
        decode_tokens: 0,
    };
    if request.max_new_tokens == 0 {
        return Ok(out);
    }
    let mut running: Vec<bool> = vec![true; batch];
    let vocab = model.config().vocab_size;
    // The first tokens are picked where the later ones are: on the
    // backend, unless the draw needs the host.
    let mut picked: Vec<u32> = if sampling.is_greedy() {
        let picks = model.prefill_greedy(&mut cache, &request.prompts)?;
        picks.into_iter().map(|(_, t)| t).collect()
    } else if let Some(draw) = draw {
        let keys: Vec<u32> = samplers.iter_mut().map(Sampler::key).collect();
        let picks = model.prefill_sampled(&mut cache, &request.prompts, (draw, &keys))?;
        picks.into_iter().map(|(_, t)| t).collect()
    } else {
        let prefilled = model.prefill(&mut cache, &request.prompts)?;
        (0..batch)
            .map(|s| samplers[s].pick(&prefilled[s * vocab..(s + 1) * vocab]))
            .collect()
    };
    // Decoding starts once the prompts' tokens are out: its time counts
    // every later step with its pick.
    let mut decode_start = None;
    let mut next: Vec<Option<u32>> = vec![None; batch];
    // Steps queued whose tokens the host has not read. Where the backend
    // picks, it feeds a step the last one's picks itself: the next step is
    // queued before the host reads the last one's tokens, and runs meanwhile.
    let mut queued = 0;
    let on_backend = sampling.is_greedy() || draw.is_some();
    let prompt_lens: Vec<usize> = request.prompts.iter().map(Vec::len).collect();
    loop {
        for s in 0..batch {
            if !running[s] {
                continue;
            }
            let token = picked[s];
            next[s] = Some(token);
            if Some(token) == request.stop {
                running[s] = false;
                out.stops[s] = Stop::EndOfText;
                continue;
            }
            out.tokens[s].push(token);
            if decode_start.is_some() {
                out.decode_tokens += 1;
            }
            if !on_token(s, token) {
                running.iter_mut().for_each(|r| *r = false);
                out.stops.iter_mut().for_each(|r| *r = Stop::Caller);
                break;
            }
            if out.tokens[s].len() == request.max_new_tokens {
                running[s] = false;
                out.stops[s] = Stop::Length;
            } else if prompt_lens[s] + out.tokens[s].len() > capacity {
                // Its next token would go past the cache's last position
                // (the cache holds the prompt and every token but this one).
                running[s] = false;
                out.stops[s] = Stop::ContextFull;
            }
        }
        let since = *decode_start.get_or_insert_with(|| {
            out.prefill = start.elapsed();
            out.time_to_first_token = out.prefill;
            Instant::now()
        });
        if !running.contains(&true) {
            break;
        }
        for (n, &r) in next.iter_mut().zip(&running) {
            if !r {
                *n = None;
            }
        }
        if on_backend {
            if queued == 0 {
                queue(model, &mut cache, Feed::Tokens(&next), draw, (&mut samplers, &running))?;
                queued += 1;
            }
            // One more, fed the queued step's picks, while a sequence wants
            // more tokens than the queued steps bring and each has room.
            let wants_more = (0..batch).any(|s| running[s] && out.tokens[s].len() + queued < request.max_new_tokens);
            let room = (0..batch).all(|s| !running[s] || D::lengths(&cache)[s] < capacity);
            if on_backend && wants_more && room {
                queue(
                    model,
                    &mut cache,
                    Feed::Picks(&running),
                    draw,
                    (&mut samplers, &running),
                )?;
                queued += 1;
            }
            picked = model.next_picks(&mut cache)?;
            queued -= 1;
        } else {
            let logits = model.decode(&mut cache, &next)?;
            for (s, sampler) in samplers.iter_mut().enumerate() {
                if running[s] {
                    picked[s] = sampler.pick(&logits[s * vocab..(s + 1) * vocab]);
                }
            }
        }
        out.decode = since.elapsed();
    }
    // A step queued ahead for sequences that then stopped: its tokens are
    // not needed, but it must end before the cache goes.
    for _ in 0..queued {
        model.next_picks(&mut cache)?;
    }
    Ok(out)
}

/// Queues a decode step on `feed` that picks on the backend (drawn as
/// `draw` says, each running sequence with its sampler's next key;
/// greedily without a draw).
fn queue<D: Decoder>(
    model: &D,
    cache: &mut D::Cache,
    feed: Feed,
    draw: Option<Draw>,
    (samplers, running): (&mut [Sampler], &[bool]),
) -> Result<()> {
    let keys: Option<Vec<u32>> = draw.map(|_| {
        (samplers.iter_mut().zip(running))
            .map(|(s, &r)| if r { s.key() } else { 0 })
            .collect()
    });
    model.queue(cache, feed, draw.zip(keys.as_deref()))
}
