//! Programmatic dependent launch: the runtime lets a kernel start while the
//! previous kernel on its stream still runs, so the kernel must wait for
//! that kernel's memory (`griddepcontrol.wait`) before it touches global
//! memory. This pass says where: before the first top-level op that may
//! read or write it, so that the ops before (index arithmetic, and
//! `prefetch`es, which only ask L2 for lines and cannot read stale data)
//! overlap the previous kernel.
//!
//! A `get` that only prefetches read (the indices of the tiles to ask L2
//! for, say a sequence's length) is a *hint read*: it may run before the
//! wait, since a stale value only sends a hint to the wrong lines. It
//! reads through L2 alone (`ld.global.cg`), so that no line it brought
//! into the SM's cache answers a read after the wait.

use crate::ir::{Op, OpKind, ValueId};
use std::collections::HashSet;

/// The results of the `get`s of `body` whose values only prefetches read,
/// through arithmetic and through loops and branches that only prefetch.
pub fn hint_reads(body: &[Op]) -> HashSet<ValueId> {
    let mut needed = HashSet::new();
    // Each round marks the operands of the ops whose results are needed;
    // a chain of n ops takes at most n rounds.
    while mark_needed(body, &mut needed) {}
    let mut gets = HashSet::new();
    collect_gets(body, &mut gets);
    gets.retain(|v| !needed.contains(v));
    gets
}

/// Adds to `needed` the values that an op other than a prefetch reads, or
/// that a needed op reads; whether it added any.
fn mark_needed(ops: &[Op], needed: &mut HashSet<ValueId>) -> bool {
    let mut added = false;
    for op in ops {
        let reads = match &op.kind {
            OpKind::Prefetch { .. } => false,
            // Only computes its results (a get reads no more than that).
            k if k.is_pure() => op.results.iter().any(|r| needed.contains(r)),
            // A loop or branch that only prefetches and computes.
            k if !k.bodies().is_empty() && k.bodies().iter().all(|b| only_hints(b)) => {
                op.results.iter().any(|r| needed.contains(r))
            }
            _ => true,
        };
        if reads {
            for v in op.kind.operands() {
                added |= needed.insert(v);
            }
        }
        for b in op.kind.bodies() {
            added |= mark_needed(b, needed);
        }
    }
    added
}

/// Whether `ops` only compute, prefetch and `get`.
fn only_hints(ops: &[Op]) -> bool {
    ops.iter().all(|op| match &op.kind {
        OpKind::Prefetch { .. } => true,
        OpKind::Load { .. } | OpKind::Gather { .. } => false,
        k if k.is_pure() => true,
        k => !k.bodies().is_empty() && k.bodies().iter().all(|b| only_hints(b)),
    })
}

fn collect_gets(ops: &[Op], gets: &mut HashSet<ValueId>) {
    for op in ops {
        if matches!(op.kind, OpKind::Get { .. }) {
            gets.extend(&op.results);
        }
        for b in op.kind.bodies() {
            collect_gets(b, gets);
        }
    }
}

/// The index of the top-level op of `body` the kernel waits before
/// (`body.len()` when none touches memory); `hints` are its hint reads.
pub fn waits_at(body: &[Op], hints: &HashSet<ValueId>) -> usize {
    body.iter()
        .position(|op| touches_memory(op, hints))
        .unwrap_or(body.len())
}

/// Whether `op`, or an op in its bodies, reads or writes global memory
/// (a prefetch does neither, and a hint read does not count).
fn touches_memory(op: &Op, hints: &HashSet<ValueId>) -> bool {
    match &op.kind {
        OpKind::Get { .. } => !op.results.iter().all(|r| hints.contains(r)),
        OpKind::Load { .. }
        | OpKind::Gather { .. }
        | OpKind::Store { .. }
        | OpKind::Scatter { .. }
        | OpKind::Atomic { .. }
        | OpKind::FetchAdd { .. }
        | OpKind::Signal { .. }
        | OpKind::Wait { .. }
        | OpKind::StoreFlagged { .. }
        | OpKind::LoadFlagged { .. } => true,
        k => k.bodies().iter().any(|b| b.iter().any(|op| touches_memory(op, hints))),
    }
}

/// Whether the kernel waits for stores made while it runs (`wait`): other
/// blocks' or other GPUs'. Such a kernel reads its read-only tensors
/// through coherent loads, not the non-coherent path (`ld.global.nc`),
/// which may return lines cached before the stores it waited for.
pub fn waits_for_stores(body: &[Op]) -> bool {
    body.iter()
        .any(|op| matches!(op.kind, OpKind::Wait { .. }) || op.kind.bodies().iter().any(|b| waits_for_stores(b)))
}
