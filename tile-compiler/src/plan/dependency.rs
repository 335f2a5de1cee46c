//! Programmatic dependent launch: the runtime lets a kernel start while the
//! previous kernel on its stream still runs, so the kernel must wait for
//! that kernel's memory (`griddepcontrol.wait`) before it touches global
//! memory. This pass says where: before the first top-level op that may
//! read or write it, so that the ops before (index arithmetic, and
//! `prefetch`es, which only ask L2 for lines and cannot read stale data)
//! overlap the previous kernel.

use crate::ir::{Op, OpKind};

/// The index of the top-level op of `body` the kernel waits before
/// (`body.len()` when none touches memory).
pub fn waits_at(body: &[Op]) -> usize {
    body.iter().position(touches_memory).unwrap_or(body.len())
}

/// Whether `op`, or an op in its bodies, reads or writes global memory
/// (a prefetch does neither).
fn touches_memory(op: &Op) -> bool {
    match &op.kind {
        OpKind::Load { .. }
        | OpKind::Get { .. }
        | OpKind::Gather { .. }
        | OpKind::Store { .. }
        | OpKind::Scatter { .. }
        | OpKind::Atomic { .. }
        | OpKind::FetchAdd { .. }
        | OpKind::Signal { .. }
        | OpKind::Wait { .. }
        | OpKind::StoreFlagged { .. }
        | OpKind::LoadFlagged { .. } => true,
        k => k.bodies().iter().any(|b| b.iter().any(touches_memory)),
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
