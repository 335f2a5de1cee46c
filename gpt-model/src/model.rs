//! The GPT-2 forward pass, one function per layer (as in llm.c's
//! `train_gpt2.cu`), each a few kernel launches from `tile-kernels` on a
//! [`tile::Backend`]: a GPU stream or `tile::Cpu`.
//!
//! Three passes share the layers: [`Gpt::forward`] (every position's
//! logits, no cache), [`Gpt::prefill`] (a batch of prompts, writing their
//! keys and values into a [`KvCache`]) and [`Gpt::decode`] (one token per
//! sequence, attending to the cache; [`Gpt::decode_greedy`] and
//! [`Gpt::decode_sampled`] end the step with each sequence's token, picked
//! on the backend).
//!
//! A model may be one rank's [`Shard`] of a model split over several
//! ([`TensorParallel`](crate::TensorParallel)): then its attention runs its
//! heads only, its MLP its hidden units only, the row-parallel linears end
//! with an all-reduce, and its logits are its slice of the vocabulary. The
//! whole model is the one shard of one rank, on the same code path.

use crate::activations::Activations;
use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::kv_cache::{Feed, KvCache, Pick};
use crate::shard::{AllReduce, Shard};
use crate::{GptError, Result};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use tile::{Backend, DType, Element, HostTensor, TensorView};
use tile_kernels::argmax::Draw;
use tile_kernels::gemv::NormFold;
use tile_kernels::{argmax, attention, decode, embedding, gemv, linear, matmul, norm};

/// The element types a model runs in: f32 (tensor-core products in tf32),
/// bf16 and f16.
pub trait Float: Element + num_traits::Float {}
impl<T: Element + num_traits::Float> Float for T {}

/// A weight and its bias.
type Affine<X> = (X, X);

/// One transformer block's parameters, named as GPT-2's checkpoints name
/// them; projections stored `[out, in]`.
struct Block<X> {
    ln_1: Affine<X>,
    c_attn: Affine<X>,
    attn_proj: Affine<X>,
    ln_2: Affine<X>,
    c_fc: Affine<X>,
    mlp_proj: Affine<X>,
}

impl<X> Block<X> {
    /// Every parameter through `f`, in order.
    fn map<Y>(self, mut f: impl FnMut(X) -> Result<Y>) -> Result<Block<Y>> {
        let mut pair = |(w, b): Affine<X>| -> Result<Affine<Y>> { Ok((f(w)?, f(b)?)) };
        Ok(Block {
            ln_1: pair(self.ln_1)?,
            c_attn: pair(self.c_attn)?,
            attn_proj: pair(self.attn_proj)?,
            ln_2: pair(self.ln_2)?,
            c_fc: pair(self.c_fc)?,
            mlp_proj: pair(self.mlp_proj)?,
        })
    }
}

/// A block's LayerNorms folded into the linears after them
/// ([`NormFold`], for [`gemv::gemv_layer_norm`]): `ln_1` into the QKV
/// projection, `ln_2` into the MLP's first linear.
struct Folds<B: Backend> {
    ln_1: NormFold<B>,
    ln_2: NormFold<B>,
}

impl<B: Backend> Folds<B> {
    fn new<T: Float>(on: &B, p: &Block<B::Tensor<T>>) -> Result<Self> {
        let fold = |(ln_w, ln_b): &Affine<B::Tensor<T>>, (w, b): &Affine<B::Tensor<T>>| {
            NormFold::new(on, (ln_w, ln_b), (w, b))
        };
        Ok(Folds {
            ln_1: fold(&p.ln_1, &p.c_attn)?,
            ln_2: fold(&p.ln_2, &p.c_fc)?,
        })
    }
}

/// A GPT-2 model whose parameters live on backend `B` in element type `T`
/// (or one rank's shard of it).
pub struct Gpt<B: Backend, T: Float> {
    /// The model's shape.
    pub config: Config,
    shard: Shard,
    /// How this rank adds its partial sums to the others' (none alone).
    all_reduce: Option<Box<dyn AllReduce<B, T>>>,
    wte: B::Tensor<T>,
    wpe: B::Tensor<T>,
    blocks: Vec<Block<B::Tensor<T>>>,
    /// Each block's LayerNorms folded into the linears after them.
    folds: Vec<Folds<B>>,
    ln_f: Affine<B::Tensor<T>>,
    /// `ln_f` folded into the LM head.
    head_fold: NormFold<B>,
    /// The LM head is `wte` (tied), or this rank's rows of it.
    head: Option<B::Tensor<T>>,
    /// The LM head has no bias of its own.
    zero_bias: B::Tensor<T>,
    /// Whether an f32 model multiplies through tf32 on the tensor cores.
    tf32: bool,
    /// Whether decode steps are recorded once and replayed (CUDA graphs).
    graphs: bool,
    /// This model's identity, which a recorded step is keyed with.
    id: u64,
}

/// Identities of the models loaded so far ([`Gpt::decode`]'s recorded
/// steps are the model's own).
static MODELS: AtomicU64 = AtomicU64::new(0);

/// A tensor downloaded as f32.
fn download<B: Backend, T: Float>(on: &B, t: &B::Tensor<T>) -> Result<Vec<f32>> {
    Ok(on
        .download(t)?
        .to_vec()
        .into_iter()
        .map(|v| v.to_f32().unwrap_or(f32::NAN))
        .collect())
}

/// The cache's logits as f32, through its landing.
fn cache_logits<'c, B: Backend, T: Float>(on: &B, cache: &'c mut KvCache<B, T>) -> Result<&'c [f32]> {
    on.download_later(&cache.logits, &mut cache.logits_landing)?;
    let landed = on.landed(&cache.logits_landing)?;
    for (to, from) in cache.logits_host.iter_mut().zip(landed) {
        *to = from.to_f32().unwrap_or(f32::NAN);
    }
    Ok(&cache.logits_host)
}

/// How the attention of one pass reads its keys and values.
enum Attend<'c, B: Backend, T: Float> {
    /// Causal attention within the pass's tokens (`forward`).
    Within,
    /// Causal attention within the tokens, whose keys and values are also
    /// written to the cache from position 0 (`prefill`).
    WithinAndCache(&'c mut KvCache<B, T>),
    /// One token per sequence attending to the cache (`decode`).
    Cache(&'c mut KvCache<B, T>),
}

impl<B: Backend, T: Float> Gpt<B, T> {
    /// Uploads the parameters, checking every tensor's shape.
    pub fn load(on: &B, checkpoint: &Checkpoint) -> Result<Gpt<B, T>> {
        Gpt::load_shard(on, checkpoint, Shard::whole(&checkpoint.config), None)
    }

    /// Uploads `shard`'s parameters: its heads' rows of the QKV projection
    /// and columns of the output projection, its hidden units' rows of the
    /// MLP's first linear and columns of its second, its vocabulary rows
    /// of the LM head. The row-parallel linears' biases are added once, by
    /// rank 0.
    pub(crate) fn load_shard(
        on: &B,
        checkpoint: &Checkpoint,
        shard: Shard,
        all_reduce: Option<Box<dyn AllReduce<B, T>>>,
    ) -> Result<Gpt<B, T>> {
        let cfg = checkpoint.config;
        let c = cfg.n_embd;
        let hd = cfg.head_size();
        // Layers are read and converted on the host on every core, a wave
        // of layers at a time, then uploaded in order.
        let host = |values: Vec<f32>, shape: &[usize]| -> Result<HostTensor<T>> {
            let values: Vec<T> = values.into_iter().map(|v| T::from(v).unwrap_or_else(T::nan)).collect();
            Ok(HostTensor::from_vec(values, shape)?)
        };
        let upload =
            |values: Vec<f32>, shape: &[usize]| -> Result<B::Tensor<T>> { Ok(on.upload(&host(values, shape)?)?) };
        let vector = |name: &str, n: usize| checkpoint.tensor(name, &[n]);
        let norm = |prefix: &str| -> Result<Affine<HostTensor<T>>> {
            Ok((
                host(vector(&format!("{prefix}.weight"), c)?, &[c])?,
                host(vector(&format!("{prefix}.bias"), c)?, &[c])?,
            ))
        };
        // Column-parallel: the output rows in `parts` (ranges of rows), and
        // their biases.
        let column_parallel = |prefix: &str, out: usize, parts: &[Range<usize>]| -> Result<Affine<HostTensor<T>>> {
            let w = checkpoint.conv1d(&format!("{prefix}.weight"), c, out)?;
            let b = vector(&format!("{prefix}.bias"), out)?;
            let rows: usize = parts.iter().map(|p| p.len()).sum();
            let w: Vec<f32> = parts.iter().flat_map(|p| &w[p.start * c..p.end * c]).copied().collect();
            let b: Vec<f32> = parts.iter().flat_map(|p| &b[p.clone()]).copied().collect();
            Ok((host(w, &[rows, c])?, host(b, &[rows])?))
        };
        // Row-parallel: the input columns `cols`; the bias on rank 0 only.
        let row_parallel = |prefix: &str, inp: usize, cols: Range<usize>| -> Result<Affine<HostTensor<T>>> {
            let w = checkpoint.conv1d(&format!("{prefix}.weight"), inp, c)?;
            let b = vector(&format!("{prefix}.bias"), c)?;
            let w: Vec<f32> = w
                .chunks_exact(inp)
                .flat_map(|row| &row[cols.clone()])
                .copied()
                .collect();
            let b = if shard.rank == 0 { b } else { vec![0.0; c] };
            Ok((host(w, &[c, cols.len()])?, host(b, &[c])?))
        };
        let heads = shard.heads.start * hd..shard.heads.end * hd;
        let qkv: Vec<Range<usize>> = (0..3).map(|i| i * c + heads.start..i * c + heads.end).collect();
        let layer = |l: usize| -> Result<Block<HostTensor<T>>> {
            let p = |n: &str| format!("h.{l}.{n}");
            Ok(Block {
                ln_1: norm(&p("ln_1"))?,
                c_attn: column_parallel(&p("attn.c_attn"), 3 * c, &qkv)?,
                attn_proj: row_parallel(&p("attn.c_proj"), c, heads.clone())?,
                ln_2: norm(&p("ln_2"))?,
                c_fc: column_parallel(&p("mlp.c_fc"), 4 * c, std::slice::from_ref(&shard.hidden))?,
                mlp_proj: row_parallel(&p("mlp.c_proj"), 4 * c, shard.hidden.clone())?,
            })
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let layers: Vec<usize> = (0..cfg.n_layer).collect();
        let mut blocks = Vec::with_capacity(cfg.n_layer);
        for wave in layers.chunks(cores) {
            let read: Vec<Result<Block<HostTensor<T>>>> = std::thread::scope(|s| {
                let running: Vec<_> = wave.iter().map(|&l| s.spawn(move || layer(l))).collect();
                (running.into_iter())
                    .map(|r| r.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                    .collect()
            });
            for block in read {
                blocks.push(block?.map(|t| Ok(on.upload(&t)?))?);
            }
        }
        let wte = checkpoint.tensor("wte.weight", &[cfg.vocab_size, c])?;
        let head = if shard.vocab.len() == cfg.vocab_size {
            None
        } else {
            let rows = &wte[shard.vocab.start * c..shard.vocab.end * c];
            Some(upload(rows.to_vec(), &[shard.vocab.len(), c])?)
        };
        let wte = upload(wte, &[cfg.vocab_size, c])?;
        let ln_f = {
            let (w, b) = norm("ln_f")?;
            (on.upload(&w)?, on.upload(&b)?)
        };
        let zero_bias = on.zeros(&[shard.vocab.len()])?;
        let folds = blocks.iter().map(|p| Folds::new(on, p)).collect::<Result<_>>()?;
        let head_fold = NormFold::new(on, (&ln_f.0, &ln_f.1), (head.as_ref().unwrap_or(&wte), &zero_bias))?;
        Ok(Gpt {
            config: cfg,
            wte,
            wpe: upload(
                checkpoint.tensor("wpe.weight", &[cfg.n_positions, c])?,
                &[cfg.n_positions, c],
            )?,
            blocks,
            folds,
            ln_f,
            head_fold,
            head,
            zero_bias,
            shard,
            all_reduce,
            tf32: true,
            graphs: true,
            id: MODELS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Whether decode steps on a GPU are recorded once per cache as a CUDA
    /// graph and replayed (the default: a step is then one launch for the
    /// host), or launched kernel by kernel. The CPU runs them as they
    /// come either way.
    pub fn use_cuda_graphs(&mut self, on: bool) {
        self.graphs = on;
    }

    /// Whether an f32 model multiplies through tf32 on the tensor cores
    /// (the default, as PyTorch's `torch.backends.cuda.matmul.allow_tf32`),
    /// or, with `false`, in IEEE f32 on the CUDA cores: the linear layers
    /// and the prefill's attention then round as `transformers` does in
    /// f32, several times slower. bf16 and f16 models are not affected.
    pub fn allow_tf32(&mut self, allow: bool) {
        self.tf32 = allow;
    }

    /// Whether the products run in IEEE f32 ([`Gpt::allow_tf32`]).
    fn ieee(&self) -> bool {
        !self.tf32 && T::DTYPE == DType::F32
    }

    /// Whether a linear layer on `x` multiplies in IEEE f32 on the CUDA
    /// cores ([`Gpt::allow_tf32`]), and with which kernels: on a GPU,
    /// [`gemv`]'s for a few rows, [`linear`]'s otherwise. (On the CPU,
    /// where both are exact, [`linear`]'s larger tiles run faster.)
    fn ieee_linear(&self, on: &B, x: &B::Tensor<T>) -> Option<bool> {
        self.ieee()
            .then(|| on.stream().is_some() && x.shape()[0] <= gemv::MAX_ROWS)
    }

    /// `y = x @ w^T + b`, then GELU where `gelu`.
    fn linear(
        &self,
        on: &B,
        x: &B::Tensor<T>,
        (w, b): (&B::Tensor<T>, &B::Tensor<T>),
        y: &mut B::Tensor<T>,
        gelu: bool,
    ) -> Result<()> {
        match self.ieee_linear(on, x) {
            Some(true) => {
                gemv::run(on, (x, w, b), y, gelu)?;
            }
            Some(false) => linear::run(on, x, w, b, y, gelu)?,
            None => {
                matmul::run_linear(on, x, w, b, y, gelu)?;
            }
        }
        Ok(())
    }

    /// `y = residual + x @ w^T + b`.
    fn linear_residual(
        &self,
        on: &B,
        x: &B::Tensor<T>,
        (w, b): &Affine<B::Tensor<T>>,
        residual: &B::Tensor<T>,
        y: &mut B::Tensor<T>,
    ) -> Result<()> {
        match self.ieee_linear(on, x) {
            Some(true) => {
                gemv::run_residual(on, (x, w, b), residual, y)?;
            }
            Some(false) => linear::run_residual(on, (x, w, b), residual, y)?,
            None => {
                matmul::run_linear_residual(on, (x, w, b), residual, y)?;
            }
        }
        Ok(())
    }

    /// Causal attention within the pass's tokens.
    fn causal_attention(&self, on: &B, qkv: &B::Tensor<T>, out: &mut B::Tensor<T>, heads: usize) -> Result<()> {
        if self.ieee() {
            attention::run_ieee(on, qkv, out, heads)?;
        } else {
            attention::run(on, qkv, out, heads)?;
        }
        Ok(())
    }

    /// The part of the model this one holds.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// A cache for `batch` sequences of up to `capacity` tokens each (at
    /// most the model's context).
    pub fn cache(&self, on: &B, batch: usize, capacity: usize) -> Result<KvCache<B, T>> {
        let shard = (self.shard.heads.len(), self.shard.vocab.len());
        let acts = self.activations(on, batch)?;
        KvCache::new(on, &self.config, shard, (batch, capacity), acts)
    }

    /// Activations for a pass over `rows` token rows.
    fn activations(&self, on: &B, rows: usize) -> Result<Activations<B, T>> {
        let c = self.shard.heads.len() * self.config.head_size();
        Activations::new(on, rows, (self.config.n_embd, c, self.shard.hidden.len()))
    }

    /// Logits for every position of `tokens` (1 to `n_positions` of them),
    /// row-major `[tokens.len(), vocab_size]` (a shard's: its vocabulary
    /// columns); nothing is cached.
    pub fn forward(&self, on: &B, tokens: &[u32]) -> Result<Vec<f32>> {
        self.check_tokens(tokens)?;
        let t = tokens.len();
        let mut acts = self.activations(on, t)?;
        self.embed(on, tokens, &(0..t as i32).collect::<Vec<_>>(), &mut acts.x)?;
        self.layers(on, &mut acts, (1, t), Attend::Within)?;
        self.logits(on, &acts.x)
    }

    /// Runs a batch of prompts (one per cache sequence, of any lengths up to
    /// the cache's capacity), writes their keys and values into `cache`, and
    /// returns the logits of each prompt's last token, `[batch, vocab_size]`
    /// (held by the cache until its next pass).
    ///
    /// The prompts are padded on the right to the longest: causal attention
    /// never lets a prompt's tokens see the padding after them, and each
    /// sequence's decoding overwrites its padding in the cache.
    pub fn prefill<'c>(&self, on: &B, cache: &'c mut KvCache<B, T>, prompts: &[Vec<u32>]) -> Result<&'c [f32]> {
        let rows = self.prefill_rows(on, cache, prompts)?;
        self.lm_head(on, &rows, (&mut cache.logits, &mut on.zeros(rows.shape())?))?;
        cache_logits(on, cache)
    }

    /// [`Gpt::prefill`] for greedy decoding: each prompt's next token (its
    /// largest logit, the lowest id on a tie) picked on the backend, as
    /// [`Gpt::decode_greedy`] picks, so that the logits stay there.
    pub fn prefill_greedy(&self, on: &B, cache: &mut KvCache<B, T>, prompts: &[Vec<u32>]) -> Result<Vec<(f32, u32)>> {
        self.prefill_picked(on, cache, prompts, Pick::Greedy)
    }

    /// [`Gpt::prefill`] for sampling: each prompt's next token drawn on the
    /// backend with its key, as [`Gpt::decode_sampled`] draws.
    pub fn prefill_sampled(
        &self,
        on: &B,
        cache: &mut KvCache<B, T>,
        prompts: &[Vec<u32>],
        (draw, keys): (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>> {
        self.write_keys(on, cache, (draw, keys))?;
        self.prefill_picked(on, cache, prompts, Pick::Sample(draw))
    }

    /// The prefill, then each prompt's last logits into the cache's and
    /// the pick there.
    fn prefill_picked(
        &self,
        on: &B,
        cache: &mut KvCache<B, T>,
        prompts: &[Vec<u32>],
        pick: Pick,
    ) -> Result<Vec<(f32, u32)>> {
        let rows = self.prefill_rows(on, cache, prompts)?;
        self.lm_head(on, &rows, (&mut cache.logits, &mut on.zeros(rows.shape())?))?;
        self.pick(on, cache, pick)?;
        cache.picks_in_ids = self.all_reduce.is_none() || self.whole_row(cache, pick);
        self.picked(on, cache, pick)
    }

    /// [`Gpt::prefill`] up to each prompt's last row of activations, `[batch, C]`.
    fn prefill_rows(&self, on: &B, cache: &mut KvCache<B, T>, prompts: &[Vec<u32>]) -> Result<B::Tensor<T>> {
        if prompts.len() != cache.batch() {
            return Err(GptError::Prompt(format!(
                "{} prompts for a cache of {} sequences",
                prompts.len(),
                cache.batch()
            )));
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        if longest > cache.capacity() {
            return Err(GptError::Prompt(format!(
                "a prompt of {longest} tokens is longer than the cache's {} positions",
                cache.capacity()
            )));
        }
        let (b, t) = (prompts.len(), longest);
        let mut tokens = Vec::with_capacity(b * t);
        for p in prompts {
            self.check_tokens(p)?;
            tokens.extend(p.iter().copied().chain(std::iter::repeat_n(0, t - p.len())));
        }
        let positions: Vec<i32> = (0..b * t).map(|i| (i % t) as i32).collect();
        let mut acts = self.activations(on, b * t)?;
        self.embed(on, &tokens, &positions, &mut acts.x)?;
        cache.begin(on, &vec![0; b])?;
        self.layers(on, &mut acts, (b, t), Attend::WithinAndCache(cache))?;
        let last: Vec<i32> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i * t + p.len() - 1) as i32)
            .collect();
        let mut rows = on.zeros(&[b, self.config.n_embd])?;
        embedding::run_gather_rows(on, &on.upload_slice(&last, &[b])?, &acts.x, &mut rows)?;
        cache.set_lengths(prompts.iter().map(Vec::len));
        Ok(rows)
    }

    /// Runs one token per sequence of `cache`, each at its sequence's next
    /// position, appends their keys and values, and returns the logits,
    /// `[batch, vocab_size]` (held by the cache until its next pass). A
    /// finished sequence (`None`) keeps its slot in the batch without
    /// growing: its row of logits is meaningless.
    pub fn decode<'c>(&self, on: &B, cache: &'c mut KvCache<B, T>, tokens: &[Option<u32>]) -> Result<&'c [f32]> {
        self.step(on, cache, Feed::Tokens(tokens), Pick::Logits)?;
        cache_logits(on, cache)
    }

    /// [`Gpt::decode`] for greedy decoding: each sequence's largest logit
    /// and its token id (the lowest, on a tie), found on the backend, so
    /// that the step downloads one pair per sequence instead of its
    /// logits. On a rank of a split model, the largest of the whole
    /// vocabulary's row, which an all-reduce of the ranks' columns gives
    /// every rank: the ranks pick the same token.
    pub fn decode_greedy(&self, on: &B, cache: &mut KvCache<B, T>, tokens: &[Option<u32>]) -> Result<Vec<(f32, u32)>> {
        self.step(on, cache, Feed::Tokens(tokens), Pick::Greedy)?;
        self.picked(on, cache, Pick::Greedy)
    }

    /// [`Gpt::decode`] for sampling: each sequence's token drawn on the
    /// backend from the softmax of its logits over the draw's temperature,
    /// among the tokens its top-k and top-p keep, by the Gumbel-max trick
    /// with the sequence's `keys` (one per sequence; a key and the logits
    /// give one token), and its perturbed logit. On a rank of a split
    /// model, every rank draws from the whole vocabulary's row (an
    /// all-reduce joins the ranks' columns): the same token on every rank.
    pub fn decode_sampled(
        &self,
        on: &B,
        cache: &mut KvCache<B, T>,
        tokens: &[Option<u32>],
        (draw, keys): (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>> {
        self.write_keys(on, cache, (draw, keys))?;
        self.step(on, cache, Feed::Tokens(tokens), Pick::Sample(draw))?;
        self.picked(on, cache, Pick::Sample(draw))
    }

    /// Queues a decode step that picks each sequence's next token on the
    /// backend, greedily or drawn as `sample` says (as
    /// [`Gpt::decode_greedy`] and [`Gpt::decode_sampled`] pick), and
    /// returns without waiting for it; [`Gpt::next_picks`] returns the
    /// tokens. Fed [`Feed::Picks`], a step is queued before the host has
    /// read the picks it takes: the backend runs it while the host reads
    /// the step before (what [`generate()`](crate::generate()) does). At
    /// most two steps are queued at a time. The ranks of a split model
    /// pick the same tokens (each from the whole vocabulary's row), so
    /// each queues its steps alike.
    pub fn queue_decode(
        &self,
        on: &B,
        cache: &mut KvCache<B, T>,
        feed: Feed,
        sample: Option<(Draw, &[u32])>,
    ) -> Result<()> {
        if cache.queued == cache.landed.len() {
            return Err(GptError::Prompt(format!(
                "{} decode steps are queued: read the oldest's tokens (next_picks) first",
                cache.queued
            )));
        }
        let pick = match sample {
            Some(sample) => {
                self.write_keys(on, cache, sample)?;
                Pick::Sample(sample.0)
            }
            None => Pick::Greedy,
        };
        self.step(on, cache, feed, pick)?;
        let slot = (cache.first_queued + cache.queued) % cache.landed.len();
        on.download_later(&cache.ids, &mut cache.landed[slot])?;
        cache.queued += 1;
        Ok(())
    }

    /// The tokens of the oldest step [`Gpt::queue_decode`] queued whose
    /// tokens were not returned yet, one per sequence (waits for them).
    pub fn next_picks(&self, on: &B, cache: &mut KvCache<B, T>) -> Result<Vec<u32>> {
        if cache.queued == 0 {
            return Err(GptError::Prompt("no decode step is queued".into()));
        }
        let landed = on.landed(&cache.landed[cache.first_queued])?;
        let tokens = landed.iter().map(|&c| c as u32).collect();
        cache.first_queued = (cache.first_queued + 1) % cache.landed.len();
        cache.queued -= 1;
        Ok(tokens)
    }

    /// A draw's keys, one per sequence, into the cache, the draw checked.
    fn write_keys(&self, on: &B, cache: &mut KvCache<B, T>, (draw, keys): (Draw, &[u32])) -> Result<()> {
        if keys.len() != cache.batch() {
            return Err(GptError::Prompt(format!(
                "{} sampling keys for a cache of {} sequences",
                keys.len(),
                cache.batch()
            )));
        }
        draw.check().map_err(|e| GptError::Sampling(e.to_string()))?;
        on.write(&mut cache.keys, keys)?;
        Ok(())
    }

    /// The pick of a step that ended as `pick`, per sequence: (value,
    /// token id).
    fn picked(&self, on: &B, cache: &KvCache<B, T>, pick: Pick) -> Result<Vec<(f32, u32)>> {
        let best = on.download(&cache.best)?.to_vec();
        let columns = on.download(&cache.ids)?.to_vec();
        let first = if self.whole_row(cache, pick) {
            0
        } else {
            self.shard.vocab.start as u32
        };
        Ok(best
            .into_iter()
            .zip(columns)
            .map(|(v, c)| (v, first + c as u32))
            .collect())
    }

    /// A decode step (see [`Gpt::decode`]) on `feed`'s tokens, ending as
    /// `pick` says.
    fn step(&self, on: &B, cache: &mut KvCache<B, T>, feed: Feed, pick: Pick) -> Result<()> {
        let grows: Vec<bool> = match feed {
            Feed::Tokens(tokens) => tokens.iter().map(Option::is_some).collect(),
            Feed::Picks(running) => running.to_vec(),
        };
        if grows.len() != cache.batch() {
            return Err(GptError::Prompt(format!(
                "{} tokens for a cache of {} sequences",
                grows.len(),
                cache.batch()
            )));
        }
        let mut positions = Vec::with_capacity(grows.len());
        for (s, (&grows, &len)) in grows.iter().zip(cache.lengths()).enumerate() {
            match grows {
                true if len >= cache.capacity() => {
                    return Err(GptError::Prompt(format!(
                        "sequence {s} fills the cache's {} positions",
                        cache.capacity()
                    )));
                }
                true if len == 0 => {
                    return Err(GptError::Prompt(format!("sequence {s} has no prompt: prefill first")));
                }
                true => positions.push(len),
                false => positions.push(len.saturating_sub(1)),
            }
        }
        match feed {
            Feed::Tokens(tokens) => {
                let ids: Vec<u32> = tokens.iter().map(|t| t.unwrap_or(0)).collect();
                self.check_tokens(&ids)?;
                let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
                on.write(&mut cache.ids, &ids)?;
            }
            Feed::Picks(_) if !cache.picks_in_ids => {
                return Err(GptError::Prompt(
                    "a step fed the last picks follows a prefill or step that picked on the backend".into(),
                ));
            }
            Feed::Picks(_) => {}
        }
        cache.picks_in_ids = false;
        let positions: Vec<i32> = positions.iter().map(|&p| p as i32).collect();
        on.write(&mut cache.positions, &positions)?;
        // The first step runs as it comes (it loads and tunes the kernels);
        // later ones replay it, recorded once per cache and model.
        let key = (self.id, self.ieee(), pick);
        if !self.graphs || cache.steps == 0 {
            self.decode_step(on, cache, pick)?;
        } else {
            if cache.graph.as_ref().is_none_or(|(k, _)| *k != key) {
                cache.graph = None;
                cache.graph = on.capture(|| self.decode_step(on, cache, pick))?.map(|g| (key, g));
            }
            match &cache.graph {
                Some((_, graph)) => on.replay(graph)?,
                None => self.decode_step(on, cache, pick)?,
            }
        }
        cache.steps += 1;
        cache.picks_in_ids = pick != Pick::Logits && (self.all_reduce.is_none() || self.whole_row(cache, pick));
        cache.advance(grows.into_iter());
        Ok(())
    }

    /// Token ids within the vocabulary, at most the context.
    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        let cfg = &self.config;
        if tokens.is_empty() || tokens.len() > cfg.n_positions {
            return Err(GptError::Prompt(format!(
                "{} tokens: the model takes 1 to {} at a time",
                tokens.len(),
                cfg.n_positions
            )));
        }
        match tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            Some(t) => Err(GptError::Prompt(format!(
                "token id {t} is outside the model's vocabulary of {}",
                cfg.vocab_size
            ))),
            None => Ok(()),
        }
    }

    /// Token plus position embeddings into `x: [tokens, C]`.
    fn embed(&self, on: &B, tokens: &[u32], positions: &[i32], x: &mut B::Tensor<T>) -> Result<()> {
        let n = tokens.len();
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        self.embed_on(on, &on.upload_slice(&ids, &[n])?, &on.upload_slice(positions, &[n])?, x)
    }

    /// [`Gpt::embed`] of token ids and positions already on the backend.
    fn embed_on(&self, on: &B, ids: &B::Tensor<i32>, positions: &B::Tensor<i32>, x: &mut B::Tensor<T>) -> Result<()> {
        embedding::run(on, (ids, positions), (&self.wte, &self.wpe), x)?;
        Ok(())
    }

    /// Every block over the residual stream `acts.x: [b·t, C]`, `b`
    /// sequences of `t` tokens, in place.
    fn layers(
        &self,
        on: &B,
        acts: &mut Activations<B, T>,
        (b, t): (usize, usize),
        mut attend: Attend<B, T>,
    ) -> Result<()> {
        for (l, block) in self.blocks.iter().enumerate() {
            self.attention_block(on, block, acts, (b, t), l, &mut attend)?;
            self.mlp_block(on, block, acts, l)?;
        }
        Ok(())
    }

    /// `x + proj(attention(ln_1(x)))`.
    fn attention_block(
        &self,
        on: &B,
        p: &Block<B::Tensor<T>>,
        acts: &mut Activations<B, T>,
        (b, t): (usize, usize),
        layer: usize,
        attend: &mut Attend<B, T>,
    ) -> Result<()> {
        // This rank's heads, side by side.
        let heads = self.shard.heads.len();
        let c = heads * self.config.head_size();
        let Activations { x, next, qkv, att, .. } = acts;
        let fold = &self.folds[layer].ln_1;
        self.norm_linear(on, x, &p.ln_1, (&p.c_attn.0, &p.c_attn.1, fold), (qkv, next), false)?;
        on.reshape_in_place(qkv, &[b, t, 3 * c])?;
        on.reshape_in_place(att, &[b, t, c])?;
        match attend {
            Attend::Within => self.causal_attention(on, qkv, att, heads)?,
            Attend::WithinAndCache(cache) => {
                let c = cache.layer(layer);
                decode::write_kv(on, qkv, c.k, c.v, c.starts)?;
                self.causal_attention(on, qkv, att, heads)?;
            }
            Attend::Cache(cache) => {
                let c = cache.layer(layer);
                decode::attention(on, qkv, (c.k, c.v), c.positions, att, heads, c.splits)?;
            }
        }
        on.reshape_in_place(qkv, &[b * t, 3 * c])?;
        on.reshape_in_place(att, &[b * t, c])?;
        self.row_parallel(on, att, &p.attn_proj, x, next)?;
        std::mem::swap(x, next);
        Ok(())
    }

    /// `x + proj(gelu(fc(ln_2(x))))`.
    fn mlp_block(&self, on: &B, p: &Block<B::Tensor<T>>, acts: &mut Activations<B, T>, layer: usize) -> Result<()> {
        let Activations { x, next, fc, .. } = acts;
        let fold = &self.folds[layer].ln_2;
        self.norm_linear(on, x, &p.ln_2, (&p.c_fc.0, &p.c_fc.1, fold), (fc, next), true)?;
        self.row_parallel(on, fc, &p.mlp_proj, x, next)?;
        std::mem::swap(x, next);
        Ok(())
    }

    /// `out = residual + input @ w^T + b`, row-parallel: each rank
    /// multiplies its slice of the input channels; rank 0 adds the bias and
    /// the residual, and the all-reduce adds up the ranks.
    fn row_parallel(
        &self,
        on: &B,
        input: &B::Tensor<T>,
        affine: &Affine<B::Tensor<T>>,
        residual: &B::Tensor<T>,
        out: &mut B::Tensor<T>,
    ) -> Result<()> {
        if self.shard.rank == 0 {
            self.linear_residual(on, input, affine, residual, out)?;
        } else {
            self.linear(on, input, (&affine.0, &affine.1), out, false)?;
        }
        if let Some(all_reduce) = &self.all_reduce {
            all_reduce.sum(on, out)?;
        }
        Ok(())
    }

    /// `y = ln(x) @ w^T + b`, then GELU where `gelu`, `ln` a LayerNorm's
    /// weight and bias: for a few rows in one kernel where that is faster
    /// (`matmul::run_layer_norm_linear`), else the LayerNorm into `normed`
    /// (shaped as `x`, free to overwrite), then the product.
    fn norm_linear(
        &self,
        on: &B,
        x: &B::Tensor<T>,
        (ln_w, ln_b): &Affine<B::Tensor<T>>,
        (w, b, fold): (&B::Tensor<T>, &B::Tensor<T>, &NormFold<B>),
        (y, normed): (&mut B::Tensor<T>, &mut B::Tensor<T>),
        gelu: bool,
    ) -> Result<()> {
        let eps = self.config.layer_norm_epsilon;
        match self.ieee_linear(on, x) {
            Some(true) => {
                gemv::run_layer_norm(on, (x, ln_w, eps), (w, fold), y, gelu)?;
            }
            Some(false) => {
                norm::run_layer_norm(on, x, ln_w, ln_b, normed, eps)?;
                linear::run(on, normed, w, b, y, gelu)?;
            }
            None => {
                matmul::run_layer_norm_linear(on, (x, ln_w, ln_b, eps), (w, b, fold), y, gelu, normed)?;
            }
        }
        Ok(())
    }

    /// `ln_f(x) @ wte^T` for `x: [rows, C]` (this rank's vocabulary
    /// columns), downloaded as f32.
    fn logits(&self, on: &B, x: &B::Tensor<T>) -> Result<Vec<f32>> {
        let mut logits = on.zeros(&[x.shape()[0], self.shard.vocab.len()])?;
        self.lm_head(on, x, (&mut logits, &mut on.zeros(x.shape())?))?;
        download(on, &logits)
    }

    /// `ln_f(x) @ wte^T` for `x: [rows, C]` into `logits` (this rank's
    /// vocabulary columns), `normed` shaped as `x` and free to overwrite.
    fn lm_head(&self, on: &B, x: &B::Tensor<T>, out: (&mut B::Tensor<T>, &mut B::Tensor<T>)) -> Result<()> {
        let head = self.head.as_ref().unwrap_or(&self.wte);
        let product = (head, &self.zero_bias, &self.head_fold);
        self.norm_linear(on, x, &self.ln_f, product, out, false)
    }

    /// One decode step over the cache's token ids and positions, into its
    /// logits, then its pick: the work a recorded step replays.
    fn decode_step(&self, on: &B, cache: &mut KvCache<B, T>, pick: Pick) -> Result<()> {
        let b = cache.batch();
        // The cache's activations, out of it while its layers are attended
        // to, and back in whatever the step's outcome.
        let mut acts = (cache.activations.take())
            .ok_or_else(|| GptError::Prompt("the cache lost its activations to a failed step".into()))?;
        let ran = (|| {
            self.embed_on(on, &cache.ids, &cache.positions, &mut acts.x)?;
            self.layers(on, &mut acts, (b, 1), Attend::Cache(cache))?;
            self.lm_head(on, &acts.x, (&mut cache.logits, &mut acts.next))
        })();
        cache.activations = Some(acts);
        ran?;
        self.pick(on, cache, pick)
    }

    /// The pick of the cache's logits, as `pick` says, into its `best` and
    /// `ids`.
    fn pick(&self, on: &B, cache: &mut KvCache<B, T>, pick: Pick) -> Result<()> {
        let whole_row = self.whole_row(cache, pick);
        // The row picked from, and its first column's token. Over a split
        // vocabulary each rank places its columns in the whole row, an
        // all-reduce joins them, and every rank picks the same token from
        // it (top-k and top-p need the whole row; so does a pick the next
        // step takes from `ids` on every rank).
        let (row, first) = match (&mut cache.whole, &self.all_reduce) {
            (Some(whole), Some(all_reduce)) if whole_row => {
                argmax::place(on, &cache.logits, whole, self.shard.vocab.start)?;
                all_reduce.sum(on, whole)?;
                (&*whole, 0)
            }
            _ => (&cache.logits, self.shard.vocab.start),
        };
        let (best, column) = (&mut cache.best, &mut cache.ids);
        match pick {
            Pick::Logits => {}
            Pick::Greedy => argmax::run(on, row, &mut cache.argmax, best, column)?,
            Pick::Sample(draw) => argmax::run_gumbel(on, (row, &cache.keys), (draw, first), best, column)?,
        }
        Ok(())
    }

    /// Whether a step ending as `pick` picks from the whole vocabulary's
    /// row though this rank holds part of it: every pick on a rank of a
    /// split model, so that the ranks pick the same token on the backend.
    fn whole_row(&self, cache: &KvCache<B, T>, pick: Pick) -> bool {
        pick != Pick::Logits && cache.whole.is_some() && self.all_reduce.is_some()
    }
}
