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

use super::Lower;
use super::tensor_core::Swizzle;
use crate::dtype::DType;
use crate::ir::ValueId;
use crate::layout::{Bit, Layout};
use crate::ptx::RegClass;
use std::collections::HashMap;

/// A tile of `shape` stored as rows along its last dimension, swizzled.
pub(super) struct SharedTile<'s> {
    pub(super) shape: &'s [usize],
    pub(super) elem_bytes: usize,
    pub(super) swizzle: Swizzle,
}

impl SharedTile<'_> {
    /// The address bits coordinate bit `(dim, b)` sets (XORed together):
    /// none for a bit past the tile's extent (a panel of a wider tile,
    /// whose other panels take turns in the same place: `tma_store.rs`).
    fn mask(&self, (dim, b): Bit) -> usize {
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
    /// `arg` converted to `result`'s layout through a swizzled shared tile;
    /// `None` for elements other than 2 or 4 bytes, or rows under 16 bytes.
    pub(super) fn convert_swizzled(&mut self, arg: ValueId, result: ValueId) -> Option<Vec<String>> {
        let (la, lb) = (self.layout(arg), self.layout(result));
        let dtype = self.dtype(arg);
        let (eb, class) = match dtype {
            DType::F16 | DType::BF16 => (2, RegClass::B16),
            DType::F32 => (4, RegClass::F32),
            DType::I32 | DType::U32 => (4, RegClass::B32),
            DType::Bool => return None,
        };
        let cols = *la.shape.last()?;
        let rows: usize = la.shape[..la.shape.len() - 1].iter().product();
        if cols * eb < 16 {
            return None;
        }
        let tile = SharedTile {
            shape: &la.shape,
            elem_bytes: eb,
            swizzle: Swizzle {
                rows,
                row_bytes: cols * eb,
            },
        };
        self.shared_bytes = self.shared_bytes.max(rows * cols * eb);
        let src = self.regs_of(arg);
        let base = self.scratch_base();
        let owner = self.owner_pred(la.replicated_mask());
        self.barrier();
        for a in self.shared_accesses(la, &tile, &base) {
            self.store_shared(&src[a.first..a.first + a.width], eb, (&a.addr, a.imm), owner.as_deref());
        }
        self.barrier();
        let mut out = Vec::with_capacity(lb.num_regs());
        for a in self.shared_accesses(lb, &tile, &base) {
            if eb == 2 && a.width > 1 {
                let words: Vec<String> = (0..a.width / 2).map(|_| self.reg(RegClass::B32)).collect();
                let (v, list) = vector_operand(&words);
                self.emit(format!("ld.shared{v}.b32 {list}, [{}+{}];", a.addr, a.imm));
                for w in words {
                    let (h0, h1) = self.split_word(&w);
                    out.extend([h0, h1]);
                }
            } else {
                let regs: Vec<String> = (0..a.width).map(|_| self.reg(class)).collect();
                let ty = match class {
                    RegClass::F32 => "f32",
                    RegClass::B16 => "b16",
                    _ => "b32",
                };
                let (v, list) = vector_operand(&regs);
                self.emit(format!("ld.shared{v}.{ty} {list}, [{}+{}];", a.addr, a.imm));
                out.extend(regs);
            }
        }
        Some(out)
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
}
