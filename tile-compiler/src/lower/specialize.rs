//! Warp specialization on a persistent grid (the sm_90a `wgmma` path).
//!
//! When every `mma` of a kernel sits in one top-level pipelined loop, the
//! block splits into two roles. The consumer warps run the kernel; a
//! producer warpgroup after them runs only what the loop's copies need (the
//! scalars its bounds and tile indices come from), and one of its threads
//! issues the TMA copies of every stage. When the block's threads could not
//! all have 255 registers, the producer gives most of its own
//! (`setmaxnreg`) to the consumers, who hold the accumulators. The
//! consumers wait on each stage's "full" mbarrier and, once their
//! `wgmma`s on it are done, arrive on its "empty" one, which the
//! producer waits on before refilling it. Nothing else synchronizes the
//! roles, so copies run as far ahead as the stages allow: no block-wide
//! barrier per K-step. When a tf32 tile must be transposed before `wgmma`
//! can read it, the producer's other warps do that in each stage and the
//! consumers wait on the stage's "ready" mbarrier instead
//! ([`super::transpose`]).
//!
//! The grid is persistent: the launcher starts only as many blocks as fit
//! on the GPU at once and passes the block count it was asked for; each
//! block loops over its share of those blocks, `block_id(0)` taking each of
//! their indices in turn and `num_blocks(0)` their count. The stages run on
//! from one block's loop into the next, so the producer loads the next
//! tile's operands while the consumers store the last one.

use super::Lower;
use super::pipeline::Plan;
use super::tma::StageBarrier;
use super::transpose::TRANSPOSER_THREADS;
use crate::error::Result;
use crate::ir::*;
use crate::ptx::{EntryParam, RegClass};
use std::collections::HashSet;

/// Threads of the producer role: one warpgroup (the unit `setmaxnreg`
/// works on), of which one thread issues the copies.
pub const PRODUCER_THREADS: u32 = 128;

/// Registers per thread the producer keeps (`setmaxnreg.dec`), so that
/// the consumers can take more than an even share of the register file:
/// few when it only issues copies, more when its warps also transpose
/// tiles (each holds a 4 x 4 block and its blocks' addresses).
fn producer_registers(transposes: bool) -> u32 {
    if transposes { 96 } else { 40 }
}

/// Registers per consumer thread (`setmaxnreg.inc`) when the block's
/// threads could not all have the hardware's 255: the even share each
/// thread starts with (ptxas gives the kernel that many when it meets
/// `setmaxnreg`), plus the consumers' part of what the producer gives up,
/// at most 240 (CUTLASS's choice for two consumer warpgroups is 232).
/// `setmaxnreg.inc` waits until the block's pool holds the registers it
/// asks for, so asking for more than the producer released would hang.
/// `None` when every thread can have 255 (ptxas then ignores
/// `setmaxnreg`: no cap at entry).
fn consumer_registers(consumers: u32, producer: u32) -> Option<u32> {
    let threads = consumers + PRODUCER_THREADS;
    if threads * 255 <= REGISTER_FILE {
        return None;
    }
    let start = REGISTER_FILE / threads / 8 * 8;
    let more = (start - producer) * PRODUCER_THREADS / consumers;
    Some(((start + more) / 8 * 8).min(240))
}

/// 32-bit registers in an SM's register file.
const REGISTER_FILE: u32 = 65536;

/// A warp-specialized kernel's roles.
pub(super) struct Roles {
    /// The pipelined loop's plan, which both roles follow.
    pub(super) plan: Plan,
    /// Threads of the consumer role: the block's first ones.
    pub(super) consumers: u32,
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
    lane0: String,
}

/// `mma` ops in `ops`, nested bodies included.
fn mma_count(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| {
            usize::from(matches!(op.kind, OpKind::Mma { .. }))
                + op.kind.bodies().iter().map(|b| mma_count(b)).sum::<usize>()
        })
        .sum()
}

impl Lower<'_> {
    /// Lowers `body` warp-specialized and persistent, when it can be: every
    /// `mma` in one top-level loop that pipelines with TMA, whose bounds and
    /// copied tiles' indices come from scalar ops before it. Returns false,
    /// having emitted nothing, when it cannot.
    pub(super) fn specialize(&mut self, body: &[Op]) -> Result<bool> {
        let mmas = mma_count(body);
        let Some(at) = body.iter().position(|op| {
            let OpKind::For { body, .. } = &op.kind else {
                return false;
            };
            mmas > 0
                && mma_count(body) == mmas
                && body.iter().filter(|o| matches!(o.kind, OpKind::Mma { .. })).count() == mmas
        }) else {
            return Ok(false);
        };
        let OpKind::For {
            lo,
            hi,
            var,
            body: loop_body,
            ..
        } = &body[at].kind
        else {
            unreachable!("found as a loop")
        };
        let allocated = self.dynamic_shared;
        let plan = match self.pipeline_plan(*var, loop_body, true) {
            Some(plan) if plan.tma => plan,
            _ => {
                self.dynamic_shared = allocated;
                return Ok(false);
            }
        };
        let mut needed: HashSet<ValueId> = [*lo, *hi].into();
        needed.extend(
            plan.staged()
                .iter()
                .flat_map(|s| s.index.iter().copied())
                .filter(|&i| i != *var),
        );
        let Some(slice) = self.producer_slice(&body[..at], needed) else {
            self.dynamic_shared = allocated;
            return Ok(false);
        };
        // The empty mbarriers follow the full ones, and the ready ones those.
        let mut barriers = vec![(StageBarrier::Empty, self.func.num_warps)];
        if plan.transposes() {
            barriers.push((StageBarrier::Ready, TRANSPOSER_THREADS));
        }
        self.dynamic_shared += 8 * plan.stages * barriers.len();

        let consumers = self.func.num_warps * 32;
        let grid_param = EntryParam {
            name: format!("{}_grid", self.entry),
            ty: "u32",
        };
        let grid = self.reg(RegClass::B32);
        self.prologue
            .push(format!("ld.param.u32 {grid}, [{}];", grid_param.name));
        let lane0 = self.in_prologue(|l| {
            let (lane, p) = (l.reg(RegClass::B32), l.reg(RegClass::Pred));
            l.emit(format!("and.b32 {lane}, {}, 31;", l.tid));
            l.emit(format!("setp.eq.u32 {p}, {lane}, 0;"));
            p
        });
        let roles = Roles {
            plan: plan.clone(),
            consumers,
            block: self.reg(RegClass::B32),
            grid,
            grid_param,
            previous: self.reg(RegClass::B32),
            lane0,
        };
        let block = roles.block.clone();
        self.roles = Some(roles);
        // Each consumer warp releases a stage once; each transposing thread readies it once.
        self.tma_init(&plan, &barriers);
        let (producer, exit) = (self.label("producer"), self.label("exit"));
        let role = self.reg(RegClass::Pred);
        self.emit(format!("setp.ge.u32 {role}, {}, {consumers};", self.tid));
        self.emit(format!("@{role} bra {producer};"));

        // Consumers: the whole kernel, once per block of the launch.
        let producer_registers = producer_registers(plan.transposes());
        let registers = consumer_registers(consumers, producer_registers);
        if let Some(n) = registers {
            self.emit(format!("setmaxnreg.inc.sync.aligned.u32 {n};"));
        }
        self.emit(format!("mov.b32 {}, 0;", plan.read_stage));
        self.emit(format!("mov.b32 {}, 0;", plan.phase));
        self.emit(format!("mov.b32 {}, -1;", self.roles.as_ref().expect("roles").previous));
        self.each_block(&block, |l| l.ops(body))?;
        self.emit(format!("bra {exit};"));

        // Producer: its first thread fills the stages, as far ahead as they
        // allow; the other warps transpose the tiles that need it.
        self.emit(format!("{producer}:"));
        if registers.is_some() {
            self.emit(format!("setmaxnreg.dec.sync.aligned.u32 {producer_registers};"));
        }
        let transposer = self.label("transposer");
        if plan.transposes() {
            let p = self.reg(RegClass::Pred);
            self.emit(format!("setp.ge.u32 {p}, {}, {};", self.tid, consumers + 32));
            self.emit(format!("@{p} bra {transposer};"));
        }
        let lane = self.reg(RegClass::Pred);
        self.emit(format!("setp.ne.u32 {lane}, {}, {consumers};", self.tid));
        self.emit(format!("@{lane} bra {exit};"));
        // A stage is free when its empty barrier completed the phase before
        // the one being filled: at first, the (complete) phase before phase 0.
        let empty_parity = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {}, 0;", plan.write_stage));
        self.emit(format!("mov.b32 {empty_parity}, 1;"));
        self.producer_blocks(&block, &slice, |l| l.produce(&plan, *lo, *hi, &empty_parity))?;
        if plan.transposes() {
            self.emit(format!("bra {exit};"));
            self.emit(format!("{transposer}:"));
            let thread = self.reg(RegClass::B32);
            self.emit(format!("sub.s32 {thread}, {}, {};", self.tid, consumers + 32));
            let blocks = self.transpose_blocks(&plan, &thread);
            self.emit(format!("mov.b32 {}, 0;", plan.read_stage));
            self.emit(format!("mov.b32 {}, 0;", plan.phase));
            self.producer_blocks(&block, &slice, |l| l.transpose_stages(&plan, *lo, *hi, &blocks))?;
        }
        self.emit(format!("{exit}:"));
        Ok(true)
    }

    /// The ops of `before` (top-level, ahead of the loop) that the values
    /// `needed` depend on, in order; `None` when one of them is not a
    /// scalar op (the producer computes no tiles).
    fn producer_slice<'o>(&self, before: &'o [Op], mut needed: HashSet<ValueId>) -> Option<Vec<&'o Op>> {
        let mut slice = Vec::new();
        for op in before.iter().rev() {
            if !op.results.iter().any(|r| needed.contains(r)) {
                continue;
            }
            let scalar = op.results.iter().all(|&r| self.func.values[r].is_scalar());
            if !scalar || !op.kind.bodies().is_empty() {
                return None;
            }
            needed.extend(op.kind.operands());
            slice.push(op);
        }
        slice.reverse();
        Some(slice)
    }

    /// A producer role's work: for every block this one takes, the scalar
    /// ops `slice` (the loop's bounds and tile indices), then `work`.
    fn producer_blocks(&mut self, block: &str, slice: &[&Op], work: impl FnOnce(&mut Self)) -> Result<()> {
        self.each_block(block, |l| {
            for op in slice {
                l.op(op)?;
            }
            work(l);
            Ok(())
        })
    }

    /// Runs `body` for every block of the launch this block takes: from
    /// `%ctaid.x` on, in steps of the blocks running (`%nctaid.x`).
    fn each_block(&mut self, block: &str, body: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let (first, step) = (self.special("%ctaid.x"), self.special("%nctaid.x"));
        let grid = self.roles.as_ref().expect("roles").grid.clone();
        let (head, end, done) = (self.label("block"), self.label("blocks_done"), self.reg(RegClass::Pred));
        self.emit(format!("mov.b32 {block}, {first};"));
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.u32 {done}, {block}, {grid};"));
        self.emit(format!("@{done} bra {end};"));
        body(self)?;
        self.emit(format!("add.s32 {block}, {block}, {step};"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
        Ok(())
    }

    /// The producer's loop `lo..hi`: for each iteration, wait for the next
    /// stage to be free, then copy the iteration's tiles into it.
    fn produce(&mut self, plan: &Plan, lo: ValueId, hi: ValueId, empty_parity: &str) {
        let j = self.copy(RegClass::B32, &self.scalar(lo));
        let hi = self.scalar(hi);
        let (head, end, done) = (self.label("produce"), self.label("produced"), self.reg(RegClass::Pred));
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.s32 {done}, {j}, {hi};"));
        self.emit(format!("@{done} bra {end};"));
        let empty = self.stage_barrier(plan, &plan.write_stage, StageBarrier::Empty);
        self.wait_parity(&empty, empty_parity);
        self.tma_fill(plan, &j, &plan.write_stage);
        self.next_stage(plan, &plan.write_stage, Some(empty_parity));
        self.emit(format!("add.s32 {j}, {j}, 1;"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
    }

    /// Consumers: each warp's lane 0 arrives on the empty mbarrier of stage
    /// `stage` (a register; -1: none), handing it back to the producer.
    pub(super) fn release(&mut self, plan: &Plan, stage: &str) {
        let lane0 = self.roles.as_ref().expect("roles").lane0.clone();
        let p = self.reg(RegClass::Pred);
        self.emit(format!("setp.ge.s32 {p}, {stage}, 0;"));
        self.emit(format!("and.pred {p}, {p}, {lane0};"));
        let bar = self.stage_barrier(plan, stage, StageBarrier::Empty);
        let state = self.reg(RegClass::B64);
        self.emit(format!("@{p} mbarrier.arrive.shared::cta.b64 {state}, [{bar}];"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumers_take_no_more_registers_than_the_producer_gives_up() {
        for consumers in [256, 384] {
            for transposes in [false, true] {
                let producer = producer_registers(transposes);
                let n = consumer_registers(consumers, producer).expect("past 255 per thread");
                let start = REGISTER_FILE / (consumers + PRODUCER_THREADS) / 8 * 8;
                assert!((n - start) * consumers <= (start - producer) * PRODUCER_THREADS);
                assert!(n * consumers + producer * PRODUCER_THREADS <= REGISTER_FILE);
            }
        }
        // Two consumer warpgroups and a producer that only copies: CUTLASS's 232.
        assert_eq!(consumer_registers(256, producer_registers(false)), Some(232));
        assert_eq!(consumer_registers(128, producer_registers(false)), None);
    }
}
