//! Hopper's warpgroup tensor cores (sm_90a): `wgmma.mma_async` reads both
//! operands straight from the pipeline's swizzled shared-memory stages
//! through matrix descriptors and accumulates in registers laid out as
//! [`Layout::wgmma_acc`](crate::layout::Layout::wgmma_acc). tf32 operands
//! must be K-major there; with an N-major `b` (a row-major `[K, N]` tile)
//! the product is computed transposed, `b^T a^T`, `b` read from its stage
//! into registers as the A operand.
//!
//! Attention's products take the path too. A 16-bit `a` computed in the
//! loop (`p`) is read from registers in `wgmma`'s A fragment; one computed
//! before the loop (`q`) is stored once, swizzled like a stage, and read
//! through a descriptor. An accumulator the loop does not carry as the
//! product's own (a fresh `zeros`, `acc * alpha`) gets registers of its
//! own, and the product is awaited at once.
//!
//! A kernel gets this variant only when every `mma` in it can take the
//! path; otherwise it keeps its portable `mma.sync` variant alone.

use super::convert::SharedTile;
use super::tensor_core::{ACC, HALF_A};
use super::{Lower, Operand};
use crate::dtype::DType;
use crate::ir::ValueId;
use crate::layout::{Bit, Layout, wgmma_warpgroups};
use crate::plan::swizzle::Swizzle;
use crate::ptx::{RegClass, arith_type};
use std::collections::HashMap;

/// Why a kernel cannot use `wgmma`.
pub(super) type Unsupported = &'static str;

/// Bytes of K one `wgmma` step takes from each operand row: K = 16 for
/// 16-bit operands, 8 for tf32.
const STEP_K_BYTES: usize = 32;
/// Rows of one `wgmma`: a warpgroup's slab.
const SLAB_M: usize = 64;
/// The widest `wgmma` N.
const MAX_N: usize = 256;
/// The bits of an f32 that tf32 keeps (all but the low 13 of the mantissa).
const TF32_BITS: i32 = -8192;

/// One `wgmma` of an `mma`'s K-tile, relative to its warpgroup.
struct Step {
    /// K offset, and the accumulator rows and columns the step updates from.
    k: usize,
    row: usize,
    col: usize,
    /// Byte offsets of its A and B blocks in their tiles.
    a: usize,
    b: usize,
}

/// An operand tile in a pipeline stage, as a matrix descriptor describes it.
struct StagedOperand {
    /// Register holding the tile's shared-memory address in this iteration's stage.
    base: String,
    swizzle: Swizzle,
    /// K runs along the stored rows; otherwise M (or N) does and `wgmma`
    /// reads the tile transposed.
    k_major: bool,
    elem_bytes: usize,
}

impl StagedOperand {
    /// Byte offset where the sub-block starting at operand element
    /// (`mn`, `k`) begins, when a descriptor can start there: on an 8-row
    /// group, and along the stored rows at a panel boundary unless K-major
    /// (K steps advance within a swizzled line, as the hardware allows).
    fn offset(&self, mn: usize, k: usize) -> Option<usize> {
        let (row, col) = if self.k_major { (mn, k) } else { (k, mn) };
        let line = self.swizzle.line_bytes();
        let col_bytes = col * self.elem_bytes;
        let within = col_bytes % line;
        if row % 8 != 0 || (!self.k_major && within != 0) {
            return None;
        }
        Some(col_bytes / line * self.swizzle.rows * line + row * line + within)
    }

    /// The descriptor's constant fields: leading byte offset (between
    /// panels; unused when K-major), stride byte offset (between 8-row
    /// groups) and swizzle mode (1: 128 B, 2: 64 B, 3: 32 B), per PTX's
    /// shared-memory matrix descriptor.
    fn descriptor_bits(&self) -> Option<u64> {
        let line = self.swizzle.line_bytes();
        let mode: u64 = match line {
            128 => 1,
            64 => 2,
            32 => 3,
            _ => return None,
        };
        let leading = if self.k_major { 16 } else { self.swizzle.rows * line };
        let stride = 8 * line;
        if leading >> 4 >= 1 << 14 {
            return None;
        }
        Some(((leading as u64 >> 4) << 16) | ((stride as u64 >> 4) << 32) | (mode << 62))
    }
}

impl Lower<'_> {
    /// `acc + a @ b` with `wgmma`. When the path does not apply, records why
    /// (the caller then drops this variant) and returns `acc`'s registers.
    pub(super) fn wgmma(&mut self, a: ValueId, b: ValueId, acc: ValueId, result: ValueId) -> Vec<String> {
        match self.try_wgmma(a, b, acc, result) {
            Ok(regs) => regs,
            Err(reason) => {
                self.no_wgmma.get_or_insert(reason);
                self.regs_of(acc)
            }
        }
    }

    fn staged_operand(&self, v: ValueId, role: Operand) -> Result<StagedOperand, Unsupported> {
        let (base, contiguous, _) = self
            .staged_reads
            .get(&v)
            .cloned()
            .ok_or("an mma operand is not a tile that a pipelined loop loads")?;
        let shape = &self.layout(v).shape;
        let elem_bytes = self.dtype(v).bytes();
        Ok(StagedOperand {
            base,
            swizzle: Swizzle {
                rows: shape[1 - contiguous],
                row_bytes: shape[contiguous] * elem_bytes,
            },
            k_major: contiguous == role.k_dim(),
            elem_bytes,
        })
    }

    fn try_wgmma(&mut self, a: ValueId, b: ValueId, acc: ValueId, result: ValueId) -> Result<Vec<String>, Unsupported> {
        // A tile the loop carries and only this `mma` updates stays in its
        // registers, and its group may still run when the next iteration
        // begins. Any other accumulator (a fresh `zeros`, `acc * alpha`)
        // is copied into registers of its own and awaited at once: what
        // follows reads the result.
        let in_place = self.plan.in_place.get(&result) == Some(&acc);
        let dtype = self.dtype(a);
        if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32) {
            return Err("wgmma takes 16-bit or f32 (tf32) operands");
        }
        let step_k = STEP_K_BYTES / dtype.bytes();
        let (m, k, n) = (
            self.layout(a).shape[0],
            self.layout(a).shape[1],
            self.layout(b).shape[1],
        );
        if k % step_k != 0 {
            return Err("K is not a multiple of one wgmma step (16, or 8 for tf32)");
        }
        if self.cx.register_b.contains(&b) {
            if !in_place {
                return Err("a product computed transposed (tf32) updates an accumulator other than its loop's");
            }
            return self.wgmma_swapped(a, b, acc, (m, k, n));
        }
        let num_warps = self.func.num_warps;
        let (groups, tm, tn) = wgmma_warpgroups(m, n, num_warps).ok_or("the tile does not fit wgmma's shapes")?;
        // `a` in registers, in `wgmma`'s A fragment (the layout pass chose it).
        let register_a =
            !self.staged_reads.contains_key(&a) && Layout::wgmma_a(m, k, n, num_warps).as_ref() == Some(self.layout(a));
        let op_b = self.staged_operand(b, Operand::B)?;
        let op_a = if register_a {
            None
        } else {
            Some(self.staged_operand(a, Operand::A)?)
        };
        // Only 16-bit operands may be read transposed.
        let tf32 = dtype == DType::F32;
        if tf32 && !(op_a.as_ref().is_some_and(|o| o.k_major) && op_b.k_major) {
            return Err("tf32 wgmma reads both operands K-major (x @ w^T with w: [N, K])");
        }
        // From registers, every step's `a` is the warp's own: offset 0.
        let a_offset = |mn: usize, k: usize| op_a.as_ref().map_or(Some(0), |o| o.offset(mn, k));
        let n_step = tn.min(MAX_N);
        // Each warpgroup's origin in the tile, and every step's sub-block
        // offsets relative to it, which must not depend on the warpgroup.
        let origins = warpgroup_origins(&groups, num_warps);
        // Each step: its K offset, accumulator origin (row, column) within
        // the warpgroup's tile, and the byte offsets of its operand blocks.
        let steps: Vec<Step> = (0..k / step_k)
            .flat_map(|ks| (0..tm / SLAB_M).flat_map(move |mi| (0..tn / n_step).map(move |ni| (ks, mi, ni))))
            .map(|(ks, mi, ni)| {
                let (row, col) = (mi * SLAB_M, ni * n_step);
                Some(Step {
                    k: ks * step_k,
                    row,
                    col,
                    a: a_offset(row, ks * step_k)?,
                    b: op_b.offset(col, ks * step_k)?,
                })
            })
            .collect::<Option<_>>()
            .ok_or("an operand sub-block does not start where a descriptor can")?;
        let mut a_origin = Vec::new();
        let mut b_origin = Vec::new();
        for &(m0, n0) in &origins {
            let (oa, ob) = (a_offset(m0, 0), op_b.offset(n0, 0));
            let (Some(oa), Some(ob)) = (oa, ob) else {
                return Err("a warpgroup's operand block does not start where a descriptor can");
            };
            let shifted = |s: &Step| {
                (register_a || a_offset(m0 + s.row, s.k) == Some(oa + s.a))
                    && op_b.offset(n0 + s.col, s.k) == Some(ob + s.b)
            };
            if !steps.iter().all(shifted) {
                return Err("an operand sub-block's offset depends on the warpgroup");
            }
            a_origin.push(oa);
            b_origin.push(ob);
        }
        let bits_b = op_b.descriptor_bits().ok_or("operand rows shorter than 32 bytes")?;
        let bits_a = match &op_a {
            Some(o) => Some(o.descriptor_bits().ok_or("operand rows shorter than 32 bytes")?),
            None => None,
        };

        let (picked, scale_d) = self.warpgroup_offsets(&[&a_origin, &b_origin]);
        let (wg_a, wg_b) = (&picked[0], &picked[1]);
        let desc_a = match (&op_a, bits_a) {
            (Some(o), Some(bits)) => Some(self.descriptor(&o.base, wg_a, bits)),
            _ => None,
        };
        let desc_b = self.descriptor(&op_b.base, wg_b, bits_b);
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
        for s in &steps {
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
        self.wgmma_count += 1;
        // The accumulator's registers are the result.
        Ok(out)
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
        a: ValueId,
        b: ValueId,
        acc: ValueId,
        (m, k, n): (usize, usize, usize),
    ) -> Result<Vec<String>, Unsupported> {
        let num_warps = self.func.num_warps;
        // The product is `[n, m]`: each warpgroup computes `rows` of N by `cols` of M.
        let (groups, rows, cols) = wgmma_warpgroups(n, m, num_warps).ok_or("the tile does not fit wgmma's shapes")?;
        let step_k = STEP_K_BYTES / 4;
        let op_a = self.staged_operand(a, Operand::A)?;
        let (b_base, b_contiguous, _) = self
            .staged_reads
            .get(&b)
            .cloned()
            .ok_or("an mma operand is not a tile that a pipelined loop loads")?;
        let fragment = Layout::wgmma_a_swapped(k, n, m, num_warps).ok_or("the tile does not fit wgmma's shapes")?;
        if !op_a.k_major || b_contiguous != 1 || self.layout(b).shape != fragment.shape {
            return Err("tf32 wgmma reads a K-major a, and b from N-major rows");
        }
        let m_step = cols.min(MAX_N);
        // `a`'s sub-block each step reads, relative to the warpgroup's.
        let steps: Vec<(usize, usize, usize)> = (0..k / step_k)
            .flat_map(|ks| (0..rows / SLAB_M).flat_map(move |slab| (0..cols / m_step).map(move |mi| (ks, slab, mi))))
            .collect();
        let a_offset = |m0: usize, &(ks, _, mi): &(usize, usize, usize)| op_a.offset(m0 + mi * m_step, ks * step_k);
        let mut origins = Vec::new();
        for (_, m0) in warpgroup_origins(&groups, num_warps) {
            let Some(oa) = op_a.offset(m0, 0) else {
                return Err("a warpgroup's operand block does not start where a descriptor can");
            };
            if !steps
                .iter()
                .all(|s| a_offset(m0, s).is_some_and(|o| Some(o) == a_offset(0, s).map(|x| x + oa)))
            {
                return Err("an operand sub-block's offset depends on the warpgroup");
            }
            origins.push(oa);
        }
        let bits = op_a.descriptor_bits().ok_or("operand rows shorter than 32 bytes")?;

        let (picked, scale_d) = self.warpgroup_offsets(&[&origins]);
        let desc = self.descriptor(&op_a.base, &picked[0], bits);
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
        let k_steps = k / step_k;
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
            // `ld.shared` and the `wgmma` reading its register. When ptxas
            // let `wgmma` read the loaded registers directly, the paired
            // 128x256 tiles computed wrong 64x128 blocks now and then
            // (H100, 2026-11-24, BENCHMARKS), `wgmma.fence` notwithstanding.
            // `cvt.rna` did the same job in three instructions.
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
                let d = self.offset_descriptor(&desc, a_offset(0, s).expect("checked above"));
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
        self.wgmma_count += 1;
        Ok(out)
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
    /// next iteration's product read that tile (wrong rows on an H100).
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
            // are other consumer teams: see `specialize`).
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

/// Each warpgroup's origin (row, column) in a `wgmma` tile split by `groups`
/// (see [`wgmma_warpgroups`]).
fn warpgroup_origins(groups: &[Bit], num_warps: u32) -> Vec<(usize, usize)> {
    (0..num_warps as usize / 4)
        .map(|g| {
            groups.iter().enumerate().fold((0, 0), |(r0, c0), (i, &(d, bit))| {
                let on = (g >> i & 1) << bit;
                if d == 0 { (r0 + on, c0) } else { (r0, c0 + on) }
            })
        })
        .collect()
}
