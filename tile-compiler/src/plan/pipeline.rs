//! Software pipelining of loops that feed the tensor cores: which tiles a
//! loop's copies move into shared-memory stages, and how many stages.
//!
//! In a `for` loop whose body loads tiles only to hand them to `mma`, the
//! loads become asynchronous copies (`cp.async`, or TMA on the `wgmma`
//! path) straight from global into a ring of stages, issued ahead of the
//! iteration that reads them. This pass decides which loads qualify and
//! how deep the ring is; `lower/pipeline.rs` emits the copies.

use super::{Context, Operand};
use crate::ir::*;
use crate::layout::{Layout, MmaPath};
use crate::plan::swizzle::Swizzle;

/// Shared memory a pipeline's stages may take (dynamic shared memory: the
/// launcher raises the kernel's limit past the 48 KiB default). `wgmma`
/// keeps no operand fragments in registers, so its blocks are fewer per SM
/// and take deeper pipelines.
const PIPELINE_BYTES: usize = 96 * 1024;
const WGMMA_PIPELINE_BYTES: usize = 192 * 1024;
/// Half of an SM's 227 KiB of shared memory, less room for a block's scratch.
const HALF_SM_BYTES: usize = 110 * 1024;

/// Alignment of every staged tile: the 1024-byte period of the 128-byte
/// swizzle, so that the stored pattern is the hardware's (`wgmma`, TMA).
pub const STAGED_TILE_ALIGN: usize = 1024;

/// Elements per 16-byte chunk (f32): the side of the blocks the producer
/// transposes tiles in (`lower/transpose.rs`).
pub const TRANSPOSE_BLOCK: usize = 4;

/// Whether a tile of load shape `shape` (`eb` bytes per element) can be
/// transposed in blocks of [`TRANSPOSE_BLOCK`] 16-byte rows: f32, its
/// stored rows (all dimensions but the last) and columns multiples of 4.
pub fn transposable(shape: &[usize], eb: usize) -> bool {
    let rank = shape.len();
    let rows: usize = shape[..rank - 1].iter().product();
    eb == 16 / TRANSPOSE_BLOCK
        && rows.is_multiple_of(TRANSPOSE_BLOCK)
        && shape[rank - 1].is_multiple_of(TRANSPOSE_BLOCK)
}

/// One tile the pipeline copies each iteration.
#[derive(Clone)]
pub struct Staged {
    /// The `Load` it replaces and the conversion into a fragment layout it feeds.
    pub load: ValueId,
    /// The transposes and reshapes between the load and the conversion.
    pub chain: Vec<ValueId>,
    pub convert: ValueId,
    pub tensor: usize,
    pub index: Vec<ValueId>,
    /// Operand dimension the stored rows run along, and the operand role.
    pub contiguous: usize,
    pub role: Operand,
    /// Offset of this tile within a stage.
    pub offset: usize,
    /// Whether the producer transposes the tile in place into K-major
    /// rows before `wgmma` reads it: a tf32 operand loaded M- or N-major,
    /// which tf32 `wgmma` cannot read (warp specialization,
    /// `lower/transpose.rs`).
    pub transposed: bool,
    /// Whether its rows (K) are stored interleaved ([`interleaved_row`]): a
    /// tf32 tile the consumers read into registers (`b` of a product
    /// `wgmma` computes transposed), whose rows a multiple of 8.
    pub interleaved: bool,
    /// Bytes per element, and of the whole tile.
    pub eb: usize,
    pub bytes: usize,
}

impl Staged {
    /// How the tile (of load shape `shape`) lies in its stage: rows along
    /// the last dimension, the others (at most one longer than 1) stacked.
    pub fn swizzle(&self, shape: &[usize]) -> Swizzle {
        let rank = shape.len();
        Swizzle {
            rows: shape[..rank - 1].iter().product(),
            row_bytes: shape[rank - 1] * self.eb,
        }
    }
}

/// A pipelined loop: its staged tiles and the depth of its ring of stages.
#[derive(Clone)]
pub struct LoopPlan {
    /// The loop variable, which the copies' tile indices replace.
    pub var: ValueId,
    pub staged: Vec<Staged>,
    pub stages: usize,
    /// Copies by TMA (one thread, counted on per-stage mbarriers) instead
    /// of `cp.async` by every thread.
    pub tma: bool,
    /// How many iterations ahead the copies run: `stages - 1`, or with
    /// `wgmma` `stages - 2`, so that the stage the previous iteration's
    /// still-running `wgmma` reads is not overwritten.
    pub ahead: usize,
    /// `wgmma` groups left running at the end of an iteration (0 or 1).
    pub wgmma_in_flight: usize,
    /// Bytes of one stage.
    pub stage_bytes: usize,
    /// Whether fewer stages may be taken where the block's shared memory
    /// would pass what it should take (see `memory`): portable, or `wgmma`
    /// on one warpgroup that is not warp-specialized.
    pub flexible: bool,
}

impl LoopPlan {
    /// Whether the producer transposes a staged tile before `wgmma` reads it.
    pub fn transposes(&self) -> bool {
        self.staged.iter().any(|s| s.transposed)
    }

    /// Bytes the staged tiles of one iteration hold.
    pub fn staged_bytes(&self) -> usize {
        self.staged.iter().map(|s| s.bytes).sum()
    }
}

/// Where row (K index) bit `b` of an interleaved tile is stored: rows are
/// stored in the order (k / 8, k % 4, k / 4 % 2), row k at
/// 8 (k / 8) + 2 (k % 4) + k / 4 % 2. A warp reading `wgmma`'s A fragment
/// (four consecutive rows, eight consecutive columns) then finds its rows
/// 2 apart, which the 128-byte swizzle puts on distinct banks; stored in
/// order, rows 2j and 2j + 1 share them (2-way conflicts).
pub fn interleaved_row(b: u32) -> u32 {
    match b {
        0 => 1,
        1 => 2,
        2 => 0,
        b => b,
    }
}

/// How many times `ops` (nested bodies included) use `v`.
pub fn uses(ops: &[Op], v: ValueId) -> usize {
    ops.iter()
        .map(|op| {
            op.kind.operands().iter().filter(|&&x| x == v).count()
                + op.kind.bodies().iter().map(|b| uses(b, v)).sum::<usize>()
        })
        .sum()
}

/// The pipeline of loop `body` (loop variable `var`), if it has one: its
/// tiles that can be pipelined are loads of vector-accessed tensors padded
/// with zero, indexed by the loop variable and values from outside the
/// loop, used only (through a transpose) by a conversion into an `mma`
/// fragment layout. With `transposing` (a warp-specialized producer), tf32
/// tiles that `wgmma` cannot read as loaded are transposed in their stage.
/// `consumer_groups`: the consumer warpgroups taking turns on the stages (ping-pong
/// consumers, see `specialize`). The stages take at most `stage_budget`
/// bytes, when given.
pub fn plan_loop(
    cx: &Context,
    (var, body): (ValueId, &[Op]),
    (transposing, consumer_groups): (bool, u32),
    stage_budget: Option<usize>,
) -> Option<LoopPlan> {
    let inside = defined_in(body);
    let def = |v: ValueId| body.iter().find(|op| op.results.first() == Some(&v));
    let mut staged = Vec::new();
    let mut offset = 0;
    for op in body {
        let OpKind::Convert(src) = op.kind else { continue };
        let convert = op.results[0];
        let Some(&role) = cx.operands.get(&convert) else {
            continue;
        };
        // Through transposes and reshapes (layout relabelings) to the load.
        let mut chain = vec![src];
        while let Some(OpKind::Permute { arg, .. } | OpKind::Reshape(arg)) =
            def(chain[chain.len() - 1]).map(|o| &o.kind)
        {
            chain.push(*arg);
        }
        let load = chain[chain.len() - 1];
        let Some(Op {
            kind: OpKind::Load { tensor, index, pad },
            ..
        }) = def(load)
        else {
            continue;
        };
        let eb = cx.func.tensor(*tensor).dtype.bytes();
        let zero_pad = cx
            .consts
            .get(pad)
            .is_some_and(|c| matches!(c, ConstVal::Float(x) if *x == 0.0) || matches!(c, ConstVal::Int(0)));
        // Indexed by the loop along exactly one dimension, the others fixed.
        let indexable =
            index.iter().filter(|&&i| i == var).count() == 1 && index.iter().all(|&i| i == var || !inside.contains(&i));
        let la: &Layout = cx.layout(src);
        let contiguous = (0..2).find(|&d| la.contiguous_run(d) >= 16 / eb);
        // `wgmma` reads the stage itself: the conversion must feed one `mma` alone.
        let single_use =
            chain.iter().all(|&v| uses(body, v) == 1) && (cx.path == MmaPath::Portable || uses(body, convert) == 1);
        let load_shape = &cx.layout(load).shape;
        let two_d = load_shape[..load_shape.len() - 1].iter().filter(|&&n| n > 1).count() <= 1;
        let vectors = cx.vectorized.contains(tensor);
        let (Some(contiguous), true, true, true, true, true, true) =
            (contiguous, eb != 1, vectors, zero_pad, indexable, single_use, two_d)
        else {
            continue;
        };
        let bytes = cx.layout(load).shape.iter().product::<usize>() * eb;
        let transposed = transposing
            && contiguous != role.k_dim()
            && !cx.register_b.contains(&convert)
            && transposable(&cx.layout(load).shape, eb);
        let rank = load_shape.len();
        let interleaved = cx.path == MmaPath::Wgmma
            && cx.register_b.contains(&convert)
            && eb == 4
            && rank >= 2
            && load_shape[..rank - 2].iter().all(|&n| n == 1)
            && load_shape[rank - 2].is_multiple_of(8);
        staged.push(Staged {
            load,
            chain,
            convert,
            tensor: *tensor,
            index: index.clone(),
            contiguous,
            role,
            offset,
            transposed,
            interleaved,
            eb,
            bytes,
        });
        offset += bytes.next_multiple_of(STAGED_TILE_ALIGN);
    }
    let budget = match cx.path {
        MmaPath::Portable => PIPELINE_BYTES,
        MmaPath::Wgmma => WGMMA_PIPELINE_BYTES,
    }
    .min(stage_budget.unwrap_or(usize::MAX));
    if staged.is_empty() || (offset * 2 > budget && cx.num_stages.is_none()) {
        return None;
    }
    // `mma.sync` keeps four stages. `wgmma` up to six (two of them being
    // read: the running K-step's and the previous one's, still in
    // flight). One consumer warpgroup takes no more than lets two blocks
    // share an SM while three stages fit in half of it, so that one
    // block's epilogue overlaps the other's K-loop. So does a kernel that
    // is not warp-specialized (`!transposing`), whatever its warps: every
    // warp computes, and two blocks overlap each other's products with
    // their other work (attention). Two consumer warpgroups of a
    // specialized kernel (splitting a tile, or taking turns) and the
    // producer's hold a whole SM's registers: they take the stages.
    let shares_sm = consumer_groups == 1 && (cx.func.num_warps == 4 || !transposing);
    let stages = match (cx.num_stages, cx.path) {
        (Some(n), _) => n as usize,
        (None, MmaPath::Portable) => (budget / offset).clamp(2, 4),
        (None, MmaPath::Wgmma) if shares_sm && 3 * offset <= HALF_SM_BYTES => {
            (HALF_SM_BYTES.min(budget) / offset).clamp(2, 6)
        }
        (None, MmaPath::Wgmma) => (budget / offset).clamp(2, 6),
    };
    let overlap_wgmma = cx.path == MmaPath::Wgmma && stages >= 3;
    Some(LoopPlan {
        var,
        staged,
        stages,
        tma: cx.path == MmaPath::Wgmma,
        ahead: if overlap_wgmma { stages - 2 } else { stages - 1 },
        wgmma_in_flight: usize::from(overlap_wgmma),
        stage_bytes: offset,
        flexible: cx.path == MmaPath::Portable || (shares_sm && !transposing),
    })
}
