//! Layout conversions through a swizzled shared tile: the source layout
//! writes its registers, the destination layout reads them back, each side
//! with the widest accesses its register runs allow (up to 16 bytes), at
//! addresses swizzled like the operand tiles ([`Swizzle`]), so that eight
//! rows at one 16-byte chunk and a row's consecutive chunks both fall in
//! distinct banks. This is how an `mma` accumulator (4-byte runs spread
//! over eight rows per warp) becomes coalesced 16-byte stores.
//!
//! Every layout is a bit permutation and the swizzle XORs row bits into
//! chunk bits, so an element's byte address is the XOR of one mask per set
//! bit of (register, lane, warp): the thread's part is computed once, and
//! each access adds its register part (an XOR only where the two overlap).
//!
//! On the portable path a tile over 64 KiB (`plan/scratch.rs`) goes
//! through in parts, one per value of some row bits that both layouts hold
//! in registers: each part takes the shared tile in turn, so that the
//! block fits the 99 KiB an sm_120 GPU gives one (an f32 128x256 `mma`
//! accumulator stored element by element would take 128 KiB).

use super::MmaPath;
use super::emit::Lower;
use super::emit::{addr, flat};
use crate::dtype::DType;
use crate::ir::ValueId;
use crate::layout::{Bit, Layout};
use crate::plan::scratch::{Conversion, swizzled_tile};
use crate::plan::swizzle::Swizzle;
use crate::ptx::RegClass;
use std::collections::HashMap;

/// A tile of `shape` stored as rows along its last dimension, swizzled.
/// The coordinate bits in `dropped` are not in `shape`: elements that
/// differ only in them take the same place, in turns.
pub(super) struct SharedTile<'s> {
    pub(super) shape: &'s [usize],
    pub(super) elem_bytes: usize,
    pub(super) swizzle: Swizzle,
    pub(super) dropped: &'s [Bit],
}

impl SharedTile<'_> {
    /// The address bits coordinate bit `(dim, b)` sets (XORed together):
    /// none for a dropped bit, or for a bit past the tile's extent (a panel
    /// of a wider tile, whose other panels take turns in the same place:
    /// `tma_store.rs`).
    fn mask(&self, (dim, b): Bit) -> usize {
        if self.dropped.contains(&(dim, b)) {
            return 0;
        }
        let b = b - self.dropped.iter().filter(|&&(d, x)| d == dim && x < b).count() as u32;
        if 1 << b >= self.shape[dim] {
            return 0;
        }
        let last = self.shape.len() - 1;
        let line = self.swizzle.line_bytes();
        if dim == last {
            let byte = b as usize + self.elem_bytes.trailing_zeros() as usize;
            let chunk_bits = (line / 16).trailing_zeros() as usize;
            return if byte < 4 + chunk_bits {
                1 << byte
            } else {
                // Past one 128-byte line: the next panel of `rows` lines.
                (1 << (byte - 4 - chunk_bits)) * self.swizzle.rows * line
            };
        }
        let row = b as usize
            + self.shape[dim + 1..last]
                .iter()
                .map(|n| n.trailing_zeros() as usize)
                .sum::<usize>();
        let rows_per_line = (128 / line).trailing_zeros() as usize;
        let phase_bits = (line / 16).trailing_zeros() as usize;
        let phase = match row.checked_sub(rows_per_line) {
            Some(p) if p < phase_bits => 16 << p,
            _ => 0,
        };
        ((1 << row) * line) ^ phase
    }
}

/// One access: `width` registers from `first`, at `[addr + imm]`.
pub(super) struct SharedAccess {
    pub(super) first: usize,
    pub(super) width: usize,
    pub(super) addr: String,
    pub(super) imm: usize,
}

impl Lower<'_> {
    // ---- data movement between layouts ------------------------------------------

    pub(super) fn broadcast(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        let l = self.layout(result);
        let src = self.regs_of(arg);
        let from = &self.func.values[arg].shape.clone().expect("tile");
        // Register bits of the result that survive in the argument, in order.
        let kept: Vec<usize> = (0..l.reg.len())
            .filter(|&i| !(from[l.reg[i].0] == 1 && l.shape[l.reg[i].0] > 1))
            .collect();
        (0..l.num_regs())
            .map(|q| {
                let r: usize = kept.iter().enumerate().map(|(j, &i)| (q >> i & 1) << j).sum();
                src[r].clone()
            })
            .collect()
    }

    /// `arg` in `result`'s layout, moved as the plan says ([`Conversion`]).
    pub(super) fn convert(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        let (la, lb) = (self.layout(arg), self.layout(result));
        match self.plan.conversions[&result] {
            Conversion::StoredUnconverted => {
                // Stored straight from `arg` before its loop: no registers.
                self.stored_unconverted.insert(result, arg);
                return Vec::new();
            }
            Conversion::Staged => {
                // `wgmma` reads the stage itself, through a descriptor.
                if self.path == MmaPath::Wgmma {
                    return Vec::new();
                }
                let (base, contiguous, role) = self.staged_reads[&result].clone();
                let eb = self.dtype(arg).bytes();
                return self
                    .read_fragments(&base, lb, (contiguous, eb), role)
                    .unwrap_or_else(|| self.read_elements(&base, lb, contiguous));
            }
            Conversion::Permutation => {
                let (src, perm) = (self.regs_of(arg), la.register_permutation(lb).expect("planned"));
                return perm.into_iter().map(|r| src[r].clone()).collect();
            }
            Conversion::Operand => return self.stage_operand(arg, result, self.cx.operands[&result]),
            Conversion::Swizzled => return self.convert_swizzled(arg, result),
            Conversion::Elementwise => {}
        }
        let src = self.regs_of(arg);
        let dtype = self.dtype(arg);
        let (class, ty, bytes) = match dtype {
            DType::F16 | DType::BF16 => (RegClass::B16, "b16", 2),
            DType::Bool => (RegClass::B32, "u32", 4),
            DType::F32 => (RegClass::F32, "f32", 4),
            _ => (RegClass::B32, "b32", 4),
        };
        let wbase = self.smem_base(la, bytes);
        let owner = self.owner_pred(la.replicated_mask());
        self.barrier();
        for (r, v) in src.iter().enumerate() {
            let v = if dtype == DType::Bool {
                self.cast(DType::Bool, DType::U32, v)
            } else {
                v.clone()
            };
            let imm = flat(&la.reg_coord(r), &la.shape) * bytes;
            let guard = owner.as_ref().map(|p| format!("@{p} ")).unwrap_or_default();
            self.emit(format!("{guard}st.shared.{ty} {}, {v};", addr(&wbase, imm)));
        }
        self.barrier();
        let rbase = self.smem_base(lb, bytes);
        (0..lb.num_regs())
            .map(|q| {
                let d = self.reg(class);
                let imm = flat(&lb.reg_coord(q), &lb.shape) * bytes;
                self.emit(format!("ld.shared.{ty} {d}, {};", addr(&rbase, imm)));
                if dtype == DType::Bool {
                    self.cast(DType::U32, DType::Bool, &d)
                } else {
                    d
                }
            })
            .collect()
    }

    /// `arg` converted to `result`'s layout through a swizzled shared tile;
    /// `None` for elements other than 2 or 4 bytes, or rows under 16 bytes.
    pub(super) fn convert_swizzled(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        let (la, lb) = (self.layout(arg), self.layout(result));
        let dtype = self.dtype(arg);
        let (eb, class) = (dtype.bytes(), RegClass::of(dtype));
        let (whole, dropped) = swizzled_tile(self.path, la, lb, dtype).expect("planned");
        let mut shape = la.shape.clone();
        for &(dim, _) in &dropped {
            shape[dim] /= 2;
        }
        let tile = SharedTile {
            shape: &shape,
            elem_bytes: eb,
            swizzle: Swizzle {
                rows: whole.rows >> dropped.len(),
                row_bytes: whole.row_bytes,
            },
            dropped: &dropped,
        };
        let src = self.regs_of(arg);
        let base = self.scratch_base();
        let owner = self.owner_pred(la.replicated_mask());
        // The part (value of the dropped bits) a register index holds.
        let part = |l: &Layout, r: usize| -> usize {
            dropped
                .iter()
                .enumerate()
                .map(|(j, bit)| (r >> l.reg.iter().position(|b| b == bit).expect("a register bit") & 1) << j)
                .sum()
        };
        let mut out = vec![String::new(); lb.num_regs()];
        self.barrier();
        let writes = self.shared_accesses(la, &tile, &base);
        let mut reads = Vec::new();
        for p in 0..1 << dropped.len() {
            if p > 0 {
                // The last part has been read: the tile is free again.
                self.barrier();
            }
            for a in writes.iter().filter(|a| part(la, a.first) == p) {
                self.store_shared(&src[a.first..a.first + a.width], eb, (&a.addr, a.imm), owner.as_deref());
            }
            self.barrier();
            if p == 0 {
                reads = self.shared_accesses(lb, &tile, &base);
            }
            for a in reads.iter().filter(|a| part(lb, a.first) == p) {
                let regs = self.load_shared(a, eb, class);
                out.splice(a.first..a.first + a.width, regs);
            }
        }
        out
    }

    /// Loads `a.width` registers of `eb` bytes (16-bit halves split from
    /// the words read) from `[a.addr + a.imm]`.
    fn load_shared(&mut self, a: &SharedAccess, eb: usize, class: RegClass) -> Vec<String> {
        if eb == 2 && a.width > 1 {
            let words: Vec<String> = (0..a.width / 2).map(|_| self.reg(RegClass::B32)).collect();
            let (v, list) = vector_operand(&words);
            self.emit(format!("ld.shared{v}.b32 {list}, [{}+{}];", a.addr, a.imm));
            return words
                .iter()
                .flat_map(|w| {
                    let (h0, h1) = self.split_word(w);
                    [h0, h1]
                })
                .collect();
        }
        let regs: Vec<String> = (0..a.width).map(|_| self.reg(class)).collect();
        let ty = match class {
            RegClass::F32 => "f32",
            RegClass::B16 => "b16",
            _ => "b32",
        };
        let (v, list) = vector_operand(&regs);
        self.emit(format!("ld.shared{v}.{ty} {list}, [{}+{}];", a.addr, a.imm));
        regs
    }

    /// Stores `regs` (consecutive elements of `eb` bytes) at `[addr + imm]`,
    /// by the threads `owner` selects (all when `None`).
    pub(super) fn store_shared(&mut self, regs: &[String], eb: usize, (addr, imm): (&str, usize), owner: Option<&str>) {
        let (ty, words): (&str, Vec<String>) = match (eb, regs.len()) {
            (2, 1) => ("b16", regs.to_vec()),
            (2, _) => ("b32", regs.chunks(2).map(|p| self.packed_word(&p[0], &p[1])).collect()),
            _ => ("b32", regs.to_vec()),
        };
        let guard = owner.map(|p| format!("@{p} ")).unwrap_or_default();
        let (v, list) = vector_operand(&words);
        self.emit(format!("{guard}st.shared{v}.{ty} [{addr}+{imm}], {list};"));
    }

    /// The accesses that move layout `l`'s registers to or from `tile` at
    /// `base`: runs of registers along the stored rows, up to 16 bytes.
    pub(super) fn shared_accesses(&mut self, l: &Layout, tile: &SharedTile, base: &str) -> Vec<SharedAccess> {
        let last = l.shape.len() - 1;
        let run = l.contiguous_run(last).min(16 / tile.elem_bytes);
        let thread_bits: Vec<(usize, usize)> = l
            .lane
            .iter()
            .chain(&l.warp)
            .enumerate()
            .filter_map(|(i, b)| b.map(|b| (i, tile.mask(b))))
            .collect();
        let thread_mask = thread_bits.iter().fold(0, |m, (_, b)| m | b);
        // The thread's part of every address: once per layout and tile.
        let key = (
            l.clone(),
            tile.swizzle.rows << 16 | tile.swizzle.row_bytes,
            "swizzled tile",
        );
        let thread = match self.fragment_offsets.get(&key) {
            Some(t) => t[0].clone(),
            None => {
                let t = self.in_prologue(|lower| {
                    let t = lower.reg(RegClass::B32);
                    lower.emit(format!("mov.b32 {t}, 0;"));
                    for &(i, mask) in &thread_bits {
                        let b = lower.reg(RegClass::B32);
                        lower.emit(format!("bfe.u32 {b}, {}, {i}, 1;", lower.tid));
                        lower.emit(format!("mul.lo.u32 {b}, {b}, {mask};"));
                        lower.emit(format!("xor.b32 {t}, {t}, {b};"));
                    }
                    t
                });
                self.fragment_offsets.insert(key, vec![t.clone()]);
                t
            }
        };
        // Register parts that overlap the thread's bits are XORed in (one
        // address register per distinct overlap); the rest is an offset.
        let mut bases: HashMap<usize, String> = HashMap::new();
        (0..l.num_regs())
            .step_by(run)
            .map(|first| {
                let part = l
                    .reg
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| first >> i & 1 == 1)
                    .fold(0, |m, (_, &b)| m ^ tile.mask(b));
                let overlap = part & thread_mask;
                let addr = match bases.get(&overlap) {
                    Some(a) => a.clone(),
                    None => {
                        let a = self.reg(RegClass::B32);
                        self.emit(format!("xor.b32 {a}, {thread}, {overlap};"));
                        self.emit(format!("add.s32 {a}, {a}, {base};"));
                        bases.insert(overlap, a.clone());
                        a
                    }
                };
                SharedAccess {
                    first,
                    width: run,
                    addr,
                    imm: part & !thread_mask,
                }
            })
            .collect()
    }
}

/// `.vN` and `{a, b, ..}` for several registers, or nothing and the one.
fn vector_operand(regs: &[String]) -> (String, String) {
    if regs.len() > 1 {
        (format!(".v{}", regs.len()), format!("{{{}}}", regs.join(", ")))
    } else {
        (String::new(), regs[0].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The XOR of the masks of an element's coordinate bits is the
    /// swizzled address [`Swizzle`] describes, and no two elements share one.
    #[test]
    fn masks_compose_the_swizzled_address() {
        for (shape, eb) in [
            (vec![128, 256], 2),
            (vec![64, 32], 4),
            (vec![16, 8], 2),
            (vec![2, 8, 64], 2),
        ] {
            let last = shape.len() - 1;
            let (rows, cols): (usize, usize) = (shape[..last].iter().product(), shape[last]);
            let tile = SharedTile {
                shape: &shape,
                elem_bytes: eb,
                swizzle: Swizzle {
                    rows,
                    row_bytes: cols * eb,
                },
                dropped: &[],
            };
            let line = tile.swizzle.line_bytes();
            let mut seen = std::collections::HashSet::new();
            for row in 0..rows {
                for col in 0..cols {
                    // Coordinate bits: the row's (spread over the leading dimensions) and the column's.
                    let mut coord = vec![0; shape.len()];
                    let mut r = row;
                    for d in (0..last).rev() {
                        coord[d] = r % shape[d];
                        r /= shape[d];
                    }
                    coord[last] = col;
                    let mut address = 0;
                    for (d, &c) in coord.iter().enumerate() {
                        for b in (0..32).filter(|b| c >> b & 1 == 1) {
                            address ^= tile.mask((d, b));
                        }
                    }
                    let (byte, per_line) = (col * eb, line / 16);
                    let chunk = byte / 16;
                    let phase = (row / (128 / line)) % per_line;
                    let want =
                        chunk / per_line * rows * line + row * line + ((chunk % per_line) ^ phase) * 16 + byte % 16;
                    assert_eq!(address, want, "{shape:?} x {eb} B at ({row}, {col})");
                    assert!(seen.insert(address) && address < rows * cols * eb);
                }
            }
        }
    }

    /// A tile converted in parts: with row bit 4 of 128x256 f32 dropped,
    /// row `r` takes the place row `r` without that bit has in a 64x256
    /// tile, so each part fills that tile exactly once.
    #[test]
    fn a_dropped_row_bit_folds_the_tile_onto_half_of_it() {
        let half = [64, 256];
        let swizzle = || Swizzle {
            rows: 64,
            row_bytes: 256 * 4,
        };
        let address = |tile: &SharedTile, row: usize, col: usize| {
            let bits = |d: usize, c: usize| (0..32).filter(move |b| c >> b & 1 == 1).map(move |b| (d, b));
            bits(0, row).chain(bits(1, col)).fold(0, |a, bit| a ^ tile.mask(bit))
        };
        let parts = SharedTile {
            shape: &half,
            elem_bytes: 4,
            swizzle: swizzle(),
            dropped: &[(0, 4)],
        };
        let plain = SharedTile {
            shape: &half,
            elem_bytes: 4,
            swizzle: swizzle(),
            dropped: &[],
        };
        for part in 0..2 {
            let mut seen = std::collections::HashSet::new();
            for row in (0..128).filter(|r| r >> 4 & 1 == part) {
                let folded = row & 15 | (row >> 5) << 4;
                for col in 0..256 {
                    let a = address(&parts, row, col);
                    assert_eq!(a, address(&plain, folded, col), "({row}, {col})");
                    assert!(seen.insert(a));
                }
            }
            assert_eq!(seen.len(), 64 * 256);
        }
    }
}
