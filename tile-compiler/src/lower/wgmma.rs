//! Hopper's warpgroup tensor cores (sm_90a): emits each `mma` as the plan
//! decided it ([`Product`]): `wgmma.mma_async` reading shared-memory
//! operands through matrix descriptors, accumulating in registers laid out
//! as [`Layout::wgmma_acc`](crate::layout::Layout::wgmma_acc). An
//! accumulator the loop does not carry as the product's own (a fresh
//! `zeros`, `acc * alpha`) gets registers of its own, and the product is
//! awaited at once.

use super::convert::SharedTile;
use super::emit::Lower;
use super::tensor_core::{ACC, HALF_A};
use crate::dtype::DType;
use crate::ir::ValueId;
use crate::layout::Layout;
use crate::plan::Operand;
use crate::plan::swizzle::Swizzle;
use crate::plan::wgmma::{Product, SLAB_M, SharedOperand, Step};
use crate::ptx::{RegClass, arith_type};
use std::collections::HashMap;

/// The bits of an f32 that tf32 keeps (all but the low 13 of the mantissa).
const TF32_BITS: i32 = -8192;

impl Lower<'_> {
    /// `acc + a @ b` with `wgmma`, as planned.
    pub(super) fn wgmma(&mut self, a: ValueId, b: ValueId, acc: ValueId, result: ValueId) -> Vec<String> {
        match self.plan.products[&result].clone() {
            Product::Direct {
                step_k,
                n_step,
                steps,
                a: op_a,
                b: op_b,
                a_origins,
                b_origins,
                in_place,
            } => self.wgmma_direct(
                (a, b, acc),
                (step_k, n_step, &steps),
                (op_a, op_b),
                (&a_origins, &b_origins),
                in_place,
            ),
            Product::Swapped {
                m_step,
                steps,
                a: op_a,
                a_origins,
                fragment,
                b_contiguous,
                k_steps,
            } => self.wgmma_swapped(
                (a, b, acc),
                (m_step, &steps, k_steps),
                (&op_a, &a_origins),
                (&fragment, b_contiguous),
            ),
        }
    }

    /// A product's operand's address in shared memory (a register).
    fn shared_base(&self, v: ValueId) -> String {
        self.staged_reads[&v].0.clone()
    }

    /// [`Product::Direct`]: `b` (and `a` unless from registers) through
    /// descriptors, `n_step` columns and `step_k` of K a `wgmma`.
    fn wgmma_direct(
        &mut self,
        (a, b, acc): (ValueId, ValueId, ValueId),
        (step_k, n_step, steps): (usize, usize, &[Step]),
        (op_a, op_b): (Option<SharedOperand>, SharedOperand),
        (a_origin, b_origin): (&[usize], &[usize]),
        in_place: bool,
    ) -> Vec<String> {
        let dtype = self.dtype(a);
        let tf32 = dtype == DType::F32;
        let register_a = op_a.is_none();
        let (picked, scale_d) = self.warpgroup_offsets(&[a_origin, b_origin]);
        let (wg_a, wg_b) = (&picked[0], &picked[1]);
        let desc_a = match &op_a {
            Some(o) => {
                let base = self.shared_base(a);
                Some(self.descriptor(&base, wg_a, o.bits))
            }
            None => None,
        };
        let base_b = self.shared_base(b);
        let desc_b = self.descriptor(&base_b, wg_b, op_b.bits);
        // From registers (attention's `p`): each step's A fragment.
        let fragments = if register_a {
            self.fragments(a, &steps.iter().map(|s| (s.row, s.k)).collect::<Vec<_>>())
        } else {
            HashMap::new()
        };

        let lc = self.layout(acc);
        let index = lc.reg_index();
        let out: Vec<String> = if in_place {
            self.regs_of(acc)
        } else {
            self.regs_of(acc).iter().map(|r| self.copy(RegClass::F32, r)).collect()
        };
        // The operand types, and the transposition flags 16-bit operands
        // take (from registers, `a` takes none).
        let (ty, trans) = match &op_a {
            _ if tf32 => ("tf32", String::new()),
            Some(o) => (
                arith_type(dtype),
                format!(", {}, {}", u8::from(!o.k_major), u8::from(!op_b.k_major)),
            ),
            None => (arith_type(dtype), format!(", {}", u8::from(!op_b.k_major))),
        };
        self.emit("wgmma.fence.sync.aligned;");
        for s in steps {
            let da = match &desc_a {
                Some(d) => self.offset_descriptor(d, s.a),
                None => format!("{{{}}}", fragments[&(s.row, s.k)]),
            };
            let db = self.offset_descriptor(&desc_b, s.b);
            let (row, col) = (s.row, s.col);
            let regs: Vec<String> = (0..n_step / 8)
                .flat_map(|j| ACC.iter().map(move |&(dr, dc)| vec![row + dr, col + j * 8 + dc]))
                .map(|c| out[index[&c]].clone())
                .collect();
            self.emit(format!(
                "wgmma.mma_async.sync.aligned.m64n{n_step}k{step_k}.f32.{ty}.{ty} {{{}}}, {da}, {db}, {scale_d}, 1, 1{trans};",
                regs.join(", ")
            ));
        }
        self.emit("wgmma.commit_group.sync.aligned;");
        // In place, the previous iteration's group must be done: its stage
        // is refilled next. Otherwise this one must: its result is read next.
        let in_flight = if in_place { self.wgmma_in_flight } else { 0 };
        self.emit(format!("wgmma.wait_group.sync.aligned {in_flight};"));
        // The accumulator's registers are the result.
        out
    }

    /// tf32 `acc + a @ b` (`a: [m, k]`, `b: [k, n]`, K a whole number of
    /// steps) with `a` K-major and `b` N-major, computed
    /// transposed: `acc^T += b^T a^T`. `b`'s tile goes from its stage into
    /// registers as `wgmma`'s A operand ([`Layout::wgmma_a_swapped`], rounded
    /// to tf32), `a`'s tile is its B operand, read through a descriptor as
    /// K-major; the accumulator has the matching transposed layout. A's
    /// registers are rewritten by the next iteration's reads: a group
    /// reading them must be done by then.
    fn wgmma_swapped(
        &mut self,
        (a, b, acc): (ValueId, ValueId, ValueId),
        (m_step, steps, k_steps): (usize, &[(usize, usize, usize)], usize),
        (op_a, origins): (&SharedOperand, &[usize]),
        (fragment, b_contiguous): (&Layout, usize),
    ) -> Vec<String> {
        let step_k = self.layout(a).shape[1] / k_steps;
        let a_offset = |s: &(usize, usize, usize)| Product::swapped_a_offset(op_a, m_step, 0, s);
        let b_base = self.shared_base(b);
        let (picked, scale_d) = self.warpgroup_offsets(&[origins]);
        let base_a = self.shared_base(a);
        let desc = self.descriptor(&base_a, &picked[0], op_a.bits);
        let index = self.layout(acc).reg_index();
        let out = self.regs_of(acc);
        // `b`'s fragment: register `i + 4 (ks + K/8 slab)`.
        let stored = if self.interleaved.contains(&b) {
            fragment.rename_bits(0, crate::plan::pipeline::interleaved_row)
        } else {
            fragment.clone()
        };
        let elements = self.read_elements(&b_base, &stored, b_contiguous);
        // Two groups per iteration, each on its own half of K's steps, when
        // the loop leaves one running: the second half's registers are read
        // while the first half's group runs, and the next iteration's first
        // half while this one's second runs.
        let split = if self.wgmma_in_flight == 1 && k_steps >= 2 {
            k_steps / 2
        } else {
            k_steps
        };
        let halves = [0..split, split..k_steps];
        let halves = &halves[..if split < k_steps { 2 } else { 1 }];
        for (h, half) in halves.iter().enumerate() {
            if h > 0 {
                // The previous iteration's group on these registers must be done.
                self.emit("wgmma.wait_group.sync.aligned 1;");
            }
            // The stage holds tf32 already (its TMA copy rounded it,
            // [`super::tma::TensorMap::tf32`]): masking the low 13 bits
            // changes no value. It keeps an ALU operation between each
            // `ld.shared` and the `wgmma` reading its register: when ptxas
            // let `wgmma` read the loaded registers directly, clustered
            // 128x256 tiles computed wrong 64x128 blocks now and then,
            // `wgmma.fence` notwithstanding. `cvt.rna` would take three
            // instructions.
            let mut fragments = HashMap::new();
            for (r, element) in elements.iter().enumerate() {
                if half.contains(&(r / 4 % k_steps)) {
                    let t = self.reg(RegClass::B32);
                    self.emit(format!("and.b32 {t}, {element}, {TF32_BITS};"));
                    fragments.insert(r, t);
                }
            }
            self.emit("wgmma.fence.sync.aligned;");
            for s @ &(ks, slab, mi) in steps.iter().filter(|s| half.contains(&s.0)) {
                let d = self.offset_descriptor(&desc, a_offset(s).expect("planned"));
                let first = 4 * (ks + k_steps * slab);
                // Product element (row, col) is `acc[col][row]`.
                let regs: Vec<String> = (0..m_step / 8)
                    .flat_map(|j| {
                        ACC.iter()
                            .map(move |&(dr, dc)| (slab * SLAB_M + dr, mi * m_step + j * 8 + dc))
                    })
                    .map(|(row, col)| out[index[&vec![col, row]]].clone())
                    .collect();
                let a: Vec<&str> = (first..first + 4).map(|r| fragments[&r].as_str()).collect();
                self.emit(format!(
                    "wgmma.mma_async.sync.aligned.m64n{m_step}k{step_k}.f32.tf32.tf32 {{{}}}, {{{}}}, {d}, {scale_d}, 1, 1;",
                    regs.join(", "),
                    a.join(", ")
                ));
            }
            self.emit("wgmma.commit_group.sync.aligned;");
        }
        self.emit(format!("wgmma.wait_group.sync.aligned {};", halves.len() - 1));
        out
    }

    /// The A fragment of a register-sourced operand `a` for each of the
    /// `blocks` (row, K offset) of its product, as `wgmma` takes it: four
    /// words of two halves each, per [`HALF_A`].
    fn fragments(&mut self, a: ValueId, blocks: &[(usize, usize)]) -> HashMap<(usize, usize), String> {
        let (ra, ia) = (self.regs_of(a), self.layout(a).reg_index());
        let mut out = HashMap::new();
        for &(row, k) in blocks {
            if out.contains_key(&(row, k)) {
                continue;
            }
            let at = |(dr, dc): (usize, usize)| ra[ia[&vec![row + dr, k + dc]]].clone();
            let words: Vec<String> = HALF_A
                .chunks(2)
                .map(|p| self.packed_word(&at(p[0]), &at(p[1])))
                .collect();
            out.insert((row, k), words.join(", "));
        }
        out
    }

    /// Before a loop: stores in shared memory, once, each 16-bit `wgmma` A
    /// operand in `wgmma`'s A fragment that the loop `body` reads but does
    /// not compute (attention's queries), swizzled as a pipeline stage is,
    /// so that its `wgmma`s read it through a descriptor like a staged
    /// tile. Held in registers instead, the operand took as many registers
    /// through the whole loop, and ptxas 13.0 (and the driver of that
    /// release) miscompiled it when the body branches (the mask's `if`): it
    /// gave its registers to a tile computed later in the body, so the
    /// next iteration's product read that tile (wrong rows).
    /// An operand whose conversion was not emitted
    /// ([`Conversion::StoredUnconverted`](crate::plan::scratch::Conversion))
    /// is stored from the tile it converts, as that tile's registers lie.
    /// The operands and their places are the plan's, for loop `var`.
    pub(super) fn stage_invariant_operands(&mut self, var: ValueId) {
        let mut stored = false;
        let operands = self.plan.invariant.get(&var).cloned().unwrap_or_default();
        for (a, offset) in operands {
            let l = self.layout(a).clone();
            let (m, k) = (l.shape[0], l.shape[1]);
            let eb = self.dtype(a).bytes();
            let sw = Swizzle {
                rows: m,
                row_bytes: k * eb,
            };
            let base = self.dynamic_address(offset, None);
            if let Some(&source) = self.stored_unconverted.get(&a) {
                // As loaded, in the widest accesses its registers allow.
                let ls = self.layout(source).clone();
                let tile = SharedTile {
                    shape: &ls.shape,
                    elem_bytes: eb,
                    swizzle: sw,
                    dropped: &[],
                };
                let regs = self.regs_of(source);
                let owner = self.owner_pred(ls.replicated_mask());
                for w in self.shared_accesses(&ls, &tile, &base) {
                    self.store_shared(
                        &regs[w.first..w.first + w.width],
                        eb,
                        (&w.addr, w.imm),
                        owner.as_deref(),
                    );
                }
            } else {
                self.store_fragment(a, &base, &sw);
            }
            self.staged_reads.insert(a, (base, 1, Operand::A));
            stored = true;
        }
        if stored {
            // `wgmma` reads through the async proxy what every thread wrote.
            self.emit("fence.proxy.async.shared::cta;");
            self.barrier();
        }
    }

    /// Stores `a`'s `wgmma` A fragment at `base`, swizzled by `sw`: each
    /// register pair along K (the fragment's first register bit) a word.
    fn store_fragment(&mut self, a: ValueId, base: &str, sw: &Swizzle) {
        let l = self.layout(a).clone();
        let eb = self.dtype(a).bytes();
        let (tc, regs) = (self.coords(&l), self.regs_of(a));
        let per_chunk = 16 / eb;
        for r in (0..l.num_regs()).step_by(2) {
            let c = l.reg_coord(r);
            let row = self.plus(&tc[0], c[0]);
            let col = self.plus(&tc[1], c[1]);
            let chunk = self.reg(RegClass::B32);
            self.emit(format!("shr.u32 {chunk}, {col}, {};", per_chunk.trailing_zeros()));
            let at = self.swizzled(base, &row, &chunk, sw);
            let within = self.reg(RegClass::B32);
            self.emit(format!("and.b32 {within}, {col}, {};", per_chunk - 1));
            self.emit(format!("mad.lo.s32 {at}, {within}, {eb}, {at};"));
            let word = self.packed_word(&regs[r], &regs[r + 1]);
            self.emit(format!("st.shared.b32 [{at}], {word};"));
        }
    }

    /// Computed once before the loop: this thread's warpgroup's entry of
    /// each table (byte offsets of its operand blocks), and the predicate
    /// `wgmma` takes to add to its accumulator.
    fn warpgroup_offsets(&mut self, tables: &[&[usize]]) -> (Vec<String>, String) {
        self.in_prologue(|l| {
            // The warpgroup within the tile (warpgroups past the kernel's
            // are the other ping-pong consumer: see `specialize`).
            let group = l.reg(RegClass::B32);
            l.emit(format!("shr.u32 {group}, {}, 7;", l.tid));
            l.emit(format!("and.b32 {group}, {group}, {};", l.func.num_warps / 4 - 1));
            let p = l.reg(RegClass::Pred);
            l.emit(format!("setp.eq.u32 {p}, 1, 1;"));
            (tables.iter().map(|t| l.pick(&group, t)).collect(), p)
        })
    }

    /// A 64-bit matrix descriptor for the tile at `base + offset`.
    fn descriptor(&mut self, base: &str, offset: &str, bits: u64) -> String {
        let t = self.reg(RegClass::B32);
        self.emit(format!("add.s32 {t}, {base}, {offset};"));
        self.emit(format!("shr.u32 {t}, {t}, 4;"));
        self.emit(format!("and.b32 {t}, {t}, 16383;"));
        let d = self.reg(RegClass::B64);
        self.emit(format!("cvt.u64.u32 {d}, {t};"));
        self.emit(format!("or.b64 {d}, {d}, {bits};"));
        d
    }

    /// `desc` moved on by `bytes` (the address field counts 16-byte units).
    fn offset_descriptor(&mut self, desc: &str, bytes: usize) -> String {
        if bytes == 0 {
            return desc.to_string();
        }
        let d = self.reg(RegClass::B64);
        self.emit(format!("add.s64 {d}, {desc}, {};", bytes >> 4));
        d
    }
}
