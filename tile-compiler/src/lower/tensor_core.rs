//! Tensor cores: `mma.sync` over fragment layouts, and moving operand tiles
//! into those layouts through swizzled shared memory with `ldmatrix`.

use super::emit::Lower;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::Layout;
use crate::plan::Operand;
use crate::plan::scratch::operand_tile;
use crate::plan::swizzle::Swizzle;
use crate::ptx::{RegClass, arith_type};
use std::collections::HashMap;

/// Fragment element offsets (row, col) of lane 0, per PTX's `mma.sync`
/// layouts: m16n8k16 for 16-bit operands, m16n8k8 for tf32.
type Fragment = &'static [(usize, usize)];
pub(super) const HALF_A: Fragment = &[(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)];
const HALF_B: Fragment = &[(0, 0), (1, 0), (8, 0), (9, 0)];
const TF32_A: Fragment = &[(0, 0), (8, 0), (0, 4), (8, 4)];
const TF32_B: Fragment = &[(0, 0), (4, 0)];
pub(super) const ACC: Fragment = &[(0, 0), (0, 1), (8, 0), (8, 1)];

/// Where each of `units` shared-memory reads (registers, or `ldmatrix`
/// groups) lands, the units numbered by layout register bits whose byte
/// offsets are `bit_offsets` (`None` for bits the swizzle mixes). The
/// units whose unmixed bits are all zero (the classes, returned first)
/// each need a per-thread offset; every unit is its class's address
/// (index) plus an immediate.
fn address_classes(units: usize, bit_offsets: &[Option<usize>]) -> (Vec<usize>, Vec<(usize, usize)>) {
    let mixed: usize = (bit_offsets.iter().enumerate())
        .filter(|(_, o)| o.is_none())
        .map(|(i, _)| 1 << i)
        .sum();
    let classes: Vec<usize> = (0..units).filter(|u| u & !mixed == 0).collect();
    let at = (0..units)
        .map(|u| {
            let class = (classes.iter())
                .position(|&c| c == u & mixed)
                .expect("every class has an offset");
            let fixed = (bit_offsets.iter().enumerate())
                .filter(|(i, _)| (u & !mixed) >> i & 1 == 1)
                .map(|(_, o)| o.expect("not mixed"))
                .sum();
            (class, fixed)
        })
        .collect();
    (classes, at)
}

impl Lower<'_> {
    /// Runs `f` with its instructions going to the prologue: for values that
    /// depend only on the thread, computed once instead of in every loop trip.
    pub(super) fn in_prologue<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let saved = std::mem::take(&mut self.code);
        let r = f(self);
        let emitted = std::mem::replace(&mut self.code, saved);
        self.prologue.extend(emitted);
        r
    }

    /// `base + panel * rows * line + row * line + ((chunk % per_line) ^ phase(row)) * 16`
    /// for register values (see [`Swizzle`]).
    pub(super) fn swizzled(&mut self, base: &str, row: &str, chunk: &str, sw: &Swizzle) -> String {
        let phase = self.reg(RegClass::B32);
        self.emit(format!(
            "shr.u32 {phase}, {row}, {};",
            sw.rows_per_line().trailing_zeros()
        ));
        self.emit(format!("and.b32 {phase}, {phase}, {};", sw.phases() - 1));
        let c = self.reg(RegClass::B32);
        self.emit(format!("xor.b32 {c}, {chunk}, {phase};"));
        let a = self.reg(RegClass::B32);
        if sw.row_bytes > 128 {
            // The panel's chunk bits pass through the XOR untouched.
            let (panel, within) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
            self.emit(format!("shr.u32 {panel}, {c}, 3;"));
            self.emit(format!("and.b32 {within}, {c}, 7;"));
            self.emit(format!("mad.lo.s32 {a}, {row}, 8, {within};"));
            self.emit(format!("mad.lo.s32 {a}, {panel}, {}, {a};", sw.rows * 8));
            self.emit(format!("shl.b32 {a}, {a}, 4;"));
        } else {
            self.emit(format!("shl.b32 {a}, {c}, 4;"));
            self.emit(format!("mad.lo.s32 {a}, {row}, {}, {a};", sw.row_bytes));
        }
        self.emit(format!("add.s32 {a}, {a}, {base};"));
        a
    }

    /// `values[index]` as a register, for a small table and a register index.
    pub(super) fn pick(&mut self, index: &str, values: &[usize]) -> String {
        let d = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {d}, {};", values[0]));
        for (j, v) in values.iter().enumerate().skip(1) {
            let p = self.reg(RegClass::Pred);
            self.emit(format!("setp.eq.u32 {p}, {index}, {j};"));
            self.emit(format!("selp.b32 {d}, {v}, {d}, {p};"));
        }
        d
    }

    /// `reg + k` (or `k`) as a register.
    pub(super) fn plus(&mut self, reg: &Option<String>, k: usize) -> String {
        let d = self.reg(RegClass::B32);
        match reg {
            Some(r) => self.emit(format!("add.s32 {d}, {r}, {k};")),
            None => self.emit(format!("mov.b32 {d}, {k};")),
        }
        d
    }

    /// Moves a 16-bit operand tile from a layout with 16-byte runs into its
    /// `mma` fragment layout: vector stores into swizzled shared memory, then
    /// `ldmatrix` (transposing where the fragment pairs run across the stored
    /// rows); the source has such runs ([`operand_tile`]).
    pub(super) fn stage_operand(&mut self, arg: ValueId, result: ValueId, role: Operand) -> Vec<String> {
        let (la, lb) = (self.layout(arg), self.layout(result));
        let eb = self.dtype(arg).bytes();
        let vec = 16 / eb;
        // The stored orientation: rows run along the source's contiguous dimension.
        let (contiguous, sw) = operand_tile(la, lb, eb).expect("planned");
        let other = 1 - contiguous;
        let base = self.scratch_base();

        // Stores: one 16-byte chunk of consecutive elements at a time.
        let src = self.regs_of(arg);
        let tc = self.coords(la);
        let owner = self.owner_pred(la.replicated_mask());
        self.barrier();
        for first in (0..la.num_regs()).step_by(vec) {
            let c = la.reg_coord(first);
            let row = self.plus(&tc[other], c[other]);
            let col = self.plus(&tc[contiguous], c[contiguous]);
            let chunk = self.reg(RegClass::B32);
            self.emit(format!("shr.u32 {chunk}, {col}, {};", vec.trailing_zeros()));
            let a = self.swizzled(&base, &row, &chunk, &sw);
            let words: Vec<String> = if eb == 4 {
                src[first..first + 4].to_vec()
            } else {
                src[first..first + 8]
                    .chunks(2)
                    .map(|p| self.packed_word(&p[0], &p[1]))
                    .collect()
            };
            let guard = owner.as_ref().map(|p| format!("@{p} ")).unwrap_or_default();
            self.emit(format!("{guard}st.shared.v4.b32 [{a}], {{{}}};", words.join(", ")));
        }
        self.barrier();

        self.read_fragments(&base, lb, (contiguous, eb), role)
            .unwrap_or_else(|| self.read_elements(&base, lb, contiguous))
    }

    /// Reads a 32-bit operand in layout `lb` element by element from a
    /// swizzled shared tile at `base` (`ldmatrix` moves 16-bit elements).
    pub(super) fn read_elements(&mut self, base: &str, lb: &Layout, contiguous: usize) -> Vec<String> {
        let other = 1 - contiguous;
        let sw = Swizzle {
            rows: lb.shape[other],
            row_bytes: lb.shape[contiguous] * 4,
        };
        let bit_offsets: Vec<Option<usize>> = lb.reg.iter().map(|&(d, b)| sw.bit_offset(d == other, b, 4)).collect();
        let (classes, at) = address_classes(lb.num_regs(), &bit_offsets);
        let key = (lb.clone(), contiguous, "ld.shared");
        let offsets = match self.fragment_offsets.get(&key) {
            Some(o) => o.clone(),
            None => {
                let o = self.in_prologue(|l| {
                    let tc = l.coords(lb);
                    let zero = l.reg(RegClass::B32);
                    l.emit(format!("mov.b32 {zero}, 0;"));
                    classes
                        .iter()
                        .map(|&r| {
                            let c = lb.reg_coord(r);
                            let row = l.plus(&tc[other], c[other]);
                            let col = l.plus(&tc[contiguous], c[contiguous]);
                            let chunk = l.reg(RegClass::B32);
                            l.emit(format!("shr.u32 {chunk}, {col}, 2;"));
                            let a = l.swizzled(&zero, &row, &chunk, &sw);
                            let within = l.reg(RegClass::B32);
                            l.emit(format!("and.b32 {within}, {col}, 3;"));
                            l.emit(format!("mad.lo.s32 {a}, {within}, 4, {a};"));
                            a
                        })
                        .collect::<Vec<String>>()
                });
                self.fragment_offsets.insert(key, o.clone());
                o
            }
        };
        let addresses = self.class_addresses(base, &offsets);
        at.into_iter()
            .map(|(class, fixed)| {
                let d = self.reg(RegClass::F32);
                self.emit(format!("ld.shared.f32 {d}, [{}+{fixed}];", addresses[class]));
                d
            })
            .collect()
    }

    /// `base` plus each class's per-thread offset (see [`address_classes`]).
    fn class_addresses(&mut self, base: &str, offsets: &[String]) -> Vec<String> {
        offsets
            .iter()
            .map(|off| {
                let a = self.reg(RegClass::B32);
                self.emit(format!("add.s32 {a}, {base}, {off};"));
                a
            })
            .collect()
    }

    /// Reads an operand of `eb`-byte elements in fragment layout `lb` from a
    /// swizzled shared tile at `base` whose rows run along operand dimension
    /// `contiguous`, with `ldmatrix`. Each fragment word (a pair of 16-bit
    /// elements, or one 32-bit element) is a block of eight rows of 16
    /// bytes; `ldmatrix` gives lane t word t % 4 of row t / 4 of the block,
    /// whose words run along the fragment's K direction. Where K crosses the
    /// stored rows a 16-bit tile is read transposed (`.trans` moves 16-bit
    /// elements); `None` for a 32-bit one, which is then read element by
    /// element ([`Self::read_elements`]).
    pub(super) fn read_fragments(
        &mut self,
        base: &str,
        lb: &Layout,
        (contiguous, eb): (usize, usize),
        role: Operand,
    ) -> Option<Vec<String>> {
        let sw = Swizzle {
            rows: lb.shape[1 - contiguous],
            row_bytes: lb.shape[contiguous] * eb,
        };
        let trans = if role.k_dim() == contiguous { "" } else { ".trans" };
        if eb == 4 && !trans.is_empty() {
            return None;
        }
        let key = (
            lb.clone(),
            contiguous,
            match (eb, trans.is_empty()) {
                (4, _) => "ldmatrix.b32",
                (_, true) => "ldmatrix",
                (_, false) => "ldmatrix.trans",
            },
        );
        let per_word = 4 / eb;
        let word_regs: Vec<usize> = (0..lb.num_regs()).step_by(per_word).collect();
        // Groups of four words differ by the register bits above the first
        // `in_group`.
        let in_group = (4 * per_word).trailing_zeros() as usize;
        let other = 1 - contiguous;
        let bit_offsets: Vec<Option<usize>> = (lb.reg.iter().skip(in_group))
            .map(|&(d, b)| sw.bit_offset(d == other, b, eb))
            .collect();
        let (classes, at) = address_classes(word_regs.len().div_ceil(4), &bit_offsets);
        let offsets = match self.fragment_offsets.get(&key) {
            Some(o) => o.clone(),
            None => {
                let o = self.in_prologue(|l| l.fragment_offsets_of(lb, (contiguous, eb), &sw, &classes));
                self.fragment_offsets.insert(key, o.clone());
                o
            }
        };
        let addresses = self.class_addresses(base, &offsets);
        let mut out = vec![String::new(); lb.num_regs()];
        for (group, (class, fixed)) in word_regs.chunks(4).zip(at) {
            let words: Vec<String> = group.iter().map(|_| self.reg(RegClass::B32)).collect();
            self.emit(format!(
                "ldmatrix.sync.aligned.m8n8.x{}{trans}.shared.b16 {{{}}}, [{}+{fixed}];",
                group.len(),
                words.join(", "),
                addresses[class]
            ));
            for (&r, w) in group.iter().zip(&words) {
                if eb == 4 {
                    let f = self.reg(RegClass::F32);
                    self.emit(format!("mov.b32 {f}, {w};"));
                    out[r] = f;
                } else {
                    let (lo, hi) = self.split_word(w);
                    out[r] = lo;
                    out[r + 1] = hi;
                }
            }
        }
        Some(out)
    }

    /// This thread's `ldmatrix` row address (relative to the tile) for each
    /// of the `groups` of four fragment words of `lb` (`eb`-byte elements).
    fn fragment_offsets_of(
        &mut self,
        lb: &Layout,
        (contiguous, eb): (usize, usize),
        sw: &Swizzle,
        groups: &[usize],
    ) -> Vec<String> {
        let other = 1 - contiguous;
        let warp_only = Layout {
            lane: vec![None; lb.lane.len()],
            ..lb.clone()
        };
        let wc = self.coords(&warp_only);
        let lane = self.reg(RegClass::B32);
        self.emit(format!("and.b32 {lane}, {}, 31;", self.tid));
        let (block, row8) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
        self.emit(format!("shr.u32 {block}, {lane}, 3;"));
        self.emit(format!("and.b32 {row8}, {lane}, 7;"));
        let zero = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {zero}, 0;"));
        let word_regs: Vec<usize> = (0..lb.num_regs()).step_by(4 / eb).collect();
        let mut offsets = Vec::new();
        for &g in groups {
            let group = &word_regs[4 * g..word_regs.len().min(4 * g + 4)];
            // Lane 8j + i addresses row i of block j of this group.
            let origin = |r: usize| -> (usize, usize) {
                let c = lb.reg_coord(r);
                (c[other], c[contiguous])
            };
            let rows: Vec<usize> = group.iter().map(|&r| origin(r).0).collect();
            let cols: Vec<usize> = group.iter().map(|&r| origin(r).1).collect();
            let row_origin = self.pick(&block, &rows);
            let col_origin = self.pick(&block, &cols);
            let row = self.reg(RegClass::B32);
            self.emit(format!("add.s32 {row}, {row_origin}, {row8};"));
            if let Some(w) = &wc[other] {
                self.emit(format!("add.s32 {row}, {row}, {w};"));
            }
            let col = self.reg(RegClass::B32);
            match &wc[contiguous] {
                Some(w) => self.emit(format!("add.s32 {col}, {col_origin}, {w};")),
                None => self.emit(format!("mov.b32 {col}, {col_origin};")),
            }
            let chunk = self.reg(RegClass::B32);
            self.emit(format!("shr.u32 {chunk}, {col}, {};", (16 / eb).trailing_zeros()));
            offsets.push(self.swizzled(&zero, &row, &chunk, sw));
        }
        offsets
    }

    /// `acc + a @ b` as `mma.sync` steps of 16x8x16 (16x8x8 for tf32) over
    /// each warp's tile. Operands are in the fragment layouts of
    /// [`Layout::mma_a`] / [`Layout::mma_b`] and the result in `acc`'s.
    pub(super) fn mma(&mut self, a: ValueId, b: ValueId, acc: ValueId) -> Vec<String> {
        let (la, lb, lc) = (self.layout(a), self.layout(b), self.layout(acc));
        let dtype = self.dtype(a);
        let tf32 = dtype == DType::F32;
        let (m, k, n) = (la.shape[0], la.shape[1], lb.shape[1]);
        // The warp tile: what the accumulator's warp bits leave of each side.
        let split = |dim| lc.warp.iter().flatten().filter(|b| b.0 == dim).count();
        let (tm, tn) = (m >> split(0), n >> split(1));
        let step_k = if tf32 { 8 } else { 16 };
        let (ia, ib, ic) = (la.reg_index(), lb.reg_index(), lc.reg_index());
        let (ra, rb) = (self.regs_of(a), self.regs_of(b));
        let mut out = self.regs_of(acc);
        let (a_frag, b_frag) = if tf32 { (TF32_A, TF32_B) } else { (HALF_A, HALF_B) };
        let c_frag = ACC;
        // Operand registers as the tensor cores take them: pairs of halves
        // packed into 32 bits, or f32 rounded to tf32, to nearest even as
        // cuBLAS and the `wgmma` path's TMA copies round (one instruction
        // on sm_90, where `cvt.rna` takes three).
        let pack = |lower: &mut Self,
                    regs: &[String],
                    frag: &[(usize, usize)],
                    index: &HashMap<Vec<usize>, usize>,
                    base: (usize, usize)|
         -> Vec<String> {
            let at = |(dr, dc): (usize, usize)| regs[index[&vec![base.0 + dr, base.1 + dc]]].clone();
            if tf32 {
                frag.iter()
                    .map(|&o| {
                        let t = lower.reg(RegClass::B32);
                        lower.emit(format!("cvt.rn.tf32.f32 {t}, {};", at(o)));
                        t
                    })
                    .collect()
            } else {
                frag.chunks(2)
                    .map(|p| lower.packed_word(&at(p[0]), &at(p[1])))
                    .collect()
            }
        };
        let shape = if tf32 { "m16n8k8" } else { "m16n8k16" };
        let ty = arith_type(if tf32 { DType::F32 } else { dtype });
        let ty = if tf32 { "tf32" } else { ty };
        for ks in 0..k / step_k {
            let a_frags: Vec<Vec<String>> = (0..tm / 16)
                .map(|mi| pack(self, &ra, a_frag, &ia, (mi * 16, ks * step_k)))
                .collect();
            let b_frags: Vec<Vec<String>> = (0..tn / 8)
                .map(|ni| pack(self, &rb, b_frag, &ib, (ks * step_k, ni * 8)))
                .collect();
            for (mi, af) in a_frags.iter().enumerate() {
                for (ni, bf) in b_frags.iter().enumerate() {
                    let slots: Vec<usize> = c_frag
                        .iter()
                        .map(|&(dr, dc)| ic[&vec![mi * 16 + dr, ni * 8 + dc]])
                        .collect();
                    let c: Vec<String> = slots.iter().map(|&i| out[i].clone()).collect();
                    let d: Vec<String> = (0..4).map(|_| self.reg(RegClass::F32)).collect();
                    self.emit(format!(
                        "mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 {{{}}}, {{{}}}, {{{}}}, {{{}}};",
                        d.join(", "),
                        af.join(", "),
                        bf.join(", "),
                        c.join(", ")
                    ));
                    for (&i, r) in slots.iter().zip(d) {
                        out[i] = r;
                    }
                }
            }
        }
        out
    }
}
