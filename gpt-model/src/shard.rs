//! The part of a model one rank holds ([`Shard`]: a range of the
//! attention heads, of the MLP's hidden units and of the vocabulary), and
//! how the ranks add up their partial sums ([`AllReduce`]). A model on one
//! rank holds the whole of it ([`Shard::whole`]) and sums nothing;
//! [`crate::parallel`] splits one over several.

use crate::config::Config;
use crate::{GptError, Result};
use std::ops::Range;
use tile::{Backend, Element};

/// The part of a model one rank holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This rank, from 0.
    pub rank: usize,
    /// How many ranks split the model.
    pub ranks: usize,
    /// The attention heads whose queries, keys and values this rank
    /// computes, and whose channels its output projection reads.
    pub heads: Range<usize>,
    /// The MLP's hidden units (of `4 · n_embd`) this rank computes.
    pub hidden: Range<usize>,
    /// The vocabulary rows of the LM head whose logits this rank computes.
    pub vocab: Range<usize>,
}

/// The hidden units are split in groups of this many, which keeps each
/// rank's slice of the MLP's weights a whole number of 128-byte lines.
const HIDDEN_GROUP: usize = 64;

/// Part `part` of `0..n` split into `parts` contiguous ranges whose lengths
/// differ by at most one (the longer ones first).
fn split(n: usize, parts: usize, part: usize) -> Range<usize> {
    let (q, r) = (n / parts, n % parts);
    let start = part * q + part.min(r);
    start..start + q + usize::from(part < r)
}

impl Shard {
    /// The whole model, on one rank.
    pub fn whole(config: &Config) -> Shard {
        Shard {
            rank: 0,
            ranks: 1,
            heads: 0..config.n_head,
            hidden: 0..4 * config.n_embd,
            vocab: 0..config.vocab_size,
        }
    }

    /// Rank `rank`'s part of a model of `config` split over `ranks`: as
    /// even as the heads, the hidden units (in groups of 64) and the
    /// vocabulary allow. Every rank needs a head of its own.
    pub fn of(config: &Config, rank: usize, ranks: usize) -> Result<Shard> {
        if ranks == 0 || ranks > config.n_head || rank >= ranks {
            return Err(GptError::Parallel(format!(
                "can't split a model of {} heads over {ranks} ranks (rank {rank}): each rank needs a head",
                config.n_head
            )));
        }
        let groups = split(4 * config.n_embd / HIDDEN_GROUP, ranks, rank);
        Ok(Shard {
            rank,
            ranks,
            heads: split(config.n_head, ranks, rank),
            hidden: groups.start * HIDDEN_GROUP..groups.end * HIDDEN_GROUP,
            vocab: split(config.vocab_size, ranks, rank),
        })
    }
}

/// How a rank adds its partial sums to the other ranks' (after each
/// row-parallel linear).
pub trait AllReduce<B: Backend, T: Element>: Send + Sync {
    /// Replaces `x` on every rank with the sum of every rank's `x`. Every
    /// rank calls it, in the same order.
    fn sum(&self, on: &B, x: &mut B::Tensor<T>) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn splits_cover_the_range_evenly() {
        for (n, parts) in [(25, 2), (50257, 2), (4, 3), (7, 7), (100, 8)] {
            let ranges: Vec<_> = (0..parts).map(|p| split(n, parts, p)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[parts - 1].end, n);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1, "{lens:?}");
        }
    }
}
