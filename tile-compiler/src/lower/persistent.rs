//! A persistent kernel with two tiles per block (the portable `mma.sync`
//! path).
//!
//! A portable `mma` kernel whose registers and shared memory let two blocks
//! share an SM has a second variant that runs as one block of twice the
//! threads instead: two halves, each the kernel's warps, with their own
//! half of dynamic shared memory and their own named barrier. The grid is
//! persistent (the launcher starts only the blocks that fit at once and
//! passes the block count it was asked for), and half `h` of block `b`
//! computes blocks `b + h·G`, `b + (h + 2)·G`, .. of the `G` launched: each
//! round gives every block's first half a tile before any second half gets
//! one. So a last round that does not fill the GPU runs one tile to an SM,
//! where plain blocks would start the last ones two to an SM on half the
//! SMs. The doubled block needs twice the shared memory, more than some GPUs
//! give one block (sm_120: 99 KiB), so the runtime keeps the plain variant
//! for those.

use super::emit::Lower;
use super::state::*;
use crate::ir::Op;
use crate::ptx::{EntryParam, RegClass};

/// Named barriers of the two halves (0 stays the block's).
const HALF_BARRIER: u32 = 1;

impl Lower<'_> {
    /// Splits the block into two halves of the kernel's warps, each owning
    /// `half_bytes` of dynamic shared memory; `tid` becomes the thread's
    /// index in its half.
    pub(super) fn persistent_prologue(&mut self, half_bytes: usize) {
        let threads = self.func.num_warps * 32;
        let grid_param = EntryParam {
            name: format!("{}_grid", self.entry),
            ty: "u32",
        };
        let [half, barrier, offset, block, grid] = [(); 5].map(|_| self.reg(RegClass::B32));
        let tid = self.tid.clone();
        let (ctaid, nctaid) = (self.special("%ctaid.x"), self.special("%nctaid.x"));
        for line in [
            format!("ld.param.u32 {grid}, [{}];", grid_param.name),
            format!("shr.u32 {half}, {tid}, {};", threads.trailing_zeros()),
            format!("and.b32 {tid}, {tid}, {};", threads - 1),
            format!("add.s32 {barrier}, {half}, {HALF_BARRIER};"),
            format!("mul.lo.u32 {offset}, {half}, {half_bytes};"),
            format!("mad.lo.u32 {block}, {half}, {nctaid}, {ctaid};"),
        ] {
            self.prologue.push(line);
        }
        self.persistent = Some(Persistent {
            barrier,
            offset,
            block,
            grid,
            grid_param,
        });
    }

    /// The kernel body once per block of this half's share.
    pub(super) fn persistent_body(&mut self, body: &[Op]) {
        let persistent = self.persistent.as_ref().expect("a persistent block");
        let (block, grid) = (persistent.block.clone(), persistent.grid.clone());
        let nctaid = self.special("%nctaid.x");
        let (head, end) = (self.label("block"), self.label("blocks_done"));
        let done = self.reg(RegClass::Pred);
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.u32 {done}, {block}, {grid};"));
        self.emit(format!("@{done} bra {end};"));
        self.ops(body);
        // The half is done with its shared memory before the next block's
        // copies overwrite it.
        self.barrier();
        self.emit(format!("mad.lo.u32 {block}, {nctaid}, 2, {block};"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
    }
}
