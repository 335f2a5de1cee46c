//! The lowering's state types: what the emitter holds besides registers
//! per value (a tensor's parameter registers, a pipeline's stage
//! registers, warp specialization's roles, a persistent block's halves, a
//! cluster's ranks, a sort network's elements), shared by the op families
//! that emit with them.

use crate::ir::ValueId;
use crate::plan::pipeline::LoopPlan;
use crate::ptx::EntryParam;

#[derive(Clone)]
pub(super) struct TensorRegs {
    pub(super) ptr: String,
    pub(super) dims: Vec<String>,
    pub(super) strides: Vec<String>,
}

/// A `cluster_gather` stored, to read back once the cluster has met: its
/// result's registers, and the buffer's address in this block.
pub(super) struct Gathered {
    pub(super) result: ValueId,
    pub(super) regs: Vec<String>,
    pub(super) buffer: String,
}

/// Per-dimension thread coordinate registers; `None` is a constant 0.
pub(super) type Coords = Vec<Option<String>>;

/// One global access: `width` consecutive registers from `first` at `[addr+imm]`.
pub(super) struct Access {
    pub(super) first: usize,
    pub(super) width: usize,
    pub(super) addr: String,
    pub(super) imm: usize,
    pub(super) pred: String,
}

/// A pipelined loop as lowering runs it: its plan, where its stages and
/// mbarriers lie in dynamic shared memory, and the registers that track
/// the stages.
#[derive(Clone)]
pub(super) struct Pipeline {
    pub(super) plan: LoopPlan,
    /// The mbarriers' offset in dynamic shared memory (TMA).
    pub(super) barriers: usize,
    /// The parity of the read stage's current mbarrier phase (TMA).
    pub(super) phase: String,
    /// Offset of the stages in dynamic shared memory.
    pub(super) buffer: usize,
    pub(super) read_stage: String,
    pub(super) write_stage: String,
    /// Each staged tile's `cp.async` copies (set before the loop).
    pub(super) streams: Vec<CopyStream>,
}

impl std::ops::Deref for Pipeline {
    type Target = LoopPlan;

    fn deref(&self) -> &LoopPlan {
        &self.plan
    }
}

/// One thread's `cp.async` copies of a staged tile, carried from one
/// iteration to the next: the first copy's global address and its
/// position along the looped dimension move by a tile per iteration, every
/// other copy is a loop-invariant step from the one before it, and the
/// bounds along the dimensions the loop does not move are checked once,
/// before the loop. (Recomputing each address from the tile index took
/// twelve instructions a copy.)
#[derive(Clone)]
pub(super) struct CopyStream {
    /// Global address of the first copy of the next tile to issue (b64).
    pub(super) next: String,
    /// Bytes from one tile to the next (b64).
    pub(super) step: String,
    /// The first copy's position along the looped dimension less that
    /// dimension's size (b32): a copy `along` further is inside while
    /// `below + along < 0`.
    pub(super) below: String,
    /// The tile's size along the looped dimension: what `below` moves by.
    pub(super) extent: usize,
    pub(super) copies: Vec<StreamCopy>,
}

#[derive(Clone)]
pub(super) struct StreamCopy {
    /// What takes the previous copy's row address to this one's (b64), if
    /// the row differs.
    pub(super) advance: Option<String>,
    /// Bytes past the row address (the contiguous last dimension).
    pub(super) imm: usize,
    /// Position along the looped dimension past the first copy's.
    pub(super) along: usize,
    /// Inside every dimension but the looped one (a predicate), where any.
    pub(super) inside: Option<String>,
    /// Where it lands within the tile: a register and an immediate.
    pub(super) dst: (String, usize),
}

/// The mbarriers of a pipeline stage, in the order their arrays follow one
/// another in shared memory.
#[derive(Clone, Copy)]
pub(super) enum StageBarrier {
    /// Counts the bytes of the stage's TMA copies.
    Full,
    /// Warp specialization: counts the consumer warps done reading the stage.
    Empty,
    /// Warp specialization with transposed tiles: counts the producer
    /// threads done writing them (see [`super::transpose`]).
    Ready,
}

pub use tile_spec::TensorMap;

/// Named barrier of the consumers when they are one warpgroup group (0 is the
/// block's; [`super::transpose`] takes 2).
pub(super) const CONSUMER_BARRIER: u32 = 1;

/// One of two ping-pong consumer warpgroups, as its threads see it (registers).
pub(super) struct Consumer {
    /// The named barrier its threads synchronize on.
    pub(super) barrier: String,
    /// The offset of its scratch area (`None`: the kernel has none).
    pub(super) scratch: Option<String>,
    /// Its turn's named barrier, which it waits on before a K-loop and
    /// the other consumer arrives on after the one before. A consumer's K-loop
    /// thus starts once the other's has waited for its last stage: the
    /// stage mbarriers' phases, told apart by parity alone, are then at
    /// most one behind the one it waits for.
    pub(super) turn: String,
    /// The other consumer's turn barrier.
    pub(super) other_turn: String,
    /// Whether its next K-loop is the first of the (persistent) block's,
    /// which no turn precedes: only the first consumer's, at the start.
    pub(super) first: String,
}

/// A warp-specialized kernel's roles.
pub(super) struct WarpRoles {
    /// The pipelined loop, which both roles follow.
    pub(super) plan: Pipeline,
    /// Threads of the consumer role: the block's first ones.
    pub(super) consumers: u32,
    /// Consumer warpgroups taking turns (ping-pong consumers: 1 or 2), and
    /// this thread's consumer when there are two.
    pub(super) consumer_groups: u32,
    pub(super) consumer: Option<Consumer>,
    /// Each thread's registers at entry when the roles then move some
    /// (`setmaxnreg`): the even share.
    pub(super) entry_registers: Option<u32>,
    /// The block being computed (what `block_id(0)` reads).
    pub(super) block: String,
    /// Blocks the kernel was launched with (what `num_blocks(0)` reads),
    /// and the parameter that carries it.
    pub(super) grid: String,
    pub(super) grid_param: EntryParam,
    /// Consumers: the stage the previous iteration read (in this block's
    /// loop or the last one's), released once its `wgmma`s are done (-1: none).
    pub(super) previous: String,
    /// Whether this thread is its warp's lane 0 (which releases stages).
    pub(super) lane0: String,
    /// Set when the blocks of a 2-CTA cluster share operand tiles ([`super::cluster`]).
    pub(super) cluster: Option<Cluster>,
}

/// The registers of a persistent block of two tiles (two halves).
pub(super) struct Persistent {
    /// This thread's half's named barrier.
    pub(super) barrier: String,
    /// Where its half of dynamic shared memory starts.
    pub(super) offset: String,
    /// The block this half computes now (`block_id(0)`).
    pub(super) block: String,
    /// The block count the launch asked for (`num_blocks(0)`).
    pub(super) grid: String,
    pub(super) grid_param: EntryParam,
}

/// Blocks in a cluster.
pub const CLUSTER_BLOCKS: u32 = 2;

/// A clustered kernel's registers.
pub(super) struct Cluster {
    /// This block's rank in its cluster (0 or 1).
    pub(super) rank: String,
    /// Consumers: the block whose empty mbarriers also count this block's
    /// releases of the stages of the block being computed: the other one
    /// of the cluster, or this one when the pair's other block is past the
    /// launch's end.
    pub(super) peer: String,
    /// The same for the stage in `WarpRoles::previous`.
    pub(super) previous_peer: String,
    /// Producer: per staged tile, whether the two blocks of the pair being
    /// filled load it alike (each then copies half, multicast to both).
    pub(super) shared: Vec<String>,
    /// The multicast's destination blocks: both.
    pub(super) mask: String,
}

/// The elements of a sort network: each one's value (in the key type) and
/// position along the axis, in the argument's registers.
#[derive(Clone)]
pub(super) struct SortLines {
    pub(super) vals: Vec<String>,
    pub(super) pos: Vec<String>,
}
