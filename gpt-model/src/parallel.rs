//! Tensor parallelism, Megatron style: one model split over ranks (GPUs, or
//! CPU ranks simulated by threads of one process), each holding a
//! [`Shard`]: a range of the attention heads, of the MLP's hidden units and
//! of the vocabulary.
//!
//! Every rank holds the whole residual stream. The QKV projection and the
//! MLP's first linear are column-parallel (each rank computes its heads'
//! and its hidden units' columns); the attention output projection and the
//! MLP's second linear are row-parallel (each rank multiplies its slice of
//! the channels, and one all-reduce sums the ranks' partial results); the
//! LM head is split over the vocabulary, each rank computing its slice of
//! the logits, which [`TensorParallel`] joins on the host for sampling
//! (a greedy or plain-temperature step joins each rank's pick instead).
//!
//! Across two to four GPUs with peer access among them all, the
//! all-reduce of a tensor that fits it (a decode step's) is the DSL's
//! one-shot kernel
//! ([`tile_kernels::collective`]), and NCCL's (cudarc's `nccl`, one
//! process driving the GPUs, one thread per GPU) otherwise, or everywhere
//! with `TILE_ALL_REDUCE=nccl`. Across CPU ranks it is a host sum, which
//! tests the sharding without several GPUs.

use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::generate::{Decoder, Output, Request, run};
use crate::kv_cache::{Feed, KvCache};
use crate::model::{Float, Gpt};
use crate::shard::{AllReduce, Shard};
use crate::{GptError, Result};
use cudarc::nccl::{Comm, NcclType, ReduceOp};
use std::sync::{Arc, Barrier, Mutex};
use tile::{Backend, Cpu, HostTensor, Stream, Tensor};
use tile_kernels::argmax::Draw;
use tile_kernels::collective::{MOST_RANKS, PeerAllReduce};

/// Backends whose ranks can run one model together.
pub trait Collective<T: Float>: Backend + Sync + Sized {
    /// One all-reduce per rank, joining `ranks` (each rank's backend, in
    /// rank order).
    fn join(ranks: &[Self]) -> Result<Vec<Box<dyn AllReduce<Self, T>>>>;
}

/// CPU ranks, threads of one process: each puts its partial sums in a
/// shared slot, and every rank adds the slots up in rank order (so each
/// ends with the same sum).
struct HostSum {
    rank: usize,
    group: Arc<HostGroup>,
}

struct HostGroup {
    parts: Mutex<Vec<Vec<f32>>>,
    barrier: Barrier,
}

impl<T: Float> AllReduce<Cpu, T> for HostSum {
    fn sum(&self, _on: &Cpu, x: &mut HostTensor<T>) -> Result<()> {
        let lock = || self.group.parts.lock().unwrap_or_else(|e| e.into_inner());
        lock()[self.rank] = x.to_vec().iter().map(|v| v.to_f32().unwrap_or(f32::NAN)).collect();
        self.group.barrier.wait();
        let total: Vec<T> = {
            let parts = lock();
            (0..parts[self.rank].len())
                .map(|i| T::from(parts.iter().map(|p| p[i]).sum::<f32>()).unwrap_or_else(T::nan))
                .collect()
        };
        // Nobody writes its next partial sums before everyone has read these.
        self.group.barrier.wait();
        *x = HostTensor::from_vec(total, x.shape())?;
        Ok(())
    }
}

impl<T: Float> Collective<T> for Cpu {
    fn join(ranks: &[Cpu]) -> Result<Vec<Box<dyn AllReduce<Cpu, T>>>> {
        let group = Arc::new(HostGroup {
            parts: Mutex::new(vec![Vec::new(); ranks.len()]),
            barrier: Barrier::new(ranks.len()),
        });
        Ok((0..ranks.len())
            .map(|rank| {
                Box::new(HostSum {
                    rank,
                    group: group.clone(),
                }) as Box<dyn AllReduce<Cpu, T>>
            })
            .collect())
    }
}

/// A GPU rank's NCCL communicator, used by one thread at a time.
struct Nccl(Mutex<SendComm>);

/// NCCL lets a communicator be used from any thread, one at a time (the
/// mutex above); cudarc's `Comm` holds a raw handle, so it isn't `Send`.
struct SendComm(Comm);
// SAFETY: see above; the communicator is only reached through the mutex.
unsafe impl Send for SendComm {}

impl<T: Float + NcclType> AllReduce<Stream, T> for Nccl {
    fn sum(&self, _on: &Stream, x: &mut Tensor<T>) -> Result<()> {
        let comm = self.0.lock().unwrap_or_else(|e| e.into_inner());
        comm.0
            .all_reduce_in_place(x.as_cudarc_mut(), &ReduceOp::Sum)
            .map_err(|e| GptError::Parallel(format!("ncclAllReduce failed: {e:?}")))?;
        Ok(())
    }
}

/// One of 2 to [`MOST_RANKS`] GPU ranks with peer access among them all:
/// the one-shot all-reduce for tensors it takes, NCCL's for larger ones.
struct PeerSum<T: Float> {
    peers: Mutex<PeerAllReduce<T>>,
    nccl: Nccl,
}

impl<T: Float + NcclType> AllReduce<Stream, T> for PeerSum<T> {
    fn sum(&self, on: &Stream, x: &mut Tensor<T>) -> Result<()> {
        if !PeerAllReduce::<T>::fits(x.len()) {
            return self.nccl.sum(on, x);
        }
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        Ok(peers.sum(x)?)
    }
}

impl<T: Float + NcclType> Collective<T> for Stream {
    fn join(ranks: &[Stream]) -> Result<Vec<Box<dyn AllReduce<Stream, T>>>> {
        // SAFETY: only tries to load the library and drops the handle.
        if !unsafe { cudarc::nccl::sys::is_culib_present() } {
            return Err(GptError::Parallel(
                "NCCL could not be loaded (libnccl.so): install NCCL (Ubuntu: `apt install libnccl2 libnccl-dev`; \
                 or pip's nvidia-nccl, with its lib folder on LD_LIBRARY_PATH)"
                    .into(),
            ));
        }
        let mut ordinals: Vec<usize> = ranks.iter().map(|s| s.as_cudarc().context().ordinal()).collect();
        ordinals.sort_unstable();
        if ordinals.windows(2).any(|w| w[0] == w[1]) {
            return Err(GptError::Parallel(format!(
                "two ranks on the same GPU (devices {ordinals:?}): each rank needs a GPU of its own"
            )));
        }
        let comms = Comm::from_devices(ranks.iter().map(|s| s.as_cudarc().clone()).collect())
            .map_err(|e| GptError::Parallel(format!("ncclCommInitAll failed: {e:?}")))?;
        let nccls = comms.into_iter().map(|c| Nccl(Mutex::new(SendComm(c))));
        let nccl_only = match std::env::var("TILE_ALL_REDUCE").as_deref() {
            Err(_) | Ok("one-shot") => false,
            Ok("nccl") => true,
            Ok(other) => {
                return Err(GptError::Parallel(format!(
                    "TILE_ALL_REDUCE is `{other}`: it takes `nccl` (NCCL's all-reduce everywhere) or `one-shot` (the default)"
                )));
            }
        };
        if !nccl_only && ranks.len() <= MOST_RANKS && all_peers(ranks)? {
            let ranks: Vec<&Stream> = ranks.iter().collect();
            let ends = PeerAllReduce::<T>::join(&ranks)?;
            return Ok(ends
                .into_iter()
                .zip(nccls)
                .map(|(end, nccl)| {
                    Box::new(PeerSum {
                        peers: Mutex::new(end),
                        nccl,
                    }) as Box<dyn AllReduce<Stream, T>>
                })
                .collect());
        }
        Ok(nccls.map(|n| Box::new(n) as Box<dyn AllReduce<Stream, T>>).collect())
    }
}

/// Whether every rank's GPU can address every other's memory.
fn all_peers(ranks: &[Stream]) -> Result<bool> {
    for a in ranks {
        for b in ranks {
            if !std::ptr::eq(a, b) && !a.can_access_peer(b)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The ranks' picks, rank 0's: every rank picks from the whole
/// vocabulary's row, so they are the same tokens; an error where a rank's
/// differ.
fn agreed<P>(ranks: Vec<Vec<P>>, token: impl Fn(&P) -> u32) -> Result<Vec<P>> {
    let mut ranks = ranks.into_iter();
    let first = ranks.next().unwrap_or_default();
    for rank in ranks {
        if !rank.iter().map(&token).eq(first.iter().map(&token)) {
            return Err(GptError::Parallel("the ranks picked different tokens".into()));
        }
    }
    Ok(first)
}

/// A GPT-2 split over ranks, each on its own backend; with one rank, the
/// plain model. Its passes run every rank at once (a thread each) and
/// return the whole logits.
pub struct TensorParallel<B: Backend, T: Float> {
    ranks: Vec<B>,
    shards: Vec<Gpt<B, T>>,
}

/// A [`KvCache`] per rank, each holding its rank's heads, and the whole
/// logits of the last pass that returned them (the ranks' columns joined).
pub struct ShardedCache<B: Backend, T: Float>(Vec<KvCache<B, T>>, Vec<f32>);

impl<B: Backend, T: Float> ShardedCache<B, T> {
    /// Each sequence's tokens so far.
    pub fn lengths(&self) -> &[usize] {
        self.0[0].lengths()
    }
}

impl<B: Collective<T>, T: Float> TensorParallel<B, T> {
    /// Loads each rank's shard of `checkpoint` onto its backend (in rank
    /// order), and joins the ranks.
    pub fn load(ranks: Vec<B>, checkpoint: &Checkpoint) -> Result<TensorParallel<B, T>> {
        let n = ranks.len();
        let mut comms: Vec<Option<Box<dyn AllReduce<B, T>>>> = match n {
            0 => return Err(GptError::Parallel("no rank to run the model on".into())),
            1 => vec![None],
            _ => B::join(&ranks)?.into_iter().map(Some).collect(),
        };
        let shards = ranks
            .iter()
            .zip(comms.drain(..))
            .enumerate()
            .map(|(r, (on, comm))| Gpt::load_shard(on, checkpoint, Shard::of(&checkpoint.config, r, n)?, comm))
            .collect::<Result<_>>()?;
        Ok(TensorParallel { ranks, shards })
    }

    /// The model's shape.
    pub fn config(&self) -> &Config {
        &self.shards[0].config
    }

    /// [`Gpt::allow_tf32`] on every rank.
    pub fn allow_tf32(&mut self, allow: bool) {
        self.shards.iter_mut().for_each(|m| m.allow_tf32(allow));
    }

    /// Each rank's backend, in rank order.
    pub fn ranks(&self) -> &[B] {
        &self.ranks
    }

    /// A cache for `batch` sequences of up to `capacity` tokens each.
    pub fn cache(&self, batch: usize, capacity: usize) -> Result<ShardedCache<B, T>> {
        let caches = self.ranks.iter().zip(&self.shards);
        Ok(ShardedCache(
            caches
                .map(|(on, m)| m.cache(on, batch, capacity))
                .collect::<Result<_>>()?,
            Vec::new(),
        ))
    }

    /// [`Gpt::prefill`] on every rank: the logits of each prompt's last
    /// token, `[batch, vocab_size]`.
    pub fn prefill<'c>(&self, cache: &'c mut ShardedCache<B, T>, prompts: &[Vec<u32>]) -> Result<&'c [f32]> {
        self.each(cache, |on, model, cache| model.prefill(on, cache, prompts).map(|_| ()))
    }

    /// [`Gpt::prefill_greedy`] on every rank: each prompt's next token, as
    /// [`TensorParallel::decode_greedy`] picks.
    pub fn prefill_greedy(&self, cache: &mut ShardedCache<B, T>, prompts: &[Vec<u32>]) -> Result<Vec<(f32, u32)>> {
        let ranks = self.on_every_rank(cache, |on, model, cache| model.prefill_greedy(on, cache, prompts))?;
        agreed(ranks, |p| p.1)
    }

    /// [`Gpt::prefill_sampled`] on every rank: each prompt's next token, as
    /// [`TensorParallel::decode_sampled`] draws.
    pub fn prefill_sampled(
        &self,
        cache: &mut ShardedCache<B, T>,
        prompts: &[Vec<u32>],
        sample: (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>> {
        let ranks = self.on_every_rank(cache, |on, model, cache| {
            model.prefill_sampled(on, cache, prompts, sample)
        })?;
        agreed(ranks, |p| p.1)
    }

    /// [`Gpt::decode`] on every rank: the logits, `[batch, vocab_size]`.
    pub fn decode<'c>(&self, cache: &'c mut ShardedCache<B, T>, tokens: &[Option<u32>]) -> Result<&'c [f32]> {
        self.each(cache, |on, model, cache| model.decode(on, cache, tokens).map(|_| ()))
    }

    /// [`Gpt::decode_greedy`] on every rank: each sequence's largest logit
    /// and its token id (the lowest on a tie), which every rank picks from
    /// the whole vocabulary's row.
    pub fn decode_greedy(&self, cache: &mut ShardedCache<B, T>, tokens: &[Option<u32>]) -> Result<Vec<(f32, u32)>> {
        let ranks = self.on_every_rank(cache, |on, model, cache| model.decode_greedy(on, cache, tokens))?;
        agreed(ranks, |p| p.1)
    }

    /// [`Gpt::decode_sampled`] on every rank: each sequence's token, which
    /// every rank draws from the whole vocabulary's row.
    pub fn decode_sampled(
        &self,
        cache: &mut ShardedCache<B, T>,
        tokens: &[Option<u32>],
        sample: (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>> {
        let ranks = self.on_every_rank(cache, |on, model, cache| {
            model.decode_sampled(on, cache, tokens, sample)
        })?;
        agreed(ranks, |p| p.1)
    }

    /// [`generate`](crate::generate()) on the split model.
    pub fn generate(&self, request: &Request, on_token: impl FnMut(usize, u32) -> bool) -> Result<Output> {
        run(self, request, on_token)
    }

    /// Runs `pass` on every rank at once, a thread each, and joins the
    /// slices of the logits it leaves in their caches, row by row.
    fn each<'c>(
        &self,
        cache: &'c mut ShardedCache<B, T>,
        pass: impl Fn(&B, &Gpt<B, T>, &mut KvCache<B, T>) -> Result<()> + Sync,
    ) -> Result<&'c [f32]> {
        self.on_every_rank(cache, pass)?;
        if let [one] = &cache.0[..] {
            return Ok(&one.logits_host);
        }
        let vocab = self.config().vocab_size;
        let rows = cache.0[0].batch();
        cache.1.resize(rows * vocab, 0.0);
        for (rank, model) in cache.0.iter().zip(&self.shards) {
            let cols = model.shard().vocab.clone();
            for (row, part) in cache
                .1
                .chunks_exact_mut(vocab)
                .zip(rank.logits_host.chunks_exact(cols.len()))
            {
                row[cols.clone()].copy_from_slice(part);
            }
        }
        Ok(&cache.1)
    }

    /// Runs `pass` on every rank at once (a thread each, with more than
    /// one), and returns each rank's result, in rank order.
    fn on_every_rank<R: Send>(
        &self,
        cache: &mut ShardedCache<B, T>,
        pass: impl Fn(&B, &Gpt<B, T>, &mut KvCache<B, T>) -> Result<R> + Sync,
    ) -> Result<Vec<R>> {
        if let ([on], [model], [cache]) = (&self.ranks[..], &self.shards[..], &mut cache.0[..]) {
            return Ok(vec![pass(on, model, cache)?]);
        }
        let pass = &pass;
        std::thread::scope(|s| {
            let running: Vec<_> = (self.ranks.iter().zip(&self.shards).zip(cache.0.iter_mut()))
                .map(|((on, model), cache)| s.spawn(move || pass(on, model, cache)))
                .collect();
            running
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        })
    }
}

impl<B: Collective<T>, T: Float> Decoder for TensorParallel<B, T> {
    type Cache = ShardedCache<B, T>;

    fn config(&self) -> &Config {
        TensorParallel::config(self)
    }
    fn cache(&self, batch: usize, capacity: usize) -> Result<ShardedCache<B, T>> {
        TensorParallel::cache(self, batch, capacity)
    }
    fn prefill<'c>(&self, cache: &'c mut ShardedCache<B, T>, prompts: &[Vec<u32>]) -> Result<&'c [f32]> {
        TensorParallel::prefill(self, cache, prompts)
    }
    fn prefill_greedy(&self, cache: &mut ShardedCache<B, T>, prompts: &[Vec<u32>]) -> Result<Vec<(f32, u32)>> {
        TensorParallel::prefill_greedy(self, cache, prompts)
    }
    fn prefill_sampled(
        &self,
        cache: &mut ShardedCache<B, T>,
        prompts: &[Vec<u32>],
        sample: (Draw, &[u32]),
    ) -> Result<Vec<(f32, u32)>> {
        TensorParallel::prefill_sampled(self, cache, prompts, sample)
    }
    fn decode<'c>(&self, cache: &'c mut ShardedCache<B, T>, tokens: &[Option<u32>]) -> Result<&'c [f32]> {
        TensorParallel::decode(self, cache, tokens)
    }
    /// Queues the step on every rank: each picks the same tokens, from
    /// the whole vocabulary's row, so a step can take the last one's.
    fn queue(&self, cache: &mut ShardedCache<B, T>, feed: Feed, sample: Option<(Draw, &[u32])>) -> Result<()> {
        self.on_every_rank(cache, |on, model, cache| model.queue_decode(on, cache, feed, sample))?;
        Ok(())
    }
    fn next_picks(&self, cache: &mut ShardedCache<B, T>) -> Result<Vec<u32>> {
        let ranks = self.on_every_rank(cache, |on, model, cache| model.next_picks(on, cache))?;
        agreed(ranks, |&t| t)
    }

    fn lengths(cache: &ShardedCache<B, T>) -> &[usize] {
        cache.lengths()
    }
}

#[cfg(test)]
mod tests {
    use super::agreed;
    use crate::GptError;

    #[test]
    fn ranks_agree_on_their_tokens_or_say_they_differ() {
        // Values may differ in their bits (a NaN, a signed zero); tokens may not.
        let ranks = vec![vec![(1.5, 3), (f32::NAN, 7)], vec![(1.5, 3), (f32::NAN, 7)]];
        let picks = agreed(ranks, |p| p.1).unwrap();
        assert_eq!(picks.iter().map(|p| p.1).collect::<Vec<_>>(), [3, 7]);
        let differ = agreed(vec![vec![3u32, 7], vec![3, 8]], |&t| t);
        assert!(matches!(differ, Err(GptError::Parallel(m)) if m.contains("different tokens")));
        assert_eq!(agreed(vec![vec![5u32]], |&t| t).unwrap(), [5]);
    }
}
