//! The shared memory and the meetings of a kernel's `cluster_gather`s.
//! Each gather has its own buffer in the cluster's first block, which the
//! other blocks write at any time after the cluster starts, so no other
//! use shares it. Gathers that follow one another at the kernel's top
//! level share one meeting (a cluster barrier): each stores its tile as
//! it comes, and the cluster meets after the last, before the first op
//! that reads any of them, which then reads them all back.

use crate::ir::{Func, OpKind, ValueId, all_ops};
use std::collections::HashSet;

/// The buffers and meetings [`crate::lower`] follows.
#[derive(Clone, Debug, Default)]
pub struct Gathers {
    /// Each gather's buffer (by result): the gathered tile's bytes, in
    /// the order of the gathers.
    pub buffers: Vec<(ValueId, usize)>,
    /// The gathers after whose store the cluster meets.
    pub meets_after: HashSet<ValueId>,
}

/// The kernel's gathers: every one's buffer, and where the cluster meets.
pub fn plan(func: &Func) -> Gathers {
    let mut g = Gathers::default();
    let mut stored: Vec<ValueId> = Vec::new();
    for op in &func.body {
        // What the op and the ops in its bodies read.
        let mut reads = all_ops(std::slice::from_ref(op))
            .into_iter()
            .flat_map(|o| o.kind.operands());
        if let Some(&last) = stored.last()
            && reads.any(|v| stored.contains(&v))
        {
            g.meets_after.insert(last);
            stored.clear();
        }
        if let OpKind::ClusterGather { .. } = op.kind {
            let r = op.results[0];
            let t = &func.values[r];
            let elems: usize = t.shape.as_ref().map_or(1, |s| s.iter().product());
            g.buffers.push((r, elems * t.dtype.bytes()));
            stored.push(r);
        }
    }
    g.meets_after.extend(stored.last());
    g
}
