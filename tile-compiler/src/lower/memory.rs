//! Global memory: tile loads and stores (16-byte vectors where the variant
//! allows), gathers, scatters and one-element reads, all bounds-checked.

use super::emit::*;
use super::state::*;
use crate::ir::*;
use crate::layout::Layout;
use crate::ptx::{RegClass, arith_type};
use std::collections::HashMap;

impl Lower<'_> {
    // ---- memory ---------------------------------------------------------------

    /// The address of the element at `coords` (registers) of tensor `t`, and
    /// the predicate that it is in bounds.
    pub(super) fn element_address(&mut self, t: usize, coords: &[String]) -> (String, String) {
        let eb = self.func.tensor(t).dtype.bytes();
        let (ptr, dims, strides) = {
            let tr = &self.tensors[&t];
            (tr.ptr.clone(), tr.dims.clone(), tr.strides.clone())
        };
        let mut off: Option<String> = None;
        let mut pred: Option<String> = None;
        for (d, i) in coords.iter().enumerate() {
            let p = self.reg(RegClass::Pred);
            self.emit(format!("setp.lt.u32 {p}, {i}, {};", dims[d]));
            pred = Some(self.fold(pred, p, "and.pred", RegClass::Pred));
            let o = self.reg(RegClass::B32);
            match off {
                None => self.emit(format!("mul.lo.s32 {o}, {i}, {};", strides[d])),
                Some(prev) => self.emit(format!("mad.lo.s32 {o}, {i}, {}, {prev};", strides[d])),
            }
            off = Some(o);
        }
        let a = self.reg(RegClass::B64);
        self.emit(format!("mad.wide.s32 {a}, {}, {eb}, {ptr};", off.expect("rank >= 1")));
        (a, pred.expect("rank >= 1"))
    }

    /// Reads one element (`pad` when out of bounds) with a predicated load.
    pub(super) fn load_element(&mut self, t: usize, coords: &[String], pad: &str) -> String {
        let path = self.read_path(t);
        self.read_element(t, coords, pad, path)
    }

    /// The cache path of tensor `t`'s reads: the non-coherent one
    /// (`.nc`) for a tensor the kernel neither writes nor waits on.
    fn read_path(&self, t: usize) -> &'static str {
        if self.func.tensor(t).mutable || self.plan.coherent_reads {
            ""
        } else {
            ".nc"
        }
    }

    /// [`Self::load_element`] through cache path `path` (`""`, `.nc`, `.cg`).
    fn read_element(&mut self, t: usize, coords: &[String], pad: &str, path: &str) -> String {
        let dtype = self.func.tensor(t).dtype;
        let (a, pred) = self.element_address(t, coords);
        let d = self.copy(RegClass::of(dtype), pad);
        let ty = if dtype.is_half() { "b16" } else { arith_type(dtype) };
        self.emit(format!("@{pred} ld.global{path}.{ty} {d}, [{a}];"));
        d
    }

    /// Asks L2 for tensor `t`'s tile of `shape` at tile-grid `index`: the
    /// block's threads take the tile's rows in runs of 128 bytes (a cache
    /// line when the last dimension is contiguous) in turn, one bounds-checked
    /// `prefetch.global.L2` each.
    pub(super) fn prefetch(&mut self, t: usize, index: &[ValueId], shape: &[usize]) {
        let last = shape.len() - 1;
        let run = (128 / self.func.tensor(t).dtype.bytes()).min(shape[last]);
        let runs = shape[last].div_ceil(run);
        let lines = shape[..last].iter().product::<usize>() * runs;
        let threads = self.func.num_warps as usize * 32;
        let origins: Vec<String> = (index.iter().zip(shape))
            .map(|(&i, &extent)| {
                let i = self.scalar(i);
                self.tile_origin(&i, extent)
            })
            .collect();
        let tid = self.block_tid();
        for first in (0..lines).step_by(threads) {
            let line = self.reg(RegClass::B32);
            self.emit(format!("add.u32 {line}, {tid}, {first};"));
            let mut coords = vec![String::new(); shape.len()];
            let (rest, at) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
            self.emit(format!("div.u32 {rest}, {line}, {runs};"));
            self.emit(format!("rem.u32 {at}, {line}, {runs};"));
            let c = self.reg(RegClass::B32);
            self.emit(format!("mad.lo.u32 {c}, {at}, {run}, {};", origins[last]));
            coords[last] = c;
            for d in (0..last).rev() {
                let (c, next) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
                self.emit(format!("rem.u32 {c}, {rest}, {};", shape[d]));
                self.emit(format!("add.u32 {c}, {c}, {};", origins[d]));
                self.emit(format!("div.u32 {next}, {rest}, {};", shape[d]));
                coords[d] = c;
                self.emit(format!("mov.u32 {rest}, {next};"));
            }
            let (a, mut pred) = self.element_address(t, &coords);
            if first + threads > lines {
                let (inside, both) = (self.reg(RegClass::Pred), self.reg(RegClass::Pred));
                self.emit(format!("setp.lt.u32 {inside}, {line}, {lines};"));
                self.emit(format!("and.pred {both}, {pred}, {inside};"));
                pred = both;
            }
            self.emit(format!("@{pred} prefetch.global.L2 [{a}];"));
        }
    }

    pub(super) fn get(&mut self, t: usize, index: &[ValueId], result: ValueId) -> String {
        let coords: Vec<String> = index.iter().map(|i| self.scalar(*i)).collect();
        let zero = self.constant(ConstVal::Int(0), self.func.tensor(t).dtype);
        let path = if self.plan.hint_reads.contains(&result) {
            // A hint read: through L2 alone (`plan::dependency`).
            ".cg"
        } else {
            self.read_path(t)
        };
        self.read_element(t, &coords, &zero, path)
    }

    /// A block's `fetch_add`: after a barrier (the block's accesses before
    /// it are done), its first thread releases them and adds with an
    /// acquire-release `atom` at GPU scope, and hands the old value to the
    /// block through the scratch area behind a second barrier (the block's
    /// accesses after it follow the acquire). CUTLASS's semaphores order a
    /// block's work the same way.
    pub(super) fn fetch_add(&mut self, t: usize, index: &[ValueId], value: ValueId) -> String {
        let coords: Vec<String> = index.iter().map(|i| self.scalar(*i)).collect();
        let v = self.scalar(value);
        let (a, inside) = self.element_address(t, &coords);
        let base = self.scratch_base();
        let (first, adds) = self.first_thread_and(&inside);
        let old = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {old}, 0;"));
        self.barrier();
        self.emit(format!("@{adds} fence.acq_rel.gpu;"));
        self.emit(format!("@{adds} atom.acq_rel.gpu.global.add.u32 {old}, [{a}], {v};"));
        self.emit(format!("@{first} st.shared.b32 [{base}], {old};"));
        self.barrier();
        let got = self.reg(RegClass::B32);
        self.emit(format!("ld.shared.b32 {got}, [{base}];"));
        got
    }

    /// A block's `signal`: every thread fences at system scope (its stores
    /// before, peer memory's included, are performed for every observer),
    /// a barrier waits for them all, and the first thread stores the value
    /// with a release at system scope. One thread's release after a barrier
    /// does not cover the other warps' stores to another GPU's memory, which
    /// may still be on the link: a one-thread signal after stores by
    /// several warps into peer memory let the peer read stale tiles.
    pub(super) fn signal(&mut self, t: usize, index: &[ValueId], value: ValueId) {
        let coords: Vec<String> = index.iter().map(|i| self.scalar(*i)).collect();
        let v = self.scalar(value);
        let (a, inside) = self.element_address(t, &coords);
        let (_, sets) = self.first_thread_and(&inside);
        self.emit("fence.acq_rel.sys;");
        self.barrier();
        self.emit(format!("@{sets} st.release.sys.global.b32 [{a}], {v};"));
    }

    /// A block's `wait`: its first warp reads the element with acquire
    /// loads at system scope until it has reached the value (the
    /// difference, as i32, is not negative, so a counter may wrap), and a
    /// barrier holds the block's other warps until then: every access
    /// after it follows the acquire. The warp votes on each read, so its
    /// loop is uniform (`bra.uni`): a loop of one thread diverges, and
    /// ptxas keeps its reconvergence state on the stack.
    pub(super) fn wait(&mut self, t: usize, index: &[ValueId], value: ValueId) {
        let coords: Vec<String> = index.iter().map(|i| self.scalar(*i)).collect();
        let v = self.scalar(value);
        let (a, inside) = self.element_address(t, &coords);
        let (first_warp, waits) = (self.reg(RegClass::Pred), self.reg(RegClass::Pred));
        let tid = self.block_tid();
        self.emit(format!("setp.lt.u32 {first_warp}, {tid}, 32;"));
        self.emit(format!("and.pred {waits}, {first_warp}, {inside};"));
        let (poll, done) = (self.label("poll"), self.label("signalled"));
        let (seen, behind) = (self.reg(RegClass::B32), self.reg(RegClass::Pred));
        self.emit(format!("@!{waits} bra.uni {done};"));
        self.emit(format!("{poll}:"));
        self.emit(format!("ld.acquire.sys.global.b32 {seen}, [{a}];"));
        self.emit(format!("sub.s32 {seen}, {seen}, {v};"));
        self.emit(format!("setp.lt.s32 {behind}, {seen}, 0;"));
        self.emit(format!("vote.sync.any.pred {behind}, {behind}, 0xffffffff;"));
        self.emit(format!("@{behind} bra.uni {poll};"));
        self.emit(format!("{done}:"));
        self.barrier();
    }

    /// Two predicates: this is the block's first thread; and, besides,
    /// `pred` holds.
    fn first_thread_and(&mut self, pred: &str) -> (String, String) {
        let (first, both) = (self.reg(RegClass::Pred), self.reg(RegClass::Pred));
        let tid = self.block_tid();
        self.emit(format!("setp.eq.u32 {first}, {tid}, 0;"));
        self.emit(format!("and.pred {both}, {first}, {pred};"));
        (first, both)
    }

    pub(super) fn gather(&mut self, t: usize, index: &[ValueId], pad: ValueId) -> Vec<String> {
        let pad = self.scalar(pad);
        let idx: Vec<Vec<String>> = index.iter().map(|i| self.regs_of(*i)).collect();
        (0..idx[0].len())
            .map(|e| {
                let coords: Vec<String> = idx.iter().map(|i| i[e].clone()).collect();
                self.load_element(t, &coords, &pad)
            })
            .collect()
    }

    /// Writes each element of `value` to its index (one thread per element:
    /// copies in a replicated layout write once).
    pub(super) fn scatter(&mut self, t: usize, index: &[ValueId], value: ValueId) {
        let dtype = self.func.tensor(t).dtype;
        let instr = if dtype.is_half() {
            "st.global.b16".to_string()
        } else {
            format!("st.global.{}", arith_type(dtype))
        };
        let owner = self.owner_pred(self.layout(value).replicated_mask());
        let vals = self.regs_of(value);
        let idx: Vec<Vec<String>> = index.iter().map(|i| self.regs_of(*i)).collect();
        for (e, v) in vals.iter().enumerate() {
            let (a, pred) = self.owned_address(t, &idx, e, owner.as_deref());
            self.emit(format!("@{pred} {instr} [{a}], {v};"));
        }
    }

    /// A tile atomic. Each element's owner (copies in a replicated layout
    /// combine once) combines it at GPU scope: with `red` where nobody
    /// reads the old values and nothing is acquired, else with `atom`, whose
    /// old values the owners hand to the copies through the scratch area.
    /// The ordering holds for the block: a barrier before a release (the
    /// block's accesses are done before it), one after an acquire (the
    /// block's accesses after it follow it).
    pub(super) fn atomic(
        &mut self,
        (t, index, value, compare): (usize, &[ValueId], ValueId, Option<ValueId>),
        (op, order): (AtomicOp, MemOrder),
        result: Option<ValueId>,
    ) -> Vec<String> {
        let dtype = self.func.tensor(t).dtype;
        let layout = self.layout(value);
        let mask = layout.replicated_mask();
        let owner = self.owner_pred(mask);
        let vals = self.regs_of(value);
        let cmps = compare.map(|c| self.regs_of(c));
        let idx: Vec<Vec<String>> = index.iter().map(|i| self.regs_of(*i)).collect();
        let fetch = result.is_some() || order.acquires() || matches!(op, AtomicOp::Exch | AtomicOp::Cas);
        let sem = match order {
            MemOrder::Relaxed => "relaxed",
            MemOrder::Acquire => "acquire",
            MemOrder::Release => "release",
            MemOrder::AcqRel => "acq_rel",
        };
        let name = match op {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
            AtomicOp::Exch => "exch",
            AtomicOp::Cas => "cas",
        };
        let ty = match op {
            AtomicOp::Exch | AtomicOp::Cas => "b32".to_string(),
            // 16-bit floats add without flushing subnormals.
            AtomicOp::Add if dtype.is_half() => format!("noftz.{}", arith_type(dtype)),
            _ => arith_type(dtype).to_string(),
        };
        let instr = format!("{}.{sem}.gpu.global.{name}.{ty}", if fetch { "atom" } else { "red" });
        if order.releases() {
            self.barrier();
        }
        let class = RegClass::of(dtype);
        let zero = self.constant(ConstVal::Int(0), dtype);
        let mut olds = Vec::new();
        for (e, v) in vals.iter().enumerate() {
            let (a, pred) = self.owned_address(t, &idx, e, owner.as_deref());
            if !fetch {
                self.emit(format!("@{pred} {instr} [{a}], {v};"));
                continue;
            }
            let old = self.copy(class, &zero);
            match &cmps {
                Some(c) => self.emit(format!("@{pred} {instr} {old}, [{a}], {}, {v};", c[e])),
                None => self.emit(format!("@{pred} {instr} {old}, [{a}], {v};")),
            }
            olds.push(old);
        }
        if result.is_none() || mask == 0 {
            if order.acquires() {
                self.barrier();
            }
            // Unread old values (`fetch` for an acquire or an exchange) are dropped.
            return if result.is_some() { olds } else { vec![] };
        }
        // The copies of each element take the owner's old value.
        let eb = dtype.bytes();
        let base = self.smem_base(layout, eb);
        let guard = owner.map(|p| format!("@{p} ")).unwrap_or_default();
        self.barrier();
        for (e, old) in olds.iter().enumerate() {
            let imm = flat(&layout.reg_coord(e), &layout.shape) * eb;
            self.emit(format!("{guard}st.shared.b{} {}, {old};", eb * 8, addr(&base, imm)));
        }
        self.barrier();
        (0..olds.len())
            .map(|e| {
                let imm = flat(&layout.reg_coord(e), &layout.shape) * eb;
                let r = self.reg(class);
                self.emit(format!("ld.shared.b{} {r}, {};", eb * 8, addr(&base, imm)));
                r
            })
            .collect()
    }

    /// The address of element `e` of the index tiles `idx` in tensor `t`,
    /// and the predicate that it is in bounds and this thread owns it.
    fn owned_address(&mut self, t: usize, idx: &[Vec<String>], e: usize, owner: Option<&str>) -> (String, String) {
        let coords: Vec<String> = idx.iter().map(|i| i[e].clone()).collect();
        let (a, pred) = self.element_address(t, &coords);
        match owner {
            None => (a, pred),
            Some(o) => {
                let n = self.reg(RegClass::Pred);
                self.emit(format!("and.pred {n}, {pred}, {o};"));
                (a, n)
            }
        }
    }

    /// `base + k` and whether it is below `dim`.
    pub(super) fn position(&mut self, base: &str, k: usize, dim: &str) -> (String, String) {
        let pos = if k == 0 {
            base.to_string()
        } else {
            let p = self.reg(RegClass::B32);
            self.emit(format!("add.s32 {p}, {base}, {k};"));
            p
        };
        let inb = self.reg(RegClass::Pred);
        self.emit(format!("setp.lt.u32 {inb}, {pos}, {dim};"));
        (pos, inb)
    }

    /// This thread's first element along each dimension of tile `l` at
    /// tile-grid `index`.
    pub(super) fn thread_base(&mut self, index: &[ValueId], l: &Layout) -> Vec<String> {
        let index: Vec<String> = index.iter().map(|&i| self.scalar(i)).collect();
        let coords = self.coords(l);
        (0..l.shape.len())
            .map(|d| {
                let origin = self.tile_origin(&index[d], l.shape[d]);
                match &coords[d] {
                    None => origin,
                    Some(c) => {
                        let b = self.reg(RegClass::B32);
                        self.emit(format!("add.s32 {b}, {origin}, {c};"));
                        b
                    }
                }
            })
            .collect()
    }

    /// The accesses that move tile `l` of tensor `t` at tile-grid `index`.
    pub(super) fn accesses(&mut self, t: usize, index: &[ValueId], l: &Layout, store: bool) -> Vec<Access> {
        let param = self.func.tensor(t).clone();
        let rank = param.rank;
        let eb = param.dtype.bytes();
        let (ptr, dims, strides) = {
            let tr = &self.tensors[&t];
            (tr.ptr.clone(), tr.dims.clone(), tr.strides.clone())
        };
        let base = self.thread_base(index, l);
        let vectors = self.vectorized.contains(&t);
        if vectors {
            self.vector_accessed.insert(t);
        }
        let width = if vectors {
            l.contiguous_run(rank - 1).min(16 / eb)
        } else {
            1
        };
        // With a contiguous last dimension, its offsets are immediates.
        let strided_dims = if vectors { rank - 1 } else { rank };
        let owner = if store {
            self.owner_pred(l.replicated_mask())
        } else {
            None
        };

        let mut dim_terms: HashMap<(usize, usize), (String, String)> = HashMap::new();
        let mut rows: HashMap<Vec<usize>, (String, Option<String>)> = HashMap::new();
        let mut last_preds: HashMap<usize, String> = HashMap::new();
        let mut out = Vec::new();
        for first in (0..l.num_regs()).step_by(width) {
            let c = l.reg_coord(first);
            let key: Vec<usize> = c[..strided_dims].to_vec();
            if let std::collections::hash_map::Entry::Vacant(slot) = rows.entry(key.clone()) {
                let mut off: Option<String> = None;
                let mut pred: Option<String> = None;
                for d in 0..strided_dims {
                    let k = c[d];
                    let (o, inb) = match dim_terms.get(&(d, k)) {
                        Some(t) => t.clone(),
                        None => {
                            let (pos, inb) = self.position(&base[d], k, &dims[d]);
                            let o = self.reg(RegClass::B32);
                            self.emit(format!("mul.lo.s32 {o}, {pos}, {};", strides[d]));
                            dim_terms.insert((d, k), (o.clone(), inb.clone()));
                            (o, inb)
                        }
                    };
                    off = Some(self.fold(off, o, "add.s32", RegClass::B32));
                    pred = Some(self.fold(pred, inb, "and.pred", RegClass::Pred));
                }
                let last = rank - 1;
                let off = if vectors {
                    match off {
                        None => base[last].clone(),
                        Some(o) => {
                            let s = self.reg(RegClass::B32);
                            self.emit(format!("add.s32 {s}, {o}, {};", base[last]));
                            s
                        }
                    }
                } else {
                    off.expect("rank >= 1")
                };
                let a = self.reg(RegClass::B64);
                self.emit(format!("mad.wide.s32 {a}, {off}, {eb}, {ptr};"));
                slot.insert((a, pred));
            }
            let (a, row_pred) = rows[&key].clone();
            let mut preds: Vec<String> = row_pred.into_iter().collect();
            let mut imm = 0;
            if vectors {
                let k = c[rank - 1];
                imm = k * eb;
                let inb = match last_preds.get(&k) {
                    Some(p) => p.clone(),
                    None => {
                        let (_, inb) = self.position(&base[rank - 1], k, &dims[rank - 1]);
                        last_preds.insert(k, inb.clone());
                        inb
                    }
                };
                preds.push(inb);
            }
            preds.extend(owner.clone());
            let mut pred = preds[0].clone();
            for p in &preds[1..] {
                let n = self.reg(RegClass::Pred);
                self.emit(format!("and.pred {n}, {pred}, {p};"));
                pred = n;
            }
            out.push(Access {
                first,
                width,
                addr: a,
                imm,
                pred,
            });
        }
        out
    }

    pub(super) fn load(&mut self, t: usize, index: &[ValueId], pad: ValueId, result: ValueId) -> Vec<String> {
        let l = self.layout(result);
        let dtype = self.func.tensor(t).dtype;
        let nc = self.read_path(t);
        let pad = self.scalar(pad);
        let accesses = self.accesses(t, index, l, false);
        let mut regs = vec![String::new(); l.num_regs()];
        for a in accesses {
            let target = addr(&a.addr, a.imm);
            if dtype.is_half() && a.width >= 2 {
                let words = a.width / 2;
                let packed = self.reg(RegClass::B32);
                self.emit(format!("mov.b32 {packed}, {{{pad}, {pad}}};"));
                let ws: Vec<String> = (0..words).map(|_| self.copy(RegClass::B32, &packed)).collect();
                let (v, list) = if words > 1 {
                    (format!(".v{words}"), format!("{{{}}}", ws.join(", ")))
                } else {
                    (String::new(), ws[0].clone())
                };
                self.emit(format!("@{} ld.global{nc}{v}.b32 {list}, {target};", a.pred));
                for (i, w) in ws.iter().enumerate() {
                    let (lo, hi) = self.split_word(w);
                    regs[a.first + 2 * i] = lo;
                    regs[a.first + 2 * i + 1] = hi;
                }
                continue;
            }
            let class = RegClass::of(dtype);
            let ds: Vec<String> = (0..a.width).map(|_| self.copy(class, &pad)).collect();
            let ty = if dtype.is_half() { "b16" } else { arith_type(dtype) };
            let (v, list) = if a.width > 1 {
                (format!(".v{}", a.width), format!("{{{}}}", ds.join(", ")))
            } else {
                (String::new(), ds[0].clone())
            };
            self.emit(format!("@{} ld.global{nc}{v}.{ty} {list}, {target};", a.pred));
            for (i, d) in ds.into_iter().enumerate() {
                regs[a.first + i] = d;
            }
        }
        regs
    }

    pub(super) fn store(&mut self, t: usize, index: &[ValueId], value: ValueId) {
        if self.tma_store(t, index, value) {
            return;
        }
        let l = self.layout(value);
        let dtype = self.func.tensor(t).dtype;
        let vals = self.regs_of(value);
        let accesses = self.accesses(t, index, l, true);
        for a in accesses {
            let target = addr(&a.addr, a.imm);
            let regs = &vals[a.first..a.first + a.width];
            let (ty, items): (&str, Vec<String>) = if dtype.is_half() && a.width >= 2 {
                let words = regs.chunks(2).map(|p| self.packed_word(&p[0], &p[1])).collect();
                ("b32", words)
            } else if dtype.is_half() {
                ("b16", regs.to_vec())
            } else {
                (arith_type(dtype), regs.to_vec())
            };
            let (v, list) = if items.len() > 1 {
                (format!(".v{}", items.len()), format!("{{{}}}", items.join(", ")))
            } else {
                (String::new(), items[0].clone())
            };
            self.emit(format!("@{} st.global{v}.{ty} {target}, {list};", a.pred));
        }
    }
}
