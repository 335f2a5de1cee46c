//! Tensor Memory Accelerator copies (sm_90a): in a pipelined loop of the
//! `wgmma` path, one thread moves each operand tile from global memory into
//! its stage with `cp.async.bulk.tensor`, described by a tensor map that the
//! runtime encodes at launch. The hardware writes the stage in the same
//! swizzled panels the descriptors read ([`super::tensor_core::Swizzle`]),
//! fills out-of-bounds elements with zeros, and counts the bytes on the
//! stage's mbarrier, which every thread waits on before its `wgmma`s.

use super::Lower;
use super::pipeline::Plan;
use crate::ptx::{EntryParam, RegClass, TENSOR_MAP};

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

/// A tensor map the runtime encodes at launch, passed as a kernel parameter
/// after the regular ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMap {
    /// The tensor's index among the kernel's parameters.
    pub param: usize,
    /// The box one copy moves, innermost dimension first, in elements.
    pub box_dims: Vec<u32>,
    /// Shared-memory swizzle span in bytes (32, 64 or 128): the box's inner extent.
    pub swizzle_bytes: u32,
    /// The rows (second-innermost dimension, a multiple of 8) are split
    /// into (k / 4 % 2, k % 4, k / 8), innermost first, so that the box
    /// stores them interleaved ([`super::pipeline::interleaved_row`]).
    pub interleaved_rows: bool,
}

impl Lower<'_> {
    /// The generic address of the tensor-map parameter for `map`, declared on first use.
    fn tensor_map(&mut self, map: TensorMap) -> String {
        if let Some(i) = self.tensor_maps.iter().position(|(m, _)| *m == map) {
            return self.tensor_maps[i].1.clone();
        }
        let name = format!("{}_tmap{}", self.entry, self.tensor_maps.len());
        let reg = self.in_prologue(|l| {
            let r = l.reg(RegClass::B64);
            l.emit(format!("mov.u64 {r}, {name};"));
            l.emit(format!("cvta.param.u64 {r}, {r};"));
            r
        });
        self.tma_params.push(EntryParam { name, ty: TENSOR_MAP });
        self.tensor_maps.push((map, reg.clone()));
        reg
    }

    /// The shared address of stage `stage`'s mbarrier of kind `kind`: one
    /// array of `plan.stages` per kind, in [`StageBarrier`]'s order.
    pub(super) fn stage_barrier(&mut self, plan: &Plan, stage: &str, kind: StageBarrier) -> String {
        let offset = plan.barriers + 8 * plan.stages * kind as usize;
        self.dynamic_address(offset, Some((stage, 8)))
    }

    /// Thread 0 sets up each stage's mbarriers: the full one expects one
    /// arrival (its own, with the byte count) per fill, and each other kind
    /// in `others` the given number; then the block synchronizes, so that
    /// no thread uses a barrier before it exists.
    pub(super) fn tma_init(&mut self, plan: &Plan, others: &[(StageBarrier, u32)]) {
        let (skip, leader) = (self.label("tma_init"), self.reg(RegClass::Pred));
        self.emit(format!("setp.ne.u32 {leader}, {}, 0;", self.tid));
        self.emit(format!("@{leader} bra {skip};"));
        for s in 0..plan.stages {
            let stage = format!("{s}");
            let bar = self.stage_barrier(plan, &stage, StageBarrier::Full);
            self.emit(format!("mbarrier.init.shared::cta.b64 [{bar}], 1;"));
            for &(kind, arrivals) in others {
                let bar = self.stage_barrier(plan, &stage, kind);
                self.emit(format!("mbarrier.init.shared::cta.b64 [{bar}], {arrivals};"));
            }
        }
        self.emit("fence.mbarrier_init.release.cluster;");
        self.emit(format!("{skip}:"));
        self.emit("bar.sync 0;");
    }

    /// Thread 0 starts the copies of iteration `j`'s tiles into `stage`,
    /// unless `j` is past the loop's end (`hi`): no copy outlives the loop.
    pub(super) fn tma_issue(&mut self, plan: &Plan, j: &str, hi: &str, stage: &str) {
        let skip = self.label("tma_skip");
        let (not_leader, past) = (self.reg(RegClass::Pred), self.reg(RegClass::Pred));
        self.emit(format!("setp.ne.u32 {not_leader}, {}, 0;", self.tid));
        self.emit(format!("setp.ge.s32 {past}, {j}, {hi};"));
        self.emit(format!("or.pred {not_leader}, {not_leader}, {past};"));
        self.emit(format!("@{not_leader} bra {skip};"));
        self.tma_fill(plan, j, stage);
        self.emit(format!("{skip}:"));
    }

    /// Copies iteration `j`'s tiles into `stage` (the calling thread alone),
    /// announcing their bytes to the stage's full mbarrier.
    pub(super) fn tma_fill(&mut self, plan: &Plan, j: &str, stage: &str) {
        let bar = self.stage_barrier(plan, stage, StageBarrier::Full);
        let state = self.reg(RegClass::B64);
        self.emit(format!(
            "mbarrier.arrive.expect_tx.shared::cta.b64 {state}, [{bar}], {};",
            plan.staged_bytes()
        ));
        let base = self.stage_base(plan, stage);
        for s in plan.staged() {
            let shape = self.layout(s.load).shape.clone();
            let rank = shape.len();
            let line = s.swizzle(&shape).line_bytes();
            let inner = line / s.eb;
            let rows: usize = shape[..rank - 1].iter().product();
            let mut box_dims = vec![inner as u32];
            if s.interleaved {
                box_dims.extend([2, 4, shape[rank - 2] as u32 / 8]);
                box_dims.extend(shape[..rank - 2].iter().rev().map(|&n| n as u32));
            } else {
                box_dims.extend(shape[..rank - 1].iter().rev().map(|&n| n as u32));
            }
            let map = self.tensor_map(TensorMap {
                param: s.tensor,
                box_dims,
                swizzle_bytes: line as u32,
                interleaved_rows: s.interleaved,
            });
            // Element coordinates of the tile, innermost first; interleaved
            // rows count in groups of 8.
            let mut coords: Vec<String> = Vec::new();
            for d in (0..rank).rev() {
                let index = if s.index[d] == plan.var {
                    j.to_string()
                } else {
                    self.scalar(s.index[d])
                };
                let c = self.reg(RegClass::B32);
                if s.interleaved && d == rank - 2 {
                    self.emit(format!("mul.lo.s32 {c}, {index}, {};", shape[d] / 8));
                    let zero = self.reg(RegClass::B32);
                    self.emit(format!("mov.b32 {zero}, 0;"));
                    coords.extend([zero.clone(), zero]);
                } else {
                    self.emit(format!("mul.lo.s32 {c}, {index}, {};", shape[d]));
                }
                coords.push(c);
            }
            for panel in 0..shape[rank - 1] / inner {
                let dst = self.reg(RegClass::B32);
                self.emit(format!("add.s32 {dst}, {base}, {};", s.offset + panel * rows * line));
                let mut at = coords.clone();
                if panel > 0 {
                    let c = self.reg(RegClass::B32);
                    self.emit(format!("add.s32 {c}, {}, {};", coords[0], panel * inner));
                    at[0] = c;
                }
                self.emit(format!(
                    "cp.async.bulk.tensor.{}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{dst}], [{map}, {{{}}}], [{bar}];",
                    at.len(),
                    at.join(", ")
                ));
            }
        }
    }

    /// Waits until the read stage's mbarrier of kind `kind` completes phase
    /// `plan.phase` (which flips each time the stages wrap): its copies
    /// have landed (full), or its transposed tiles are written (ready).
    pub(super) fn tma_wait(&mut self, plan: &Plan, kind: StageBarrier) {
        let bar = self.stage_barrier(plan, &plan.read_stage, kind);
        self.wait_parity(&bar, &plan.phase);
    }

    /// Spins until the mbarrier at `bar` completes the phase of parity `parity`.
    pub(super) fn wait_parity(&mut self, bar: &str, parity: &str) {
        let (wait, done) = (self.label("mbar_wait"), self.reg(RegClass::Pred));
        self.emit(format!("{wait}:"));
        self.emit(format!(
            "mbarrier.try_wait.parity.shared::cta.b64 {done}, [{bar}], {parity};"
        ));
        self.emit(format!("@!{done} bra {wait};"));
    }
}
