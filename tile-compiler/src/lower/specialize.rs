//! Warp specialization on a persistent grid (the sm_90a `wgmma` path).
//!
//! When every `mma` of a kernel sits in one top-level pipelined loop and
//! accumulates into a tile the loop carries (a K-loop), the block splits
//! into two roles. The consumer warps run the kernel; a
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
//!
//! When one warpgroup computes a whole tile, two consumer warpgroups take
//! turns (CUTLASS's "ping-pong" schedule): each takes every other block of
//! the block's share, and skips the stages of the other's. The producer
//! fills the stages in block order, so one warpgroup's K-loop starts as the
//! other's ends, and runs while the other stores its tile: the epilogue no
//! longer stalls the tensor cores. Each stage is read by one warpgroup,
//! which hands the last one of its loop back as soon as the loop ends.

use super::emit::Lower;
use super::state::*;
use crate::ir::*;
use crate::plan::memory::SM_REGISTERS;
use crate::plan::specialize::PRODUCER_THREADS;
use crate::plan::specialize::TRANSPOSER_THREADS;
use crate::ptx::{EntryParam, RegClass};

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
    let start = entry_registers(consumers)?;
    let more = (start - producer) * PRODUCER_THREADS / consumers;
    Some(((start + more) / 8 * 8).min(240))
}

/// The even share of the register file each thread of a block with
/// `consumers` consumer threads and the producer starts with, when that is
/// short of the hardware's 255.
fn entry_registers(consumers: u32) -> Option<u32> {
    let threads = consumers + PRODUCER_THREADS;
    (threads * 255 > SM_REGISTERS).then_some(SM_REGISTERS / threads / 8 * 8)
}

/// Named barriers of two ping-pong consumers, each its own: the one they
/// synchronize on among themselves, and their turn's (see [`Consumer`]).
const PING_PONG_BARRIERS: u32 = 3;
const TURN_BARRIERS: u32 = 5;

impl Lower<'_> {
    /// Lowers `body` warp-specialized and persistent, when it can be: every
    /// `mma` in one top-level loop that pipelines with TMA, whose bounds and
    /// copied tiles' indices come from scalar ops before it. Returns false,
    /// having emitted nothing, when it cannot.
    pub(super) fn specialize(&mut self, body: &[Op]) -> bool {
        let Some(spec) = self.plan.specialization.clone() else {
            return false;
        };
        let OpKind::For { lo, hi, .. } = &body[spec.at].kind else {
            unreachable!("the specialized loop")
        };
        let plan = self.pipeline(spec.plan.var).expect("the specialized loop is pipelined");
        let slice: Vec<&Op> = spec.slice.iter().map(|&i| &body[i]).collect();
        let (consumer_groups, paired) = (spec.consumer_groups, spec.clustered);
        // The empty mbarriers follow the full ones, and the ready ones
        // those. Clustered blocks' consumers release each other's stages too.
        let releases = if paired { 2 } else { 1 } * self.func.num_warps;
        let mut barriers = vec![(StageBarrier::Empty, releases)];
        if plan.transposes() {
            barriers.push((StageBarrier::Ready, TRANSPOSER_THREADS));
        }

        let consumers = consumer_groups * self.func.num_warps * 32;
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
        // Ping-pong consumers: each its barriers, and the second one's scratch area
        // after the first's.
        let consumer = (consumer_groups > 1).then(|| {
            self.in_prologue(|l| {
                let [index, barrier, turn, other_turn] = [(); 4].map(|_| l.reg(RegClass::B32));
                let first = l.reg(RegClass::Pred);
                l.emit(format!("shr.u32 {index}, {}, 7;", l.tid));
                l.emit(format!("add.s32 {barrier}, {index}, {PING_PONG_BARRIERS};"));
                l.emit(format!("add.s32 {turn}, {index}, {TURN_BARRIERS};"));
                l.emit(format!("xor.b32 {other_turn}, {index}, 1;"));
                l.emit(format!("add.s32 {other_turn}, {other_turn}, {TURN_BARRIERS};"));
                l.emit(format!("setp.eq.u32 {first}, {index}, 0;"));
                let scratch = l.plan.consumer_scratch.map(|bytes| {
                    let s = l.reg(RegClass::B32);
                    l.emit(format!("mul.lo.u32 {s}, {index}, {bytes};"));
                    s
                });
                Consumer {
                    barrier,
                    scratch,
                    turn,
                    other_turn,
                    first,
                }
            })
        });
        let cluster = paired.then(|| self.cluster(plan.staged.len()));
        let roles = WarpRoles {
            plan: plan.clone(),
            consumers,
            consumer_groups,
            consumer,
            entry_registers: entry_registers(consumers),
            block: self.reg(RegClass::B32),
            grid,
            grid_param,
            previous: self.reg(RegClass::B32),
            lane0,
            cluster,
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
        let compute = |l: &mut Self| {
            l.cluster_peer();
            l.ops(body)
        };
        if consumer_groups == 1 {
            self.each_block(&block, compute);
        } else {
            self.each_turn(&block, &slice, &plan, (*lo, *hi), compute);
        }
        if paired {
            // The peer's producer waits for this block's last stage too.
            self.release_previous(&plan);
        }
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
        if paired {
            // Idle now: exited threads do not hold up the cluster barrier
            // at exit, where a warp's idle lanes would wait the kernel out
            // beside the lane that copies, and slow it.
            self.emit(format!("@{lane} exit;"));
        } else {
            self.emit(format!("@{lane} bra {exit};"));
        }
        // A stage is free when its empty barrier completed the phase before
        // the one being filled: at first, the (complete) phase before phase 0.
        let empty_parity = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {}, 0;", plan.write_stage));
        self.emit(format!("mov.b32 {empty_parity}, 1;"));
        self.producer_blocks(&block, &slice, |l| l.produce(&plan, *lo, *hi, &empty_parity));
        if plan.transposes() {
            self.emit(format!("bra {exit};"));
            self.emit(format!("{transposer}:"));
            let thread = self.reg(RegClass::B32);
            self.emit(format!("sub.s32 {thread}, {}, {};", self.tid, consumers + 32));
            let blocks = self.transpose_blocks(&plan, &thread);
            self.emit(format!("mov.b32 {}, 0;", plan.read_stage));
            self.emit(format!("mov.b32 {}, 0;", plan.phase));
            self.producer_blocks(&block, &slice, |l| l.transpose_stages(&plan, *lo, *hi, &blocks));
        }
        self.emit(format!("{exit}:"));
        if paired {
            self.cluster_barrier();
        }
        true
    }

    /// A producer role's work: for every block this one takes, the scalar
    /// ops `slice` (the loop's bounds and tile indices; in a cluster, the
    /// pair's other block's too), then `work`.
    fn producer_blocks(&mut self, block: &str, slice: &[&Op], work: impl FnOnce(&mut Self)) {
        self.each_block(block, |l| {
            if l.roles.as_ref().is_some_and(|r| r.cluster.is_some()) {
                let plan = l.roles.as_ref().expect("roles").plan.clone();
                l.cluster_tiles(&plan, slice);
            } else {
                for op in slice {
                    l.op(op);
                }
            }
            work(l);
        })
    }

    /// Runs `body` for every block of the launch this block takes: from
    /// `%ctaid.x` on, in steps of the blocks running (`%nctaid.x`).
    fn each_block(&mut self, block: &str, body: impl FnOnce(&mut Self)) {
        let (first, step) = (self.special("%ctaid.x"), self.special("%nctaid.x"));
        let grid = self.roles.as_ref().expect("roles").grid.clone();
        let (head, end, done) = (self.label("block"), self.label("blocks_done"), self.reg(RegClass::Pred));
        self.emit(format!("mov.b32 {block}, {first};"));
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.u32 {done}, {block}, {grid};"));
        self.emit(format!("@{done} bra {end};"));
        body(self);
        self.emit(format!("add.s32 {block}, {block}, {step};"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
    }

    /// Two ping-pong consumers' share of the blocks: consumer 1 (the second
    /// warpgroup) starts past consumer 0's first block, and after each of its
    /// blocks each consumer skips the next, the other's: it computes that
    /// block's loop bounds (the scalar ops `slice`) and moves its read stage
    /// on past the stages the producer fills for it.
    fn each_turn(
        &mut self,
        block: &str,
        slice: &[&Op],
        plan: &Pipeline,
        (lo, hi): (ValueId, ValueId),
        body: impl FnOnce(&mut Self),
    ) {
        let (first, step) = (self.special("%ctaid.x"), self.special("%nctaid.x"));
        let grid = self.roles.as_ref().expect("roles").grid.clone();
        let (head, end, done) = (self.label("block"), self.label("blocks_done"), self.reg(RegClass::Pred));
        let first_consumer = self.reg(RegClass::Pred);
        self.emit(format!("mov.b32 {block}, {first};"));
        self.emit(format!(
            "setp.lt.u32 {first_consumer}, {}, {};",
            self.tid,
            self.func.num_warps * 32
        ));
        self.emit(format!("@{first_consumer} bra {head};"));
        self.skip_block(block, slice, plan, (lo, hi));
        self.emit(format!("add.s32 {block}, {block}, {step};"));
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.u32 {done}, {block}, {grid};"));
        self.emit(format!("@{done} bra {end};"));
        let consumer = self
            .roles
            .as_ref()
            .and_then(|r| r.consumer.as_ref())
            .expect("two consumer_groups");
        let (turn, first) = (consumer.turn.clone(), consumer.first.clone());
        self.emit(format!("@!{first} bar.sync {turn}, {};", 2 * self.func.num_warps * 32));
        self.emit(format!("setp.ne.u32 {first}, 0, 0;"));
        body(self);
        self.emit(format!("add.s32 {block}, {block}, {step};"));
        self.skip_block(block, slice, plan, (lo, hi));
        self.emit(format!("add.s32 {block}, {block}, {step};"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
    }

    /// Moves the read stage (and its phase parity) on past the stages of
    /// block `block` (a register), if the launch has it: `hi - lo` of its loop.
    fn skip_block(&mut self, block: &str, slice: &[&Op], plan: &Pipeline, (lo, hi): (ValueId, ValueId)) {
        let (skipped, past) = (self.label("skipped"), self.reg(RegClass::Pred));
        let grid = self.roles.as_ref().expect("roles").grid.clone();
        self.emit(format!("setp.ge.u32 {past}, {block}, {grid};"));
        self.emit(format!("@{past} bra {skipped};"));
        for op in slice {
            self.op(op);
        }
        let (lo, hi) = (self.scalar(lo), self.copy(RegClass::B32, &self.scalar(hi)));
        let (stage, wraps) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
        self.emit(format!("sub.s32 {stage}, {hi}, {lo};"));
        self.emit(format!("max.s32 {stage}, {stage}, 0;"));
        self.emit(format!("add.s32 {stage}, {stage}, {};", plan.read_stage));
        self.emit(format!("div.u32 {wraps}, {stage}, {};", plan.stages));
        self.emit(format!("rem.u32 {}, {stage}, {};", plan.read_stage, plan.stages));
        self.emit(format!("and.b32 {wraps}, {wraps}, 1;"));
        self.emit(format!("xor.b32 {0}, {0}, {wraps};", plan.phase));
        self.emit(format!("{skipped}:"));
    }

    /// The producer's loop `lo..hi`: for each iteration, wait for the next
    /// stage to be free, then copy the iteration's tiles into it.
    fn produce(&mut self, plan: &Pipeline, lo: ValueId, hi: ValueId, empty_parity: &str) {
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

    /// Ping-pong consumers, after a K-loop: the last stage read goes back to the
    /// producer (it fills the other consumer's stages next), and the other
    /// consumer's turn comes if it has a next block (this one's plus the
    /// blocks running).
    pub(super) fn end_turn(&mut self) {
        let roles = self.roles.as_ref().expect("roles");
        let Some(consumer) = &roles.consumer else { return };
        let (plan, previous, other_turn) = (roles.plan.clone(), roles.previous.clone(), consumer.other_turn.clone());
        let (block, grid) = (roles.block.clone(), roles.grid.clone());
        self.release_previous(&plan);
        self.emit(format!("mov.b32 {previous}, -1;"));
        let (next, more) = (self.reg(RegClass::B32), self.reg(RegClass::Pred));
        let step = self.special("%nctaid.x");
        self.emit(format!("add.s32 {next}, {block}, {step};"));
        self.emit(format!("setp.lt.u32 {more}, {next}, {grid};"));
        self.emit(format!(
            "@{more} bar.arrive {other_turn}, {};",
            2 * self.func.num_warps * 32
        ));
    }

    /// Consumers: each warp's lane 0 arrives on the empty mbarrier of the
    /// stage `WarpRoles::previous` (-1: none), handing it back to the producer
    /// (in a cluster, to both blocks' producers).
    pub(super) fn release_previous(&mut self, plan: &Pipeline) {
        let roles = self.roles.as_ref().expect("roles");
        let (lane0, stage) = (roles.lane0.clone(), roles.previous.clone());
        let p = self.reg(RegClass::Pred);
        self.emit(format!("setp.ge.s32 {p}, {stage}, 0;"));
        self.emit(format!("and.pred {p}, {p}, {lane0};"));
        let bar = self.stage_barrier(plan, &stage, StageBarrier::Empty);
        let state = self.reg(RegClass::B64);
        self.emit(format!("@{p} mbarrier.arrive.shared::cta.b64 {state}, [{bar}];"));
        self.release_to_peer(&bar, &p);
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
                let start = SM_REGISTERS / (consumers + PRODUCER_THREADS) / 8 * 8;
                assert!((n - start) * consumers <= (start - producer) * PRODUCER_THREADS);
                assert!(n * consumers + producer * PRODUCER_THREADS <= SM_REGISTERS);
            }
        }
        // Two consumer warpgroups and a producer that only copies: CUTLASS's 232.
        assert_eq!(consumer_registers(256, producer_registers(false)), Some(232));
        assert_eq!(consumer_registers(128, producer_registers(false)), None);
    }
}
