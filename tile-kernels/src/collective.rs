//! All-reduce among two to four GPUs of one machine through peer memory:
//! the one-shot all-reduce (as vLLM's and TensorRT-LLM's custom
//! all-reduces do it) for the small tensors of a decode step, where
//! NCCL's protocol costs more than moving the data. Each GPU writes its
//! elements straight into every other's memory over NVLink as flagged
//! lines (NCCL's low-latency protocol: each 4 bytes beside the round),
//! polls its own inbox until the others' lines of the round have arrived,
//! and adds; one kernel, one link crossing, no fence or separate flag.

use tile::{Element, PeerTensor, Stream, Tensor};

/// `x = the sum of x over the ranks`, for rank `rank` of `R` (2 to 4),
/// `BLOCK` elements a block. Each block puts its elements in row `rank` of
/// every peer's inbox (`first`, `second`, `third`: the next ranks around
/// the ring; those past `R - 1` peers are not written), flagged with its
/// round (its calls so far, counted in `rounds`: only block `b` touches
/// `rounds[b]`, and a launch touches memory after the one before it ends,
/// so no atomic is needed). It then reads the other rows of its own
/// inbox as they arrive and adds all `R` in rank order, so every rank
/// ends with the same bits. The inbox has two slots, taken by the round's
/// parity: a peer a call ahead writes the other slot, and can't get two
/// ahead before this block has read its round.
#[tile::kernel(T = [f16, bf16, f32], BLOCK = [1024], num_warps = 4)]
pub fn all_reduce_one_shot<T, const BLOCK: usize>(
    x: &mut Tensor<T, { [N] }>,
    inbox: &Tensor<T, { [2, R, L] }>,
    first: &mut Tensor<T, { [2, R, L] }>,
    second: &mut Tensor<T, { [2, R, L] }>,
    third: &mut Tensor<T, { [2, R, L] }>,
    rounds: &mut Tensor<u32, { [F] }>,
    rank: i32,
) {
    let b = block_id(0);
    let round = rounds.get([b]) + 1;
    rounds.store([b], full([1], round));
    let slot = (round % 2) as i32;
    let mine = x.load([b], [BLOCK]).reshape([1, 1, BLOCK]);
    first.store_flagged([slot, rank, b], mine, round);
    if R > 2 {
        second.store_flagged([slot, rank, b], mine, round);
    }
    if R > 3 {
        third.store_flagged([slot, rank, b], mine, round);
    }
    let mut sum = mine.cast::<f32>();
    if rank != 0 {
        sum = inbox.load_flagged([slot, 0, b], [1, 1, BLOCK], round).cast::<f32>();
    }
    for r in 1..R {
        let mut term = mine;
        if r != rank {
            term = inbox.load_flagged([slot, r, b], [1, 1, BLOCK], round);
        }
        sum = sum + term.cast::<f32>();
    }
    x.store([b], sum.cast::<T>().reshape([BLOCK]));
}

/// The most elements [`PeerAllReduce::sum`] takes (a decode step's
/// `[batch, n_embd]` up to batches of 160 at gpt2-xl's 1,600 channels).
pub const CAPACITY: usize = 1 << 18;

/// The most ranks [`PeerAllReduce`] joins: [`all_reduce_one_shot`]
/// writes into up to three peers.
pub const MOST_RANKS: usize = 4;

/// One rank's end of an [`all_reduce_one_shot`] among 2 to
/// [`MOST_RANKS`] GPUs: its round counts, its views of the next ranks'
/// inboxes around the ring, and every rank's inbox (its own, which the
/// peers write, and theirs, kept alive while viewed): `[2, ranks, 2 *
/// CAPACITY]`, two slots of a row of flagged elements from each rank.
/// Every end must make the same calls in the same order; a rank that
/// stops making them leaves the others waiting on the GPU.
pub struct PeerAllReduce<T: Element> {
    on: Stream,
    rank: usize,
    rounds: Tensor<u32>,
    peers: [PeerTensor<T>; MOST_RANKS - 1],
    inboxes: std::sync::Arc<Vec<Tensor<T>>>,
}

impl<T: Element> PeerAllReduce<T> {
    /// The ends, one for each rank on `ranks` (2 to [`MOST_RANKS`] GPUs,
    /// each with peer access to every other, which this enables).
    pub fn join(ranks: &[&Stream]) -> tile::Result<Vec<PeerAllReduce<T>>> {
        let n = ranks.len();
        if !(2..=MOST_RANKS).contains(&n) {
            return Err(tile::Error::Shape(format!(
                "the one-shot all-reduce joins 2 to {MOST_RANKS} GPUs, not {n}"
            )));
        }
        for (i, a) in ranks.iter().enumerate() {
            for b in ranks.iter().skip(i + 1) {
                a.enable_peer_access(b)?;
                b.enable_peer_access(a)?;
            }
        }
        let inboxes = ranks
            .iter()
            .map(|on| on.zeros(&[2, n, 2 * CAPACITY]))
            .collect::<tile::Result<Vec<_>>>()?;
        let inboxes = std::sync::Arc::new(inboxes);
        // The cleared inboxes, before any peer's first write.
        ranks.iter().try_for_each(|on| on.synchronize())?;
        (0..n)
            .map(|rank| {
                let on = ranks[rank];
                // The next ranks around the ring; with fewer than
                // `MOST_RANKS`, views the kernel doesn't write fill the rest.
                let view = |step: usize| {
                    let peer = (rank + 1 + (step % (n - 1))) % n;
                    // SAFETY: `inboxes`, held by this end, outlives the
                    // view (fields drop in order); `all_reduce_one_shot`'s
                    // rounds order the GPUs' accesses.
                    unsafe { on.peer_view(&inboxes[peer]) }
                };
                Ok(PeerAllReduce {
                    on: on.clone(),
                    rank,
                    rounds: on.zeros(&[CAPACITY / 1024])?,
                    peers: [view(0)?, view(1)?, view(2)?],
                    inboxes: inboxes.clone(),
                })
            })
            .collect()
    }

    /// Whether [`PeerAllReduce::sum`] takes a tensor of `len` elements.
    pub fn fits(len: usize) -> bool {
        len <= CAPACITY
    }

    /// Replaces `x` (contiguous, at most [`CAPACITY`] elements) with its
    /// sum over the ranks, queued on this end's stream; every other rank
    /// makes the same call.
    pub fn sum(&mut self, x: &mut Tensor<T>) -> tile::Result<()> {
        let shape = x.shape().to_vec();
        if !Self::fits(x.len()) {
            return Err(tile::Error::Shape(format!(
                "all_reduce_one_shot takes up to {CAPACITY} elements, not {shape:?}"
            )));
        }
        x.reshape_in_place(&[x.len()])?;
        let [first, second, third] = &mut self.peers;
        let run = all_reduce_one_shot::launch_with(
            &self.on,
            &[1024],
            x.len().div_ceil(1024) as u32,
            &mut *x,
            &self.inboxes[self.rank],
            first,
            second,
            third,
            &mut self.rounds,
            self.rank as i32,
        );
        x.reshape_in_place(&shape)?;
        run
    }
}

impl<T: Element> Drop for PeerAllReduce<T> {
    /// Waits for this end's kernels, which write into the peers' inboxes,
    /// before the inboxes can go.
    fn drop(&mut self) {
        self.on.synchronize().unwrap_or(());
    }
}
