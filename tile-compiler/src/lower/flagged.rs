//! Flagged tiles (NCCL's low-latency protocol, "LL"): `store_flagged` puts
//! each 4-byte word of data beside a 4-byte flag, two such pairs a 16-byte
//! line written by one `st.volatile.v4`; `load_flagged` reads its lines
//! again until every pair's flag is the one it expects. A reader that sees
//! a pair's flag has the pair's data (each 8-byte half of a line is
//! written whole), so no fence, barrier or separate flag stands between a
//! GPU's store into another's memory and the other's use of it: one link
//! crossing instead of data, fence, then flag.
//!
//! Flagged tensors are accessed with 16-byte lines in every variant (the
//! variants list them as vector-accessed, so a launch asks them to be
//! 16-byte aligned), whatever the other tensors allow: a reader and its
//! writer on another GPU may run different variants, and must agree on
//! the layout.

use super::emit::*;
use super::state::*;
use crate::ir::*;
use crate::layout::Layout;
use crate::ptx::RegClass;

impl Lower<'_> {
    /// The stores or loads that move tile `l` of flagged tensor `t` at
    /// tile-grid `index`: one per 8 bytes of the thread's data or, where
    /// its run along the last dimension holds two words, per 16-byte line.
    /// `width` counts data elements; the last dimension's offsets are
    /// doubled (data beside flags) and bounded by half its length.
    fn flagged_accesses(&mut self, t: usize, index: &[ValueId], l: &Layout, store: bool) -> Vec<Access> {
        let rank = self.func.tensor(t).rank;
        let eb = self.func.tensor(t).dtype.bytes();
        let (ptr, dims, strides) = {
            let tr = &self.tensors[&t];
            (tr.ptr.clone(), tr.dims.clone(), tr.strides.clone())
        };
        self.vector_accessed.insert(t);
        let last = rank - 1;
        let half = self.reg(RegClass::B32);
        self.emit(format!("shr.u32 {half}, {}, 1;", dims[last]));
        let base = self.thread_base(index, l);
        let width = l.contiguous_run(last).min(8 / eb);
        let owner = if store {
            self.owner_pred(l.replicated_mask())
        } else {
            None
        };
        let mut out = Vec::new();
        for first in (0..l.num_regs()).step_by(width) {
            let c = l.reg_coord(first);
            let mut off: Option<String> = None;
            let mut pred: Option<String> = owner.clone();
            for d in 0..rank {
                let bound = if d == last { half.clone() } else { dims[d].clone() };
                let (pos, inb) = self.position(&base[d], c[d], &bound);
                let o = self.reg(RegClass::B32);
                match d == last {
                    true => self.emit(format!("shl.b32 {o}, {pos}, 1;")),
                    false => self.emit(format!("mul.lo.s32 {o}, {pos}, {};", strides[d])),
                }
                off = Some(self.fold(off, o, "add.s32", RegClass::B32));
                pred = Some(self.fold(pred, inb, "and.pred", RegClass::Pred));
            }
            let addr = self.reg(RegClass::B64);
            self.emit(format!(
                "mad.wide.s32 {addr}, {}, {eb}, {ptr};",
                off.expect("rank >= 1")
            ));
            out.push(Access {
                first,
                width,
                addr,
                imm: 0,
                pred: pred.expect("rank >= 1"),
            });
        }
        out
    }

    /// The 32-bit words of registers `regs` of a `dtype` tile: pairs of
    /// 16-bit elements packed, 32-bit ones as they are.
    fn data_words(&mut self, regs: &[String], half_elements: bool) -> Vec<String> {
        match half_elements {
            true => regs.chunks(2).map(|p| self.packed_word(&p[0], &p[1])).collect(),
            false => regs
                .iter()
                .map(|r| {
                    let w = self.reg(RegClass::B32);
                    self.emit(format!("mov.b32 {w}, {r};"));
                    w
                })
                .collect(),
        }
    }

    /// `store_flagged`: each access's words, each beside `flag`, in one
    /// volatile store (the reader polls for them).
    pub(super) fn store_flagged(&mut self, t: usize, index: &[ValueId], value: ValueId, flag: ValueId) {
        let l = self.layout(value).clone();
        let half_elements = self.func.tensor(t).dtype.is_half();
        let vals = self.regs_of(value);
        let flag = self.scalar(flag);
        for a in self.flagged_accesses(t, index, &l, true) {
            let words = self.data_words(&vals[a.first..a.first + a.width], half_elements);
            let items: Vec<String> = words.iter().flat_map(|w| [w.clone(), flag.clone()]).collect();
            self.emit(format!(
                "@{} st.volatile.global.v{}.b32 [{}], {{{}}};",
                a.pred,
                items.len(),
                a.addr,
                items.join(", ")
            ));
        }
    }

    /// `load_flagged`: every thread reads its lines, the warp votes on
    /// whether each pair's flag was `flag`, and reads them all again until
    /// it was (a uniform loop, `bra.uni`). Lines out of bounds are not
    /// read: their data stays 0 and their flags count as seen.
    pub(super) fn load_flagged(&mut self, t: usize, index: &[ValueId], flag: ValueId, result: ValueId) -> Vec<String> {
        let l = self.layout(result).clone();
        let dtype = self.func.tensor(t).dtype;
        let eb = dtype.bytes();
        let flag = self.scalar(flag);
        let accesses = self.flagged_accesses(t, index, &l, false);
        let lines: Vec<(Vec<String>, Vec<String>)> = accesses
            .iter()
            .map(|a| {
                let words = (0..a.width * eb / 4).map(|_| self.copy(RegClass::B32, "0")).collect();
                let flags = (0..a.width * eb / 4).map(|_| self.copy(RegClass::B32, &flag)).collect();
                (words, flags)
            })
            .collect();
        let (poll, arrived) = (self.label("poll"), self.reg(RegClass::Pred));
        self.emit(format!("{poll}:"));
        for (a, (words, flags)) in accesses.iter().zip(&lines) {
            let items: Vec<String> = words
                .iter()
                .zip(flags)
                .flat_map(|(w, f)| [w.clone(), f.clone()])
                .collect();
            self.emit(format!(
                "@{} ld.volatile.global.v{}.b32 {{{}}}, [{}];",
                a.pred,
                items.len(),
                items.join(", "),
                a.addr
            ));
        }
        self.emit(format!("setp.eq.u32 {arrived}, {flag}, {flag};"));
        for f in lines.iter().flat_map(|(_, flags)| flags) {
            self.emit(format!("setp.eq.and.u32 {arrived}, {f}, {flag}, {arrived};"));
        }
        self.emit(format!("vote.sync.all.pred {arrived}, {arrived}, 0xffffffff;"));
        self.emit(format!("@!{arrived} bra.uni {poll};"));
        let mut regs = vec![String::new(); l.num_regs()];
        for (a, (words, _)) in accesses.iter().zip(&lines) {
            for (i, w) in words.iter().enumerate() {
                if dtype.is_half() {
                    let (lo, hi) = self.split_word(w);
                    regs[a.first + 2 * i] = lo;
                    regs[a.first + 2 * i + 1] = hi;
                } else {
                    let r = self.reg(RegClass::of(dtype));
                    self.emit(format!("mov.b32 {r}, {w};"));
                    regs[a.first + i] = r;
                }
            }
        }
        regs
    }
}
