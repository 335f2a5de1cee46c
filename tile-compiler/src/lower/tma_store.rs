//! Stores through TMA (sm_90a, warp-specialized kernels): the computing
//! threads write a tile into shared memory one panel (128-byte column) at
//! a time, swizzled as TMA reads it ([`super::tensor_core::Swizzle`]), and
//! one thread copies the panel to global memory with
//! `cp.async.bulk.tensor`. The hardware drops the elements past the
//! tensor's end, so no thread computes addresses or bounds, and the stores
//! leave the load/store queue to the stage barriers of the consumer whose
//! K-loop runs meanwhile (the accumulators' 8-byte global stores stall on
//! a full queue; CUTLASS's and cuBLAS's epilogues store through TMA too).
//!
//! A panel's copy reads the shared memory after the store returns, so its
//! thread waits for that read (`cp.async.bulk.wait_group.read`) before the
//! threads write the next panel, or anything else, into the scratch area.

use super::convert::SharedTile;
use super::emit::Lower;
use super::state::*;
use crate::ir::*;
use crate::plan::scratch::TmaStore;
use crate::plan::swizzle::Swizzle;
use crate::ptx::RegClass;

impl Lower<'_> {
    /// Stores `value` at tile `index` of tensor `t` through TMA, and returns
    /// true; false, having emitted nothing, when the plan stores it
    /// otherwise ([`TmaStore::of`] says when it can go this way).
    ///
    /// The tile goes a panel at a time, so that its scratch is one panel's
    /// rows (16 KiB for 128 rows of f32, which leave a 128x128x32 tf32
    /// pipeline its six stages), and every thread holds a part of each.
    pub(super) fn tma_store(&mut self, t: usize, index: &[ValueId], value: ValueId) -> bool {
        let Some(&TmaStore { rows, line, inner }) = self.plan.tma_stores.get(&(t, value)) else {
            return false;
        };
        let l = self.layout(value);
        let eb = self.func.tensor(t).dtype.bytes();
        let rank = l.shape.len();
        let last = rank - 1;
        let cols = l.shape[last];
        self.vector_accessed.insert(t);
        let mut panel = l.shape.clone();
        panel[last] = inner;
        let tile = SharedTile {
            shape: &panel,
            elem_bytes: eb,
            swizzle: Swizzle { rows, row_bytes: line },
            dropped: &[],
        };
        let box_dims: Vec<u32> = std::iter::once(inner as u32)
            .chain(panel[..last].iter().rev().map(|&n| n as u32))
            .collect();
        let map = self.tensor_map(TensorMap {
            param: t,
            box_dims: box_dims.into(),
            swizzle_bytes: line as u32,
            interleaved_rows: false,
            tf32: false,
        });
        // The tile's first element, innermost coordinate first.
        let origin: Vec<String> = (0..rank)
            .rev()
            .map(|d| {
                let index = self.scalar(index[d]);
                self.tile_origin(&index, l.shape[d])
            })
            .collect();
        let leader = self.reg(RegClass::Pred);
        let first = self.block_tid();
        self.emit(format!("setp.eq.u32 {leader}, {first}, 0;"));
        let src = self.regs_of(value);
        let base = self.scratch_base();
        let owner = self.owner_pred(l.replicated_mask());
        // Each panel's registers, at the same addresses (the panel's bits
        // are register bits, which the panel-wide tile maps to nothing).
        let accesses = self.shared_accesses(l, &tile, &base);
        for p in 0..cols / inner {
            // Past the last scratch use (the previous panel's copy included).
            self.barrier();
            for a in accesses.iter().filter(|a| l.reg_coord(a.first)[last] / inner == p) {
                self.store_shared(&src[a.first..a.first + a.width], eb, (&a.addr, a.imm), owner.as_deref());
            }
            // The writes, made visible to the copy (the async proxy).
            self.emit("fence.proxy.async.shared::cta;");
            self.barrier();
            let mut at = origin.clone();
            if p > 0 {
                at[0] = self.reg(RegClass::B32);
                self.emit(format!("add.s32 {}, {}, {};", at[0], origin[0], p * inner));
            }
            self.emit(format!(
                "@{leader} cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group [{map}, {{{}}}], [{base}];",
                at.join(", ")
            ));
            self.emit(format!("@{leader} cp.async.bulk.commit_group;"));
            self.emit(format!("@{leader} cp.async.bulk.wait_group.read 0;"));
        }
        true
    }
}
