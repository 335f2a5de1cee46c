//! All-reduce between two GPUs of one machine through peer memory: the
//! one-shot all-reduce (as vLLM's and TensorRT-LLM's custom all-reduces do
//! it) for the small tensors of a decode step, where NCCL's protocol costs
//! more than moving the data. Each GPU writes its elements straight into
//! the other's memory over NVLink as flagged lines (NCCL's low-latency
//! protocol: each 4 bytes beside the round), polls its own inbox until the
//! other's lines of the round have arrived, and adds; one kernel, one link
//! crossing, no fence or separate flag.

use tile::{Element, PeerTensor, Stream, Tensor};

/// `x += the peer's x`, for one of two ranks, `BLOCK` elements a block:
/// each block puts its elements in the peer's `inbox` flagged with its
/// round (its calls so far, counted in `rounds`: only block `b` touches
/// `rounds[b]`, and a launch touches memory after the one before it ends,
/// so no atomic is needed), reads the peer's elements of the same round
/// from its own inbox as they arrive, and adds. The inbox has two slots,
/// taken by the round's parity: a peer a call ahead writes the other
/// slot, and can't get two ahead before this block has read its round.
/// Both ranks add the same two numbers, so they end with the same bits.
#[tile::kernel(T = [f16, bf16, f32], BLOCK = [1024], num_warps = 4)]
pub fn all_reduce_pair<T, const BLOCK: usize>(
    x: &mut Tensor<T, { [N] }>,
    inbox: &Tensor<T, { [2, L] }>,
    peer_inbox: &mut Tensor<T, { [2, L] }>,
    rounds: &mut Tensor<u32, { [F] }>,
) {
    let b = block_id(0);
    let round = rounds.get([b]) + 1;
    rounds.store([b], full([1], round));
    let slot = (round % 2) as i32;
    let mine = x.load([b], [BLOCK]);
    peer_inbox.store_flagged([slot, b], mine.reshape([1, BLOCK]), round);
    let theirs = inbox.load_flagged([slot, b], [1, BLOCK], round).reshape([BLOCK]);
    x.store([b], (mine.cast::<f32>() + theirs.cast::<f32>()).cast::<T>());
}

/// The most elements [`PairAllReduce::sum`] takes (a decode step's
/// `[batch, n_embd]` up to batches of 160 at gpt2-xl's 1,600 channels).
pub const CAPACITY: usize = 1 << 18;

/// One rank's end of a two-GPU [`all_reduce_pair`]: its round counts, its
/// view of the peer's inbox, and both inboxes (its own, which the peer
/// writes, and the peer's, kept alive while viewed): `[2, 2 * CAPACITY]`,
/// two slots of flagged elements. Both ends must make the same calls in
/// the same order; a rank that stops making them leaves the other waiting
/// on the GPU.
pub struct PairAllReduce<T: Element> {
    on: Stream,
    rank: usize,
    rounds: Tensor<u32>,
    peer_inbox: PeerTensor<T>,
    inboxes: std::sync::Arc<[Tensor<T>; 2]>,
}

impl<T: Element> PairAllReduce<T> {
    /// The two ends, for ranks on `ranks[0]` and `ranks[1]` (two GPUs with
    /// peer access, which this enables both ways).
    pub fn join(ranks: [&Stream; 2]) -> tile::Result<[PairAllReduce<T>; 2]> {
        let blocks = CAPACITY / 1024;
        ranks[0].enable_peer_access(ranks[1])?;
        ranks[1].enable_peer_access(ranks[0])?;
        let inboxes = std::sync::Arc::new([ranks[0].zeros(&[2, 2 * CAPACITY])?, ranks[1].zeros(&[2, 2 * CAPACITY])?]);
        // The cleared inboxes, before the peer's first write.
        ranks.iter().try_for_each(|on| on.synchronize())?;
        let end = |rank: usize| -> tile::Result<PairAllReduce<T>> {
            let on = ranks[rank];
            Ok(PairAllReduce {
                on: on.clone(),
                rank,
                rounds: on.zeros(&[blocks])?,
                // SAFETY: `inboxes`, held by this end, outlives the view
                // (fields drop in order); `all_reduce_pair`'s rounds order
                // the two GPUs' accesses.
                peer_inbox: unsafe { on.peer_view(&inboxes[1 - rank])? },
                inboxes: inboxes.clone(),
            })
        };
        Ok([end(0)?, end(1)?])
    }

    /// Whether [`PairAllReduce::sum`] takes a tensor of `len` elements.
    pub fn fits(len: usize) -> bool {
        len <= CAPACITY
    }

    /// Replaces `x` (contiguous, at most [`CAPACITY`] elements) with its
    /// sum over both ranks, queued on this end's stream; the other rank
    /// makes the same call.
    pub fn sum(&mut self, x: &mut Tensor<T>) -> tile::Result<()> {
        let shape = x.shape().to_vec();
        if !Self::fits(x.len()) {
            return Err(tile::Error::Shape(format!(
                "all_reduce_pair takes up to {CAPACITY} elements, not {shape:?}"
            )));
        }
        x.reshape_in_place(&[x.len()])?;
        let run = all_reduce_pair::launch_with(
            &self.on,
            &[1024],
            x.len().div_ceil(1024) as u32,
            &mut *x,
            &self.inboxes[self.rank],
            &mut self.peer_inbox,
            &mut self.rounds,
        );
        x.reshape_in_place(&shape)?;
        run
    }
}

impl<T: Element> Drop for PairAllReduce<T> {
    /// Waits for this end's kernels, which write into the peer's inbox,
    /// before the inboxes can go.
    fn drop(&mut self) {
        self.on.synchronize().unwrap_or(());
    }
}
