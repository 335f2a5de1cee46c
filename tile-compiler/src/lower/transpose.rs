//! Transposed operand tiles for tf32 `wgmma` (warp specialization).
//!
//! tf32 `wgmma` reads shared-memory operands K-major only. A `b` loaded
//! N-major beside a K-major `a` (a plain `a @ b`) is read into registers
//! instead ([`super::wgmma`], the product computed transposed); an `a`
//! loaded M-major (`a^T @ b`) cannot be read as TMA writes it. The producer's warps after its first
//! (which issues the copies) follow the stages as the consumers do: they
//! wait for a stage's copies, read such a tile into registers in 4 x 4
//! blocks (four 16-byte rows each), synchronize among themselves, write
//! the blocks back transposed (four 16-byte columns) in K-major rows in
//! the same place, make them visible to `wgmma`'s async proxy and arrive
//! on the stage's ready mbarrier, which the consumers wait on instead of
//! the full one. In place, the stages keep their size, and so their number.
//!
//! Both layouts are swizzled ([`Swizzle`]). A thread's blocks lie along a
//! diagonal (block row `t`, block column `q + t`), so that the eight
//! threads of a quarter-warp read and write eight distinct 16-byte bank
//! groups when the tile has eight block rows (K = 32, tf32's usual step).

use super::emit::Lower;
use super::state::*;
use crate::ir::ValueId;
use crate::plan::pipeline::TRANSPOSE_BLOCK as BLOCK;
use crate::plan::specialize::TRANSPOSER_THREADS;
use crate::plan::swizzle::Swizzle;
use crate::ptx::RegClass;

/// The named barrier the transposing threads synchronize on between
/// reading a stage's tiles and overwriting them (the consumers use 1).
const TRANSPOSER_BARRIER: u32 = 2;

/// A block a transposing thread moves at every stage: the offsets, from
/// the stage's start, of the four 16-byte rows it reads and of the four it
/// writes, and for a last round that not every thread has, the predicate
/// that it has none.
pub(super) struct Block {
    reads: Vec<String>,
    writes: Vec<String>,
    absent: Option<String>,
}

impl Lower<'_> {
    /// This thread's blocks of every tile the plan transposes (thread
    /// `thread`, from 0). They are the same at every stage: computed once,
    /// before the loop.
    pub(super) fn transpose_blocks(&mut self, plan: &Pipeline, thread: &str) -> Vec<Block> {
        let mut out = Vec::new();
        for s in plan.staged.iter().filter(|s| s.transposed) {
            let from = s.swizzle(&self.layout(s.load).shape);
            let (rows, cols) = (from.rows, from.row_bytes / s.eb);
            let to = Swizzle {
                rows: cols,
                row_bytes: rows * s.eb,
            };
            let (block_rows, block_cols) = (rows / BLOCK, cols / BLOCK);
            let blocks = block_rows * block_cols;
            let tile = format!("{}", s.offset);
            for first in (0..blocks).step_by(TRANSPOSER_THREADS as usize) {
                let block = self.reg(RegClass::B32);
                self.emit(format!("add.s32 {block}, {thread}, {first};"));
                let absent = (first + TRANSPOSER_THREADS as usize > blocks).then(|| {
                    let p = self.reg(RegClass::Pred);
                    self.emit(format!("setp.ge.u32 {p}, {block}, {blocks};"));
                    p
                });
                // Block row `t` (a chunk of the transposed rows), block column `(q + t) % block_cols`.
                let (t, col) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
                self.emit(format!("rem.u32 {t}, {block}, {block_rows};"));
                self.emit(format!("div.u32 {col}, {block}, {block_rows};"));
                self.emit(format!("add.s32 {col}, {col}, {t};"));
                self.emit(format!("rem.u32 {col}, {col}, {block_cols};"));
                let at = |l: &mut Self, major: &str, minor: &str, i: usize, sw: &Swizzle| {
                    let row = l.reg(RegClass::B32);
                    l.emit(format!("mad.lo.s32 {row}, {major}, {BLOCK}, {i};"));
                    l.swizzled(&tile, &row, minor, sw)
                };
                let reads = (0..BLOCK).map(|r| at(self, &t, &col, r, &from)).collect();
                let writes = (0..BLOCK).map(|c| at(self, &col, &t, c, &to)).collect();
                out.push(Block { reads, writes, absent });
            }
        }
        out
    }

    /// The transposing threads' loop `lo..hi`, stage by stage in the
    /// consumers' order (the plan's read stage and phase registers, which
    /// these threads keep for themselves), moving `blocks` at each.
    pub(super) fn transpose_stages(&mut self, plan: &Pipeline, lo: ValueId, hi: ValueId, blocks: &[Block]) {
        let j = self.copy(RegClass::B32, &self.scalar(lo));
        let hi = self.scalar(hi);
        let (head, end, done) = (
            self.label("transpose"),
            self.label("transposed"),
            self.reg(RegClass::Pred),
        );
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.s32 {done}, {j}, {hi};"));
        self.emit(format!("@{done} bra {end};"));
        self.tma_wait(plan, StageBarrier::Full);
        let base = self.stage_base(plan, &plan.read_stage);
        let address = |l: &mut Self, off: &str| {
            let a = l.reg(RegClass::B32);
            l.emit(format!("add.s32 {a}, {base}, {off};"));
            a
        };
        let guard = |b: &Block| b.absent.as_ref().map_or(String::new(), |p| format!("@!{p} "));
        let values: Vec<Vec<Vec<String>>> = blocks
            .iter()
            .map(|b| {
                b.reads
                    .iter()
                    .map(|off| {
                        let a = address(self, off);
                        let v: Vec<String> = (0..BLOCK).map(|_| self.reg(RegClass::B32)).collect();
                        self.emit(format!("{}ld.shared.v4.b32 {{{}}}, [{a}];", guard(b), v.join(", ")));
                        v
                    })
                    .collect()
            })
            .collect();
        // Every block is read before any is overwritten.
        self.emit(format!("bar.sync {TRANSPOSER_BARRIER}, {TRANSPOSER_THREADS};"));
        for (b, rows) in blocks.iter().zip(&values) {
            for (c, off) in b.writes.iter().enumerate() {
                let a = address(self, off);
                let column: Vec<&str> = rows.iter().map(|v| v[c].as_str()).collect();
                self.emit(format!(
                    "{}st.shared.v4.b32 [{a}], {{{}}};",
                    guard(b),
                    column.join(", ")
                ));
            }
        }
        // Written through the generic proxy, read by `wgmma` through the async one.
        self.emit("fence.proxy.async.shared::cta;");
        let ready = self.stage_barrier(plan, &plan.read_stage, StageBarrier::Ready);
        let state = self.reg(RegClass::B64);
        self.emit(format!("mbarrier.arrive.shared::cta.b64 {state}, [{ready}];"));
        self.next_stage(plan, &plan.read_stage, Some(&plan.phase));
        self.emit(format!("add.s32 {j}, {j}, 1;"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
    }
}

#[cfg(test)]
mod tests {
    /// The 16-byte bank group (0..8) of chunk `chunk` of row `row` in a
    /// 128-byte-swizzled tile whose rows are at least 128 bytes.
    fn bank_group(row: usize, chunk: usize) -> usize {
        (chunk % 8) ^ (row % 8)
    }

    /// Block `b`'s (block row, block column), as `transpose_tile` picks them.
    fn block(b: usize, block_rows: usize, block_cols: usize) -> (usize, usize) {
        (b % block_rows, (b / block_rows + b % block_rows) % block_cols)
    }

    #[test]
    fn every_block_is_transposed_once() {
        for (block_rows, block_cols) in [(8, 32), (4, 16), (16, 64), (2, 16)] {
            let mut seen: Vec<_> = (0..block_rows * block_cols)
                .map(|b| block(b, block_rows, block_cols))
                .collect();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), block_rows * block_cols);
        }
    }

    #[test]
    fn quarter_warps_read_and_write_distinct_bank_groups() {
        // K = 32 rows of the loaded tile (8 block rows), N = 128 or 256 columns.
        for block_cols in [32, 64] {
            let block_rows = 8;
            for quarter in 0..block_rows * block_cols / 8 {
                let blocks = (quarter * 8..quarter * 8 + 8).map(|b| block(b, block_rows, block_cols));
                for i in 0..4 {
                    let mut reads: Vec<usize> = blocks.clone().map(|(t, c)| bank_group(4 * t + i, c)).collect();
                    let mut writes: Vec<usize> = blocks.clone().map(|(t, c)| bank_group(4 * c + i, t)).collect();
                    reads.sort();
                    writes.sort();
                    reads.dedup();
                    writes.dedup();
                    assert_eq!((reads.len(), writes.len()), (8, 8), "quarter-warp {quarter}, step {i}");
                }
            }
        }
    }
}
