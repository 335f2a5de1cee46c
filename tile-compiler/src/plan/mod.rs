//! Decisions taken before lowering, as passes over the laid-out IR: which
//! loops are software-pipelined and how deep ([`pipeline`]), whether the
//! kernel is warp-specialized and how its consumers share the tiles
//! ([`specialize`]), what each op needs of the scratch area ([`scratch`]),
//! where everything lives in shared memory ([`memory`]), where the
//! kernel waits for the previous kernel on its stream ([`dependency`]),
//! and where a cluster meets to gather tiles ([`gather`]). The result,
//! a [`Plan`], is what lowering follows: lowering emits, it does not
//! decide.

pub mod dependency;
pub mod gather;
pub mod memory;
pub mod pipeline;
pub mod scratch;
pub mod specialize;
pub mod streaming;
pub mod swizzle;
pub mod wgmma;

use crate::dtype::DType;
use crate::ir::{ConstVal, Func, Op, OpKind, ValueId};
use crate::layout::{Layout, Layouts, MmaPath};
use memory::ScratchAt;
use pipeline::LoopPlan;
use scratch::{Conversion, TmaStore};
use specialize::Specialization;
use std::collections::{HashMap, HashSet};

/// Which operand of an `mma` a value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    A,
    B,
}

impl Operand {
    /// The operand's K dimension: A is `[M, K]`, B is `[K, N]`.
    pub fn k_dim(self) -> usize {
        match self {
            Operand::A => 1,
            Operand::B => 0,
        }
    }
}

/// What every pass (and lowering) reads: one variant's function with its
/// layouts, and the facts about its values that do not depend on any
/// decision.
pub struct Context<'a> {
    pub func: &'a Func,
    pub layouts: &'a Layouts,
    /// The tensor parameters accessed with 16-byte vectors.
    pub vectorized: &'a [usize],
    pub path: MmaPath,
    /// The `num_stages` hint: how many stages `mma` pipelines get.
    pub num_stages: Option<u32>,
    /// Values that are `mma` operands, converted into fragment layouts.
    pub operands: HashMap<ValueId, Operand>,
    /// `b` operands of `mma`s that `wgmma` computes transposed (`b^T a^T`,
    /// [`Layout::wgmma_acc_swapped`]), reading `b` into registers.
    pub register_b: HashSet<ValueId>,
    /// Scalar constants, by value.
    pub consts: HashMap<ValueId, ConstVal>,
}

impl<'a> Context<'a> {
    pub fn new(
        func: &'a Func,
        layouts: &'a Layouts,
        vectorized: &'a [usize],
        path: MmaPath,
        num_stages: Option<u32>,
    ) -> Context<'a> {
        let mut cx = Context {
            func,
            layouts,
            vectorized,
            path,
            num_stages,
            operands: HashMap::new(),
            register_b: HashSet::new(),
            consts: HashMap::new(),
        };
        cx.find_consts(&func.body);
        cx.find_operands(&func.body);
        cx
    }

    pub fn layout(&self, v: ValueId) -> &'a Layout {
        &self.layouts[&v]
    }

    pub fn dtype(&self, v: ValueId) -> DType {
        self.func.values[v].dtype
    }

    fn find_consts(&mut self, ops: &[Op]) {
        for op in ops {
            if let (OpKind::Const(c), [r]) = (&op.kind, &op.results[..]) {
                self.consts.insert(*r, *c);
            }
            for body in op.kind.bodies() {
                self.find_consts(body);
            }
        }
    }

    /// Records which values are `mma` operands, and which `b` operands
    /// `wgmma` reads from registers (the layout pass gave their result the
    /// transposed accumulator layout).
    fn find_operands(&mut self, ops: &[Op]) {
        for op in ops {
            if let OpKind::Mma { a, b, .. } = op.kind {
                self.operands.insert(a, Operand::A);
                self.operands.insert(b, Operand::B);
                let (m, n) = (self.layout(a).shape[0], self.layout(b).shape[1]);
                let swapped = Layout::wgmma_acc_swapped(m, n, self.func.num_warps);
                if self.path == MmaPath::Wgmma && swapped.as_ref() == Some(self.layout(op.results[0])) {
                    self.register_b.insert(b);
                }
            }
            for body in op.kind.bodies() {
                self.find_operands(body);
            }
        }
    }
}

/// A pipelined loop's plan and where its stages and mbarriers lie in
/// dynamic shared memory.
#[derive(Clone)]
pub struct Placed {
    pub plan: LoopPlan,
    /// Offset of the stages.
    pub buffer: usize,
    /// Offset of the mbarriers (TMA), after the stages.
    pub barriers: usize,
}

/// Everything decided for one variant before it is lowered.
pub struct Plan {
    /// Warp specialization, when the kernel has it (its loop is in `loops` too).
    pub specialization: Option<Specialization>,
    /// The pipelined loops, by loop variable.
    pub loops: HashMap<ValueId, Placed>,
    /// Per loop (by variable), the loop-invariant `wgmma` A operands stored
    /// once before it, each with its offset in dynamic shared memory.
    pub invariant: HashMap<ValueId, Vec<(ValueId, usize)>>,
    /// How each layout conversion moves its tile, by result.
    pub conversions: HashMap<ValueId, Conversion>,
    /// The stores that go through TMA, by tensor and stored value.
    pub tma_stores: HashMap<(usize, ValueId), TmaStore>,
    /// `mma` results that update their accumulator's registers in place
    /// (result -> accumulator): a tile the loop carries and only that
    /// `mma` updates.
    pub in_place: HashMap<ValueId, ValueId>,
    /// How each `mma` runs on `wgmma` (the `wgmma` path), by result.
    pub products: HashMap<ValueId, wgmma::Product>,
    /// Why an `mma` cannot take the `wgmma` path: the variant is not built.
    pub unsupported: Option<wgmma::Unsupported>,
    /// The tensors the pipelines copy, sorted.
    pub pipelined: Vec<usize>,
    /// Where the scratch area lives, and with ping-pong consumers the bytes
    /// of each consumer's part.
    pub scratch_at: ScratchAt,
    pub consumer_scratch: Option<usize>,
    /// Static and dynamic shared memory of a block, and its threads.
    pub static_bytes: usize,
    pub dynamic_bytes: usize,
    pub threads: u32,
    /// The blocks per SM the entry declares (`.minnctapersm`), if any.
    pub min_blocks: Option<u32>,
    /// Two tiles per persistent block (the portable path): the bytes of
    /// dynamic shared memory each of its two halves owns.
    pub persistent: Option<usize>,
    /// The top-level op before which the kernel waits for the previous
    /// kernel's memory ([`dependency`]); persistent and warp-specialized
    /// kernels wait at their start.
    pub waits_at: usize,
    /// The `get`s only prefetches read, which may run before that wait
    /// and read through L2 alone ([`dependency`]).
    pub hint_reads: HashSet<ValueId>,
    /// Whether read-only tensors are read through coherent loads: the
    /// kernel waits for stores made while it runs ([`dependency`]).
    pub coherent_reads: bool,
    /// The buffers and meetings of the kernel's `cluster_gather`s ([`gather`]).
    pub gathers: gather::Gathers,
}
