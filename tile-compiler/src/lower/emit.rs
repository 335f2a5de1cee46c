//! The emitter: the lowering's state (registers handed out, values' registers,
//! the prologue and body text) and the helpers every op family uses.

use super::MmaPath;
use super::state::*;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::{Bit, Layout, Layouts};
use crate::plan::Operand;
use crate::plan::memory::ScratchAt;
use crate::plan::{Context, Plan};
use crate::ptx::{EntryParam, RegClass, Regs, arith_type, f32_imm};
use std::collections::{BTreeSet, HashMap, HashSet};

/// What thread coordinates depend on: the lane and warp bits of a layout, and its rank.
type ThreadBits = (Vec<Option<Bit>>, Vec<Option<Bit>>, usize);

pub(super) struct Lower<'a> {
    /// The variant's function, layouts and the facts about its values.
    pub(super) cx: &'a Context<'a>,
    /// What was decided for the variant: lowering follows it.
    pub(super) plan: &'a Plan,
    pub(super) func: &'a Func,
    pub(super) path: MmaPath,
    /// `wgmma` groups an iteration of the current pipelined loop leaves running.
    pub(super) wgmma_in_flight: usize,
    /// Tensor maps the TMA copies use, with the register holding each one's address.
    pub(super) tensor_maps: Vec<(TensorMap, String)>,
    /// Their kernel parameters, declared after the regular ones.
    pub(super) tma_params: Vec<EntryParam>,
    /// Set when the kernel is warp-specialized and persistent.
    pub(super) roles: Option<WarpRoles>,
    /// Set when a portable kernel runs two tiles per persistent block (see
    /// `lower/persistent.rs`).
    pub(super) persistent: Option<Persistent>,
    pub(super) entry: String,
    pub(super) layouts: &'a Layouts,
    /// The tensor parameters accessed with 16-byte vectors.
    pub(super) vectorized: &'a [usize],
    pub(super) regs: Regs,
    pub(super) prologue: Vec<String>,
    pub(super) code: Vec<String>,
    pub(super) vals: HashMap<ValueId, Vec<String>>,
    pub(super) tid: String,
    pub(super) tensors: HashMap<usize, TensorRegs>,
    pub(super) thread_coords: HashMap<ThreadBits, Coords>,
    pub(super) repl_preds: HashMap<u32, String>,
    pub(super) specials: HashMap<String, String>,
    pub(super) labels: usize,
    /// Per-thread shared-memory offsets computed once in the prologue: keyed
    /// by layout and a discriminating pair (fragment reads: stored
    /// orientation and transposition; pipeline copies: element size).
    pub(super) fragment_offsets: HashMap<(Layout, usize, &'static str), Vec<String>>,
    /// Ops not to emit: loads a pipeline replaced with asynchronous copies.
    pub(super) skip: HashSet<ValueId>,
    /// Conversions a pipeline serves from shared memory: the tile's address
    /// register, its stored orientation, and the operand role.
    pub(super) staged_reads: HashMap<ValueId, (String, usize, Operand)>,
    /// Loop-invariant `wgmma` A operands stored once before their loop
    /// straight from the tile they convert (`convert -> source`), not
    /// converted first ([`Lower::staged_once`]).
    pub(super) stored_unconverted: HashMap<ValueId, ValueId>,
    /// Staged conversions whose tiles have their rows interleaved
    /// ([`pipeline::interleaved_row`]).
    pub(super) interleaved: HashSet<ValueId>,
    /// The tensors accessed with vectors other than by TMA.
    pub(super) vector_accessed: BTreeSet<usize>,
    /// Words split into 16-bit halves ([`Lower::split_word`]), by their
    /// halves: packing the same halves again ([`Lower::packed_word`]) is
    /// the word itself. Nothing writes a word or its halves after the split.
    pub(super) split_words: HashMap<(String, String), String>,
    /// Sort networks emitted in the op list being lowered, by argument,
    /// axis, direction and kept length: their values and positions, so
    /// that `topk` and `argtopk` of one tile share one network.
    pub(super) networks: HashMap<(ValueId, usize, bool, usize), SortLines>,
    /// Gathers stored whose cluster has not met yet: what each reads back
    /// once it has.
    pub(super) gathered: Vec<Gathered>,
}

pub(super) fn mov_type(class: RegClass) -> &'static str {
    match class {
        RegClass::Pred => "pred",
        RegClass::B16 => "b16",
        RegClass::B32 => "b32",
        RegClass::F32 => "f32",
        RegClass::B64 => "b64",
    }
}

/// Row-major strides of a shape, in elements.
pub(super) fn row_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

pub(super) fn flat(coord: &[usize], shape: &[usize]) -> usize {
    coord.iter().zip(row_strides(shape)).map(|(c, s)| c * s).sum()
}

pub(super) fn addr(base: &str, imm: usize) -> String {
    if imm == 0 {
        format!("[{base}]")
    } else {
        format!("[{base}+{imm}]")
    }
}

impl<'a> Lower<'a> {
    pub(super) fn emit(&mut self, s: impl Into<String>) {
        self.code.push(s.into());
    }

    pub(super) fn reg(&mut self, class: RegClass) -> String {
        self.regs.new_reg(class)
    }

    pub(super) fn layout(&self, v: ValueId) -> &'a Layout {
        &self.layouts[&v]
    }

    pub(super) fn dtype(&self, v: ValueId) -> DType {
        self.func.values[v].dtype
    }

    /// A barrier among the threads that compute: the whole block, or with
    /// warp specialization the consumer warps alone (named barrier 1), or
    /// their ping-pong consumer's (named barriers 3 and 4).
    pub(super) fn barrier(&mut self) {
        if let Some(t) = &self.persistent {
            let line = format!("bar.sync {}, {};", t.barrier, self.func.num_warps * 32);
            self.emit(line);
            return;
        }
        match &self.roles {
            None => self.emit("bar.sync 0;"),
            Some(r) => {
                let id = r
                    .consumer
                    .as_ref()
                    .map_or(CONSUMER_BARRIER.to_string(), |t| t.barrier.clone());
                self.emit(format!("bar.sync {id}, {};", r.consumers / r.consumer_groups))
            }
        }
    }

    /// This thread's index among the threads that compute one block: the
    /// block's, or with ping-pong consumers its consumer warpgroup's (the
    /// second one's threads follow the first's). A persistent block's
    /// halves already count their own threads. What "the block's first
    /// thread" or "first warp" means to an op that one thread or warp
    /// performs for the block (`fetch_add`, `signal`, `wait`).
    pub(super) fn block_tid(&mut self) -> String {
        let group_threads = match &self.roles {
            Some(r) if r.consumer_groups > 1 => r.consumers / r.consumer_groups,
            _ => return self.tid.clone(),
        };
        let t = self.reg(RegClass::B32);
        self.emit(format!("and.b32 {t}, {}, {};", self.tid, group_threads - 1));
        t
    }

    pub(super) fn label(&mut self, what: &str) -> String {
        self.labels += 1;
        format!("$L{what}{}", self.labels)
    }

    // ---- entry and prologue ----------------------------------------------

    pub(super) fn params(&mut self, entry: &str) -> Vec<EntryParam> {
        let mut out = Vec::new();
        self.tid = self.reg(RegClass::B32);
        let tid = self.tid.clone();
        self.prologue.push(format!("mov.u32 {tid}, %tid.x;"));
        for (i, p) in self.func.params.iter().enumerate() {
            match p {
                Param::Tensor(t) => {
                    let name = format!("{entry}_p{i}_ptr");
                    let raw = self.reg(RegClass::B64);
                    let ptr = self.reg(RegClass::B64);
                    self.prologue.push(format!("ld.param.u64 {raw}, [{name}];"));
                    self.prologue.push(format!("cvta.to.global.u64 {ptr}, {raw};"));
                    out.push(EntryParam { name, ty: "u64" });
                    let mut dims = Vec::new();
                    let mut strides = Vec::new();
                    for (kind, list) in [("d", &mut dims), ("s", &mut strides)] {
                        for d in 0..t.rank {
                            let name = format!("{entry}_p{i}_{kind}{d}");
                            let r = self.reg(RegClass::B32);
                            self.prologue.push(format!("ld.param.u32 {r}, [{name}];"));
                            out.push(EntryParam { name, ty: "u32" });
                            list.push(r);
                        }
                    }
                    self.tensors.insert(i, TensorRegs { ptr, dims, strides });
                }
                Param::Scalar { dtype, .. } => {
                    let name = format!("{entry}_p{i}");
                    let ty = match dtype {
                        DType::F32 => "f32",
                        DType::U32 => "u32",
                        _ => "s32",
                    };
                    out.push(EntryParam { name, ty });
                }
            }
        }
        out
    }

    pub(super) fn special(&mut self, name: &str) -> String {
        if let Some(r) = self.specials.get(name) {
            return r.clone();
        }
        let r = self.reg(RegClass::B32);
        self.prologue.push(format!("mov.u32 {r}, {name};"));
        self.specials.insert(name.to_string(), r.clone());
        r
    }

    /// The registers of `v`, converted to `to`.
    pub(super) fn regs_as(&mut self, v: ValueId, to: DType) -> Vec<String> {
        let from = self.dtype(v);
        let regs = self.regs_of(v);
        if from == to {
            return regs;
        }
        regs.iter().map(|r| self.cast(from, to, r)).collect()
    }

    /// Whether bit `i` of this thread's index is set (lane bits 0 to 4,
    /// warp bits above): a scan's or a sort's upper partner across it.
    pub(super) fn thread_bit(&mut self, i: usize) -> String {
        let (t, p) = (self.reg(RegClass::B32), self.reg(RegClass::Pred));
        self.emit(format!("bfe.u32 {t}, {}, {i}, 1;", self.tid));
        self.emit(format!("setp.ne.u32 {p}, {t}, 0;"));
        p
    }

    /// What `regs` (of `class`, 32 or 64 bits each) hold in the thread
    /// across thread-index bit `i` (another warp): through the scratch
    /// area, a slot of `regs` a thread, between barriers.
    pub(super) fn across_warps(&mut self, regs: &[String], class: RegClass, i: usize) -> Vec<String> {
        let bytes = if class == RegClass::B64 { 8 } else { 4 };
        let slot = regs.len() * bytes;
        let base = self.scratch_base();
        let (mine, theirs, t) = (
            self.reg(RegClass::B32),
            self.reg(RegClass::B32),
            self.reg(RegClass::B32),
        );
        let tid = self.block_tid();
        self.emit(format!("mad.lo.s32 {mine}, {tid}, {slot}, {base};"));
        self.emit(format!("xor.b32 {t}, {tid}, {};", 1 << i));
        self.emit(format!("mad.lo.s32 {theirs}, {t}, {slot}, {base};"));
        self.barrier();
        for (q, r) in regs.iter().enumerate() {
            self.emit(format!("st.shared.b{} {}, {r};", bytes * 8, addr(&mine, q * bytes)));
        }
        self.barrier();
        (0..regs.len())
            .map(|q| {
                let o = self.reg(class);
                self.emit(format!("ld.shared.b{} {o}, {};", bytes * 8, addr(&theirs, q * bytes)));
                o
            })
            .collect()
    }

    /// Each register's coordinate along `axis` in layout `l` (i32).
    pub(super) fn axis_positions(&mut self, l: &Layout, axis: usize) -> Vec<String> {
        let coords = self.coords(l);
        (0..l.num_regs())
            .map(|r| {
                let k = l.reg_coord(r)[axis];
                let d = self.reg(RegClass::B32);
                match &coords[axis] {
                    Some(c) => self.emit(format!("add.s32 {d}, {c}, {k};")),
                    None => self.emit(format!("mov.b32 {d}, {k};")),
                }
                d
            })
            .collect()
    }

    /// The coordinates of this thread's first element in layout `l`, per dimension.
    pub(super) fn coords(&mut self, l: &Layout) -> Coords {
        let key = (l.lane.clone(), l.warp.clone(), l.shape.len());
        if let Some(c) = self.thread_coords.get(&key) {
            return c.clone();
        }
        // Thread-index bit i (lanes first, then warps) selects coordinate bit bits[i].
        let bits: Vec<Option<Bit>> = l.lane.iter().chain(&l.warp).copied().collect();
        let mut coords: Coords = vec![None; l.shape.len()];
        let mut i = 0;
        while i < bits.len() {
            let Some((d, b)) = bits[i] else {
                i += 1;
                continue;
            };
            // A run of thread bits that select consecutive bits of one dimension.
            let mut len = 1;
            while i + len < bits.len() && bits[i + len] == Some((d, b + len as u32)) {
                len += 1;
            }
            let t = self.reg(RegClass::B32);
            self.prologue.push(format!("bfe.u32 {t}, {}, {i}, {len};", self.tid));
            if b > 0 {
                self.prologue.push(format!("shl.b32 {t}, {t}, {b};"));
            }
            coords[d] = Some(match coords[d].take() {
                None => t,
                Some(prev) => {
                    let s = self.reg(RegClass::B32);
                    self.prologue.push(format!("or.b32 {s}, {prev}, {t};"));
                    s
                }
            });
            i += len;
        }
        self.thread_coords.insert(key, coords.clone());
        coords
    }

    /// True in the one thread of each group of copies (see `Layout::replicated_mask`).
    pub(super) fn owner_pred(&mut self, mask: u32) -> Option<String> {
        if mask == 0 {
            return None;
        }
        if let Some(p) = self.repl_preds.get(&mask) {
            return Some(p.clone());
        }
        let t = self.reg(RegClass::B32);
        let p = self.reg(RegClass::Pred);
        self.prologue.push(format!("and.b32 {t}, {}, {mask};", self.tid));
        self.prologue.push(format!("setp.eq.u32 {p}, {t}, 0;"));
        self.repl_preds.insert(mask, p.clone());
        Some(p)
    }

    /// The row-major flat index of this thread's coordinates in `shape`.
    pub(super) fn thread_flat(&mut self, coords: &Coords, shape: &[usize]) -> Option<String> {
        let mut acc: Option<String> = None;
        for (c, s) in coords.iter().zip(row_strides(shape)) {
            let Some(c) = c else { continue };
            let term = if s == 1 {
                c.clone()
            } else {
                let t = self.reg(RegClass::B32);
                self.emit(format!("shl.b32 {t}, {c}, {};", s.trailing_zeros()));
                t
            };
            acc = Some(self.fold(acc, term, "add.s32", RegClass::B32));
        }
        acc
    }

    /// The first element of tile `index` (a register) along a dimension of
    /// `extent` elements: `index * extent`, formed in 32 bits without
    /// wrapping. An index whose origin would reach the sign bit (negative
    /// ones included, read unsigned) is clamped to the first such index:
    /// its origin is then at or just past the sign bit, beyond every
    /// dimension a launch accepts, whether bounds are checked unsigned or
    /// as a signed TMA coordinate, and positions within the tile added to
    /// it cannot wrap back. So a tile past the tensor reads its padding
    /// and writes nothing however large the grid, as on the CPU, whose
    /// origins are exact; a wrapped origin would land on another block's tile.
    pub(super) fn tile_origin(&mut self, index: &str, extent: usize) -> String {
        if extent == 1 {
            return index.to_string();
        }
        let first_past = (1usize << 31).div_ceil(extent);
        let clamped = self.reg(RegClass::B32);
        self.emit(format!("min.u32 {clamped}, {index}, {first_past};"));
        let origin = self.reg(RegClass::B32);
        if extent.is_power_of_two() {
            self.emit(format!("shl.b32 {origin}, {clamped}, {};", extent.trailing_zeros()));
        } else {
            self.emit(format!("mul.lo.u32 {origin}, {clamped}, {extent};"));
        }
        origin
    }

    /// The start of the scratch area (reductions, layout conversions,
    /// operand staging), in a new register.
    pub(super) fn scratch_base(&mut self) -> String {
        let base = match self.plan.scratch_at {
            ScratchAt::Static => {
                let base = self.reg(RegClass::B32);
                self.emit(format!("mov.u32 {base}, smem;"));
                base
            }
            ScratchAt::Dynamic(offset) => self.dynamic_address(offset, None),
        };
        // Ping-pong consumers: this thread's consumer's part.
        if let Some(part) = self.roles.as_ref().and_then(|r| r.consumer.as_ref()?.scratch.clone()) {
            self.emit(format!("add.s32 {base}, {base}, {part};"));
        }
        base
    }

    /// `offset` bytes into dynamic shared memory, plus `index * stride`
    /// when given (a register and a byte stride), in a new register.
    pub(super) fn dynamic_address(&mut self, offset: usize, index: Option<(&str, usize)>) -> String {
        let a = self.reg(RegClass::B32);
        self.emit(format!("mov.u32 {a}, {}_dyn_smem;", self.entry));
        self.emit(format!("add.s32 {a}, {a}, {offset};"));
        if let Some(t) = &self.persistent {
            let line = format!("add.s32 {a}, {a}, {};", t.offset);
            self.emit(line);
        }
        if let Some((index, stride)) = index {
            self.emit(format!("mad.lo.s32 {a}, {index}, {stride}, {a};"));
        }
        a
    }

    /// The shared-memory address of this thread's first element, `bytes` per element.
    pub(super) fn smem_base(&mut self, l: &Layout, bytes: usize) -> String {
        // The thread's coordinates first (they are kept for the layout), so
        // that registers are numbered as they always were.
        self.coords(l);
        let base = self.scratch_base();
        self.row_major_at(l, bytes, base)
    }

    /// The address of this thread's first element of a tile in layout `l`
    /// stored row-major from `base`, `bytes` per element: register `r`'s
    /// element lies `flat(l.reg_coord(r)) * bytes` past it.
    pub(super) fn row_major_at(&mut self, l: &Layout, bytes: usize, base: String) -> String {
        let coords = self.coords(l);
        let Some(f) = self.thread_flat(&coords, &l.shape) else {
            return base;
        };
        let t = self.reg(RegClass::B32);
        self.emit(format!("mad.lo.s32 {t}, {f}, {bytes}, {base};"));
        t
    }

    // ---- element-wise helpers ------------------------------------------------

    pub(super) fn mov(&mut self, class: RegClass, dst: &str, src: &str) {
        self.emit(format!("mov.{} {dst}, {src};", mov_type(class)));
    }

    pub(super) fn copy(&mut self, class: RegClass, src: &str) -> String {
        let d = self.reg(class);
        self.mov(class, &d, src);
        d
    }

    /// `term` combined into `acc` by the binary `op` (`add.s32`,
    /// `and.pred`) into a new register of `class`, or `term` itself when
    /// `acc` is empty: a sum or conjunction built one term at a time.
    pub(super) fn fold(&mut self, acc: Option<String>, term: String, op: &str, class: RegClass) -> String {
        match acc {
            None => term,
            Some(a) => {
                let d = self.reg(class);
                self.emit(format!("{op} {d}, {a}, {term};"));
                d
            }
        }
    }

    /// The two 16-bit halves of word `w`, low first.
    pub(super) fn split_word(&mut self, w: &str) -> (String, String) {
        let (lo, hi) = (self.reg(RegClass::B16), self.reg(RegClass::B16));
        self.emit(format!("mov.b32 {{{lo}, {hi}}}, {w};"));
        self.split_words.insert((lo.clone(), hi.clone()), w.to_string());
        (lo, hi)
    }

    /// The word of 16-bit halves `lo` and `hi`: the word they were split
    /// from, if they were, so that an `ldmatrix` or load result reaches an
    /// `mma` or store as it was read. Packing it anew left ptxas moving
    /// operand fragments between registers: 48 of the 250 instructions of a
    /// 128x128x64 bf16 K-step.
    pub(super) fn packed_word(&mut self, lo: &str, hi: &str) -> String {
        if let Some(w) = self.split_words.get(&(lo.to_string(), hi.to_string())) {
            return w.clone();
        }
        let w = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {w}, {{{lo}, {hi}}};"));
        w
    }

    pub(super) fn widen(&mut self, r: &str, dtype: DType) -> String {
        match dtype {
            DType::F16 | DType::BF16 => {
                let f = self.reg(RegClass::F32);
                self.emit(format!("cvt.f32.{} {f}, {r};", arith_type(dtype)));
                f
            }
            _ => r.to_string(),
        }
    }

    pub(super) fn narrow(&mut self, r: &str, dtype: DType) -> String {
        match dtype {
            DType::F16 | DType::BF16 => {
                let h = self.reg(RegClass::B16);
                self.emit(format!("cvt.rn.{}.f32 {h}, {r};", arith_type(dtype)));
                h
            }
            _ => r.to_string(),
        }
    }

    pub(super) fn constant(&mut self, c: ConstVal, dtype: DType) -> String {
        match (c, dtype) {
            (ConstVal::Bool(b), _) => {
                let r = self.reg(RegClass::B32);
                let p = self.reg(RegClass::Pred);
                self.emit(format!("mov.u32 {r}, {};", b as u32));
                self.emit(format!("setp.ne.u32 {p}, {r}, 0;"));
                p
            }
            (ConstVal::Int(i), DType::I32 | DType::U32) => {
                let r = self.reg(RegClass::B32);
                self.emit(format!("mov.b32 {r}, {};", i as u32));
                r
            }
            (ConstVal::Int(i), d) => self.constant(ConstVal::Float(i as f64), d),
            (ConstVal::Float(x), d) => {
                let f = self.reg(RegClass::F32);
                self.emit(format!("mov.f32 {f}, {};", f32_imm(x)));
                self.narrow(&f, d)
            }
        }
    }

    pub(super) fn f32_const(&mut self, x: f64) -> String {
        self.constant(ConstVal::Float(x), DType::F32)
    }

    // ---- ops ------------------------------------------------------------------

    /// Lowers an op list; what its ops share (sort networks) stays in it.
    pub(super) fn ops(&mut self, ops: &[Op]) {
        let outer = std::mem::take(&mut self.networks);
        for op in ops {
            self.op(op);
        }
        self.networks = outer;
    }

    pub(super) fn regs_of(&self, v: ValueId) -> Vec<String> {
        self.vals[&v].clone()
    }

    pub(super) fn scalar(&self, v: ValueId) -> String {
        self.vals[&v][0].clone()
    }
}
