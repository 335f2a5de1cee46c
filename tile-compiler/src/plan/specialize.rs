//! Warp specialization on a persistent grid (the sm_90a `wgmma` path):
//! whether a kernel gets producer and consumer warpgroups, whether two
//! consumer warpgroups take turns on the tiles (ping-pong consumers), and
//! whether blocks run in 2-CTA clusters that share operand tiles by TMA
//! multicast. `lower/specialize.rs` emits what is decided here.
//!
//! A kernel is specialized when every `mma` sits in one top-level
//! pipelined loop and accumulates into a tile the loop carries (a
//! K-loop), and the loop's bounds and copied tiles' indices come from
//! scalar ops before it (what the producer computes).

use super::Context;
use super::pipeline::{LoopPlan, plan_loop};
use crate::ir::*;
use std::collections::HashSet;

/// Threads of the producer role: one warpgroup (the unit `setmaxnreg`
/// works on), of which one thread issues the copies.
pub const PRODUCER_THREADS: u32 = 128;

/// Producer threads that transpose: all but the first warp's.
pub const TRANSPOSER_THREADS: u32 = PRODUCER_THREADS - 32;

/// Registers per consumer thread that register tiles may take for two
/// ping-pong consumers, of the 232 each thread then has (the rest hold
/// addresses, descriptors and temporaries): in the K-loop, the
/// accumulators and register-sourced operands (a 64x256 tf32 tile
/// computed transposed, 128 + 64, spills); in the epilogue, the
/// accumulators and the tiles it loads (a 64x256 tile and its bias,
/// 128 + 64, fits; a 128x128 one and its residual, 128 + 128 + 32, spills).
const CONSUMER_LOOP_REGISTERS: usize = 160;
const CONSUMER_EPILOGUE_REGISTERS: usize = 192;

/// A warp-specialized kernel's roles, as decided.
#[derive(Clone)]
pub struct Specialization {
    /// The pipelined K-loop: its index in the top-level body, and its plan,
    /// which both roles follow.
    pub at: usize,
    pub plan: LoopPlan,
    /// Consumer warpgroups taking turns on the tiles (ping-pong): 1 or 2.
    pub consumer_groups: u32,
    /// The top-level ops before the loop that the producer runs for each
    /// block (the loop's bounds and the copied tiles' indices), by index.
    pub slice: Vec<usize>,
    /// Blocks run in 2-CTA clusters sharing operand tiles (TMA multicast).
    pub clustered: bool,
}

impl Specialization {
    /// The kernel of `cx` warp-specialized, when it can be; two consumer
    /// consumers only where `ping_pong` allows, clusters only where `clusters`
    /// does. The loop's stages take at most `stage_budget` bytes.
    pub fn of(
        cx: &Context,
        (ping_pong, clusters): (bool, bool),
        stage_budget: Option<usize>,
    ) -> Option<Specialization> {
        let body = &cx.func.body;
        let count = mmas(body).len();
        let at = body.iter().position(|op| {
            let OpKind::For { body, .. } = &op.kind else {
                return false;
            };
            count > 0
                && mmas(body).len() == count
                && body.iter().filter(|o| matches!(o.kind, OpKind::Mma { .. })).count() == count
        })?;
        let OpKind::For {
            lo,
            hi,
            var,
            args,
            body: loop_body,
            ..
        } = &body[at].kind
        else {
            unreachable!("found as a loop")
        };
        // A product awaited as soon as it is issued (its accumulator fresh
        // or rescaled each step, as attention's are) stalls its warps,
        // which a producer running ahead does not help; ping-pong consumers
        // on whole loops would serialize them. Such loops keep every warp
        // a consumer, and blocks that fit several to an SM overlap one
        // another's products instead.
        let accumulates = mmas(loop_body)
            .iter()
            .all(|op| matches!(op.kind, OpKind::Mma { acc, .. } if args.contains(&acc)));
        if !accumulates {
            return None;
        }
        let consumer_groups = consumer_groups(cx, body, ping_pong);
        let plan = plan_loop(cx, (*var, loop_body), (true, consumer_groups), stage_budget).filter(|p| p.tma)?;
        let mut needed: HashSet<ValueId> = [*lo, *hi].into();
        needed.extend(
            plan.staged
                .iter()
                .flat_map(|s| s.index.iter().copied())
                .filter(|&i| i != *var),
        );
        let slice = producer_slice(cx, &body[..at], needed)?;
        let bounds = producer_slice(cx, &body[..at], [*lo, *hi].into()).unwrap_or_default();
        let clustered = clusters && clusters_share(cx, &plan, &bounds.iter().map(|&i| &body[i]).collect::<Vec<_>>());
        Some(Specialization {
            at,
            plan,
            consumer_groups,
            slice,
            clustered,
        })
    }

    /// Threads of the consumer role, which the block's first threads take.
    pub fn consumers(&self, num_warps: u32) -> u32 {
        self.consumer_groups * num_warps * 32
    }
}

/// `mma` ops in `ops`, nested bodies included.
pub fn mmas(ops: &[Op]) -> Vec<&Op> {
    all_ops(ops)
        .into_iter()
        .filter(|op| matches!(op.kind, OpKind::Mma { .. }))
        .collect()
}

/// Consumer warpgroups that take turns on a block's tiles: two when the
/// kernel's `wgmma`s are one warpgroup's, its register tiles fit (see
/// [`CONSUMER_LOOP_REGISTERS`]) and `ping_pong` allows it; else one.
fn consumer_groups(cx: &Context, body: &[Op], ping_pong: bool) -> u32 {
    let registers = |v: ValueId| 1usize << cx.layout(v).reg.len();
    let (mut accumulators, mut operands) = (0, 0);
    for op in mmas(body) {
        let OpKind::Mma { b, acc, .. } = op.kind else {
            unreachable!("an mma")
        };
        accumulators += registers(acc);
        if cx.register_b.contains(&b) {
            operands += registers(b);
        }
    }
    // Tiles loaded outside loops: the epilogue's operands (a bias, a residual).
    let loaded: usize = body
        .iter()
        .filter(|op| matches!(op.kind, OpKind::Load { .. }))
        .map(|op| registers(op.results[0]))
        .sum();
    let fit =
        accumulators + operands <= CONSUMER_LOOP_REGISTERS && accumulators + loaded <= CONSUMER_EPILOGUE_REGISTERS;
    if ping_pong && cx.func.num_warps == 4 && fit {
        2
    } else {
        1
    }
}

/// The ops of `before` (top-level, ahead of the loop) that the values
/// `needed` depend on, in order, by index; `None` when one of them is not
/// a scalar op (the producer computes no tiles).
fn producer_slice(cx: &Context, before: &[Op], mut needed: HashSet<ValueId>) -> Option<Vec<usize>> {
    let mut slice = Vec::new();
    for (i, op) in before.iter().enumerate().rev() {
        if !op.results.iter().any(|r| needed.contains(r)) {
            continue;
        }
        let scalar = op.results.iter().all(|&r| cx.func.values[r].is_scalar());
        if !scalar || !op.kind.bodies().is_empty() {
            return None;
        }
        needed.extend(op.kind.operands());
        slice.push(i);
    }
    slice.reverse();
    Some(slice)
}

/// Whether the blocks of a 2-CTA cluster can share `plan`'s tiles: f32
/// (tf32) operands, which move twice the bytes per FLOP of 16-bit ones
/// (for 16-bit ones the pair's coupling outweighs the L2 reads saved), no
/// tile transposed in its stage, every tile in halves (an even number of
/// panels, or rows a multiple of 16, each half a whole number of swizzle
/// periods), and loop bounds that no block's index enters (`bounds`: the
/// scalar ops they are computed from).
fn clusters_share(cx: &Context, plan: &LoopPlan, bounds: &[&Op]) -> bool {
    let halvable = plan.staged.iter().all(|s| {
        let shape = &cx.layout(s.load).shape;
        let rank = shape.len();
        let panels = shape[rank - 1] * s.eb / s.swizzle(shape).line_bytes();
        panels.is_multiple_of(2) || shape[..rank - 1].iter().product::<usize>() % 16 == 0
    });
    let f32_operands = plan.staged.iter().all(|s| s.eb == 4);
    let fixed_bounds = !bounds.iter().any(|op| matches!(op.kind, OpKind::BlockId(0)));
    f32_operands && !plan.transposes() && halvable && fixed_bounds
}
