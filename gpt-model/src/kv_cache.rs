//! The keys and values of every layer for a batch of sequences, kept on the
//! backend between steps so that no step recomputes a past position.

use crate::Result;
use crate::activations::Activations;
use crate::config::Config;
use tile::Backend;
use tile::Element;
use tile_kernels::argmax::{ArgmaxScratch, Draw};
use tile_kernels::decode;

/// Per layer, keys and values `[batch, capacity, heads · head size]`
/// (heads side by side, as the QKV projection writes them), and each sequence's length so far.
pub struct KvCache<B: Backend, T: Element> {
    k: Vec<B::Tensor<T>>,
    v: Vec<B::Tensor<T>>,
    lengths: Vec<usize>,
    capacity: usize,
    /// A prefill's first position per sequence, on the backend.
    starts: B::Tensor<i32>,
    /// Decode attention's splits per (sequence, head), picked once.
    splits: usize,
    /// A decode step's activations, reused every step (taken out while a
    /// step runs).
    pub(crate) activations: Option<Activations<B, T>>,
    /// A decode step's token per sequence and its position, written in
    /// place before each step (what a recorded step reads: the position is
    /// where its embedding and its attention look). A pick writes its
    /// columns into `ids`, where a step fed [`Feed::Picks`] finds them.
    pub(crate) ids: B::Tensor<i32>,
    pub(crate) positions: B::Tensor<i32>,
    /// A decode step's logits, `[batch, vocabulary columns]`.
    pub(crate) logits: B::Tensor<T>,
    /// Host memory the logits are copied into (page-locked on a GPU, where
    /// a copy into pageable memory took longer than the LM head).
    pub(crate) logits_landing: B::Landing<T>,
    /// The logits as f32, where [`Gpt::prefill`](crate::Gpt::prefill) and
    /// [`Gpt::decode`](crate::Gpt::decode) return them: made once, as a
    /// new vector of a batch of rows took longer than the copy.
    pub(crate) logits_host: Vec<f32>,
    /// On a rank holding part of the vocabulary, the whole row of logits,
    /// `[batch, vocab_size]`, for draws that need it (top-k, top-p).
    pub(crate) whole: Option<B::Tensor<T>>,
    /// A step's pick per sequence: its largest logit, or largest
    /// perturbed logit when sampling (its column goes to `ids`).
    pub(crate) best: B::Tensor<f32>,
    /// The greedy pick's scratch over a row of the whole vocabulary (a
    /// rank of a split model picks from `whole`).
    pub(crate) argmax: ArgmaxScratch<B>,
    /// A sampling step's random key per sequence, written in place.
    pub(crate) keys: B::Tensor<u32>,
    /// The decode step recorded for replay, with the key of the model and
    /// its products it was recorded from.
    pub(crate) graph: Option<(StepKey, B::Graph)>,
    /// Decode steps run since the cache was made.
    pub(crate) steps: usize,
    /// Whether `ids` holds the last pick per sequence (a pick copies its
    /// tokens there, for a step fed [`Feed::Picks`]).
    pub(crate) picks_in_ids: bool,
    /// Queued steps' picked tokens, copied to the host as each step ends:
    /// two steps' worth, the oldest unread first from `first_queued`.
    pub(crate) landed: [B::Landing<i32>; 2],
    pub(crate) first_queued: usize,
    pub(crate) queued: usize,
}

/// A decode step's tokens.
#[derive(Clone, Copy, Debug)]
pub enum Feed<'a> {
    /// Given per sequence; `None` for a sequence that does not grow (a
    /// finished one, which keeps its slot in the batch).
    Tokens(&'a [Option<u32>]),
    /// For each sequence marked `true`, its pick of the step before, read
    /// where it was picked, on the backend; the others do not grow. What
    /// lets a step be queued before the host has read the last one's picks.
    Picks(&'a [bool]),
}

/// What a recorded decode step depends on besides the cache: the model
/// (its identity), whether its products run in IEEE f32, and how it ends.
pub(crate) type StepKey = (u64, bool, Pick);

/// How a decode step ends on the backend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Pick {
    /// With the logits.
    Logits,
    /// With each row's largest logit.
    Greedy,
    /// With a sample of each row's softmax as the draw says, by the
    /// Gumbel-max trick, keyed by `KvCache::keys`.
    Sample(Draw),
}

impl<B: Backend, T: Element> KvCache<B, T> {
    /// An empty cache of `heads` heads for `batch` sequences of up to
    /// `capacity` tokens (at most the model's context), whose decode steps
    /// give `vocab` columns of logits and write `activations`.
    pub(crate) fn new(
        on: &B,
        config: &Config,
        (heads, vocab): (usize, usize),
        (batch, capacity): (usize, usize),
        activations: Activations<B, T>,
    ) -> Result<KvCache<B, T>> {
        let capacity = capacity.min(config.n_positions);
        let shape = [batch, capacity, heads * config.head_size()];
        let layer = || on.zeros::<T>(&shape);
        let k: Vec<B::Tensor<T>> = (0..config.n_layer).map(|_| layer()).collect::<tile::Result<_>>()?;
        let splits = decode::splits(on, &k[0], heads)?;
        Ok(KvCache {
            v: (0..config.n_layer).map(|_| layer()).collect::<tile::Result<_>>()?,
            k,
            lengths: vec![0; batch],
            capacity,
            starts: on.zeros(&[batch])?,
            splits,
            activations: Some(activations),
            ids: on.zeros(&[batch])?,
            positions: on.zeros(&[batch])?,
            logits: on.zeros(&[batch, vocab])?,
            logits_landing: on.landing(batch * vocab)?,
            logits_host: vec![0.0; batch * vocab],
            whole: (vocab < config.vocab_size)
                .then(|| on.zeros(&[batch, config.vocab_size]))
                .transpose()?,
            best: on.zeros(&[batch])?,
            argmax: ArgmaxScratch::new(on, batch, config.vocab_size)?,
            keys: on.zeros(&[batch])?,
            graph: None,
            steps: 0,
            picks_in_ids: false,
            landed: [on.landing(batch)?, on.landing(batch)?],
            first_queued: 0,
            queued: 0,
        })
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.lengths.len()
    }

    /// Positions each sequence can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Each sequence's tokens so far.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// Prepares a prefill that writes each sequence's tokens from its
    /// `starts` position on (written in place). The sequences start again:
    /// no pick is left to feed a step, and queued steps' unread tokens are
    /// dropped.
    pub(crate) fn begin(&mut self, on: &B, starts: &[usize]) -> Result<()> {
        self.picks_in_ids = false;
        self.queued = 0;
        let starts: Vec<i32> = starts.iter().map(|&s| s as i32).collect();
        on.write(&mut self.starts, &starts)?;
        Ok(())
    }

    /// Layer `l`'s keys and values, a prefill's starts, a decode step's
    /// positions, and decode attention's splits.
    pub(crate) fn layer(&mut self, l: usize) -> Layer<'_, B, T> {
        Layer {
            k: &mut self.k[l],
            v: &mut self.v[l],
            starts: &self.starts,
            positions: &self.positions,
            splits: self.splits,
        }
    }

    /// After a prefill: each sequence holds its prompt.
    pub(crate) fn set_lengths(&mut self, lengths: impl Iterator<Item = usize>) {
        self.lengths = lengths.collect();
    }

    /// After a decode step: each sequence that ran holds one more token.
    pub(crate) fn advance(&mut self, ran: impl Iterator<Item = bool>) {
        for (l, ran) in self.lengths.iter_mut().zip(ran) {
            *l += ran as usize;
        }
    }
}

/// One layer's share of a [`KvCache`] during a pass.
pub(crate) struct Layer<'c, B: Backend, T: Element> {
    pub k: &'c mut B::Tensor<T>,
    pub v: &'c mut B::Tensor<T>,
    pub starts: &'c B::Tensor<i32>,
    pub positions: &'c B::Tensor<i32>,
    pub splits: usize,
}
