//! Occupancy of loops that stream from global memory on the CUDA cores:
//! the registers a thread needs to have all of an iteration's loads in
//! flight before it uses the first.
//!
//! Left to its own heuristics, ptxas keeps such a kernel near 64 registers
//! a thread and gets there by issuing an iteration's later loads only after
//! the arithmetic on its first ones, that is after their round trip: two or
//! three round trips an iteration where one would do, and a few-row linear
//! layer (`gemv`) keeps a fraction of its weights in flight. Declaring the
//! occupancy that leaves room for the whole iteration (`.minnctapersm`,
//! [`super::memory`]) lets ptxas issue every load first; it spends no more
//! registers than its schedule needs.

use super::Context;
use crate::ir::{Op, OpKind, ValueId};
use std::collections::HashMap;

/// Registers ptxas spends beside the values [`streamed_registers`] counts:
/// the loads' addresses and predicates, loop bounds, and what a conversion
/// unpacks from a load before the arithmetic takes it.
pub const STREAM_OVERHEAD_REGISTERS: usize = 32;

/// The fewest threads a declared occupancy leaves an SM: a loop that would
/// need more registers than that allows declares none, since the blocks it
/// would give up hid more latency than its loads in flight would.
pub const STREAM_MIN_THREADS: u32 = 512;

/// The registers a thread ptxas aims at when a kernel declares no
/// occupancy: a streaming loop that needs fewer declares none.
pub const UNDECLARED_REGISTERS: u32 = 64;

/// The most 32-bit registers a thread holds at once through an iteration of
/// any loop of the kernel that loads from global memory and has no `mma`
/// (whose loops [`super::pipeline`] plans), when the iteration issues all
/// its loads first: each load's tile is live from the iteration's start to
/// its last use, every other value that is held (not an element-wise
/// result taken by a single op, which ptxas computes element by element
/// into it) from its definition to its last use, and what the loop reads
/// from outside it, or carries, through the iteration. `None` when the
/// kernel has no such loop.
pub fn streamed_registers(cx: &Context) -> Option<usize> {
    most(cx, &cx.func.body)
}

fn most(cx: &Context, ops: &[Op]) -> Option<usize> {
    ops.iter()
        .filter_map(|op| {
            let here = match &op.kind {
                OpKind::For { body, yields, .. } if !has_mma(body) => iteration_peak(cx, body, yields),
                _ => None,
            };
            let nested = op.kind.bodies().into_iter().filter_map(|b| most(cx, b)).max();
            here.max(nested)
        })
        .max()
}

/// The peak of [`streamed_registers`]'s count over one loop `body` that
/// yields `yields`; `None` when it loads nothing from global memory.
fn iteration_peak(cx: &Context, body: &[Op], yields: &[ValueId]) -> Option<usize> {
    let end = body.len();
    let mut defined: HashMap<ValueId, (usize, bool)> = HashMap::new();
    let mut streamed = Vec::new();
    for (at, op) in body.iter().enumerate() {
        let load = matches!(op.kind, OpKind::Load { .. } | OpKind::Gather { .. });
        let elementwise = matches!(
            op.kind,
            OpKind::Unary(..)
                | OpKind::Binary(..)
                | OpKind::Select(..)
                | OpKind::Cast(_)
                | OpKind::Reshape(_)
                | OpKind::Broadcast(_)
                | OpKind::Splat(_)
        );
        for &r in &op.results {
            defined.insert(r, (at, load));
            if elementwise {
                streamed.push(r);
            }
        }
    }
    if !defined.values().any(|&(_, load)| load) {
        return None;
    }
    // Last use of each value the body reads, the yields at its end; values
    // from outside the body (or carried into it) are live throughout.
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    let mut outside: HashMap<ValueId, ()> = HashMap::new();
    let mut note = |v: ValueId, at: usize| {
        if defined.contains_key(&v) {
            let e = last.entry(v).or_insert(at);
            *e = (*e).max(at);
        } else {
            outside.insert(v, ());
        }
    };
    for (at, op) in body.iter().enumerate() {
        for v in reads(op) {
            note(v, at);
        }
    }
    for &v in yields {
        note(v, end);
    }
    let mut taken: HashMap<ValueId, usize> = HashMap::new();
    for v in body.iter().flat_map(reads).chain(yields.iter().copied()) {
        *taken.entry(v).or_default() += 1;
    }
    for v in streamed {
        if taken.get(&v).copied().unwrap_or(0) <= 1 {
            defined.remove(&v);
        }
    }
    let through: usize = outside
        .keys()
        .filter(|v| !cx.consts.contains_key(v))
        .map(|&v| words(cx, v))
        .sum();
    let peak = (0..=end)
        .map(|at| {
            defined
                .iter()
                .filter(|&(v, &(def, load))| (load || def <= at) && last.get(v).copied().unwrap_or(def) >= at)
                .map(|(&v, _)| words(cx, v))
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    Some(through + peak)
}

/// The values `op` reads, its nested bodies' reads of values from outside
/// them included.
fn reads(op: &Op) -> Vec<ValueId> {
    let mut all = op.kind.operands();
    let mut inner = Vec::new();
    for body in op.kind.bodies() {
        for nested in body {
            all.extend(reads(nested));
            inner.extend(nested.results.iter().copied());
            if let OpKind::For { var, args, .. } = &nested.kind {
                inner.push(*var);
                inner.extend(args.iter().copied());
            }
        }
    }
    all.retain(|v| !inner.contains(v));
    all
}

fn has_mma(ops: &[Op]) -> bool {
    ops.iter()
        .any(|op| matches!(op.kind, OpKind::Mma { .. }) || op.kind.bodies().into_iter().any(|b| has_mma(b)))
}

/// The 32-bit registers a thread holds of value `v` (a scalar's one).
fn words(cx: &Context, v: ValueId) -> usize {
    let regs = cx.layouts.get(&v).map_or(1, |l| l.num_regs());
    (regs * cx.dtype(v).bytes()).div_ceil(4)
}
