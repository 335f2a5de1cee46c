//! Which `mma`s Hopper's warpgroup tensor cores (`wgmma`, sm_90a) can
//! compute, and how: each product's steps and the matrix descriptors of
//! its shared-memory operands. A kernel gets its `wgmma` variant only when
//! every `mma` can take the path (the reason it cannot is kept);
//! `lower/wgmma.rs` emits the products as decided here.
//!
//! tf32 operands must be K-major in shared memory; with an N-major `b` (a
//! row-major `[K, N]` tile) the product is computed transposed, `b^T a^T`,
//! `b` read from its stage into registers as the A operand. A 16-bit `a`
//! computed in the loop (attention's `p`) is read from registers in
//! `wgmma`'s A fragment.

use super::{Context, Operand};
use crate::dtype::DType;
use crate::ir::ValueId;
use crate::layout::{Bit, Layout, wgmma_warpgroups};
use crate::plan::swizzle::Swizzle;

/// Why a kernel cannot use `wgmma`.
pub type Unsupported = &'static str;

/// Bytes of K one `wgmma` step takes from each operand row: K = 16 for
/// 16-bit operands, 8 for tf32.
const STEP_K_BYTES: usize = 32;
/// Rows of one `wgmma`: a warpgroup's slab.
pub const SLAB_M: usize = 64;
/// The widest `wgmma` N.
const MAX_N: usize = 256;

/// One `wgmma` of an `mma`'s K-tile, relative to its warpgroup.
#[derive(Clone, Debug)]
pub struct Step {
    /// K offset, and the accumulator rows and columns the step updates from.
    pub k: usize,
    pub row: usize,
    pub col: usize,
    /// Byte offsets of its A and B blocks in their tiles.
    pub a: usize,
    pub b: usize,
}

/// An operand tile in shared memory (a pipeline stage, or an operand
/// stored once), as a matrix descriptor describes it.
#[derive(Clone, Debug)]
pub struct SharedOperand {
    pub swizzle: Swizzle,
    /// K runs along the stored rows; otherwise M (or N) does and `wgmma`
    /// reads the tile transposed.
    pub k_major: bool,
    pub elem_bytes: usize,
    /// The descriptor's constant fields: leading and stride byte offsets, swizzle mode.
    pub bits: u64,
}

impl SharedOperand {
    /// Operand `v` in role `role`, stored with rows along operand dimension
    /// `contiguous` (`None`: not in shared memory).
    fn of(cx: &Context, v: ValueId, role: Operand, contiguous: Option<usize>) -> Result<SharedOperand, Unsupported> {
        let contiguous = contiguous.ok_or("an mma operand is not a tile that a pipelined loop loads")?;
        let shape = &cx.layout(v).shape;
        let elem_bytes = cx.dtype(v).bytes();
        let mut operand = SharedOperand {
            swizzle: Swizzle {
                rows: shape[1 - contiguous],
                row_bytes: shape[contiguous] * elem_bytes,
            },
            k_major: contiguous == role.k_dim(),
            elem_bytes,
            bits: 0,
        };
        operand.bits = operand.descriptor_bits().ok_or("operand rows shorter than 32 bytes")?;
        Ok(operand)
    }

    /// Byte offset where the sub-block starting at operand element
    /// (`mn`, `k`) begins, when a descriptor can start there: on an 8-row
    /// group, and along the stored rows at a panel boundary unless K-major
    /// (K steps advance within a swizzled line, as the hardware allows).
    pub fn offset(&self, mn: usize, k: usize) -> Option<usize> {
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

/// How one `mma` runs on `wgmma`.
#[derive(Clone, Debug)]
pub enum Product {
    /// `acc + a @ b`: `b` (and `a`, unless `None`: from registers, in
    /// `wgmma`'s A fragment) read through descriptors.
    Direct {
        step_k: usize,
        n_step: usize,
        steps: Vec<Step>,
        a: Option<SharedOperand>,
        b: SharedOperand,
        /// Each warpgroup's byte offsets of its A and B blocks.
        a_origins: Vec<usize>,
        b_origins: Vec<usize>,
        /// The accumulator is the loop's carried tile, updated in place.
        in_place: bool,
    },
    /// tf32 with `b` N-major, computed transposed: `acc^T += b^T a^T`,
    /// `b` read from its stage into registers in `fragment` (stored with
    /// rows along dimension `b_contiguous`), `a` through a descriptor.
    Swapped {
        m_step: usize,
        /// Each step's (K step, slab, M block).
        steps: Vec<(usize, usize, usize)>,
        a: SharedOperand,
        a_origins: Vec<usize>,
        fragment: Layout,
        b_contiguous: usize,
        k_steps: usize,
    },
}

impl Product {
    /// Byte offset of step `(ks, _, mi)`'s `a` block of a transposed
    /// product, for the warpgroup whose block starts at M row `m0`.
    pub fn swapped_a_offset(
        a: &SharedOperand,
        m_step: usize,
        m0: usize,
        &(ks, _, mi): &(usize, usize, usize),
    ) -> Option<usize> {
        a.offset(m0 + mi * m_step, ks * STEP_K_BYTES / 4)
    }

    /// `acc + a @ b` on `wgmma`, or why it cannot be.
    /// `stored(v)`: the dimension along which an operand's rows run in
    /// shared memory, if it is there (a stage, or stored once); `in_place`:
    /// the accumulator is the loop's carried tile that only this `mma` updates.
    pub fn of(
        cx: &Context,
        (a, b): (ValueId, ValueId),
        stored: &dyn Fn(ValueId) -> Option<usize>,
        in_place: bool,
    ) -> Result<Product, Unsupported> {
        let dtype = cx.dtype(a);
        if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32) {
            return Err("wgmma takes 16-bit or f32 (tf32) operands");
        }
        let step_k = STEP_K_BYTES / dtype.bytes();
        let (m, k, n) = (cx.layout(a).shape[0], cx.layout(a).shape[1], cx.layout(b).shape[1]);
        if k % step_k != 0 {
            return Err("K is not a multiple of one wgmma step (16, or 8 for tf32)");
        }
        if cx.register_b.contains(&b) {
            if !in_place {
                return Err("a product computed transposed (tf32) updates an accumulator other than its loop's");
            }
            return swapped(cx, (a, b), stored, (m, k, n));
        }
        let num_warps = cx.func.num_warps;
        let (groups, tm, tn) = wgmma_warpgroups(m, n, num_warps).ok_or("the tile does not fit wgmma's shapes")?;
        // `a` in registers, in `wgmma`'s A fragment (the layout pass chose it).
        let register_a = stored(a).is_none() && Layout::wgmma_a(m, k, n, num_warps).as_ref() == Some(cx.layout(a));
        let op_b = SharedOperand::of(cx, b, Operand::B, stored(b))?;
        let op_a = if register_a {
            None
        } else {
            Some(SharedOperand::of(cx, a, Operand::A, stored(a))?)
        };
        // Only 16-bit operands may be read transposed.
        if dtype == DType::F32 && !(op_a.as_ref().is_some_and(|o| o.k_major) && op_b.k_major) {
            return Err("tf32 wgmma reads both operands K-major (x @ w^T with w: [N, K])");
        }
        // From registers, every step's `a` is the warp's own: offset 0.
        let a_offset = |mn: usize, k: usize| op_a.as_ref().map_or(Some(0), |o| o.offset(mn, k));
        let n_step = tn.min(MAX_N);
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
        // Each warpgroup's origin in the tile: every step's sub-block
        // offsets relative to it must not depend on the warpgroup.
        let mut a_origins = Vec::new();
        let mut b_origins = Vec::new();
        for (m0, n0) in warpgroup_origins(&groups, num_warps) {
            let (Some(oa), Some(ob)) = (a_offset(m0, 0), op_b.offset(n0, 0)) else {
                return Err("a warpgroup's operand block does not start where a descriptor can");
            };
            let shifted = |s: &Step| {
                (register_a || a_offset(m0 + s.row, s.k) == Some(oa + s.a))
                    && op_b.offset(n0 + s.col, s.k) == Some(ob + s.b)
            };
            if !steps.iter().all(shifted) {
                return Err("an operand sub-block's offset depends on the warpgroup");
            }
            a_origins.push(oa);
            b_origins.push(ob);
        }
        Ok(Product::Direct {
            step_k,
            n_step,
            steps,
            a: op_a,
            b: op_b,
            a_origins,
            b_origins,
            in_place,
        })
    }

    /// The registers of `a` (in `wgmma`'s A fragment) a direct product reads.
    pub fn register_a(&self) -> bool {
        matches!(self, Product::Direct { a: None, .. })
    }
}

/// tf32 `a @ b` (`a: [m, k]`, `b: [k, n]`, K a whole number of steps) with
/// `a` K-major and `b` N-major, computed transposed (see [`Product::Swapped`]).
fn swapped(
    cx: &Context,
    (a, b): (ValueId, ValueId),
    stored: &dyn Fn(ValueId) -> Option<usize>,
    (m, k, n): (usize, usize, usize),
) -> Result<Product, Unsupported> {
    let num_warps = cx.func.num_warps;
    // The product is `[n, m]`: each warpgroup computes `rows` of N by `cols` of M.
    let (groups, rows, cols) = wgmma_warpgroups(n, m, num_warps).ok_or("the tile does not fit wgmma's shapes")?;
    let step_k = STEP_K_BYTES / 4;
    let op_a = SharedOperand::of(cx, a, Operand::A, stored(a));
    let b_contiguous = stored(b);
    let (op_a, b_contiguous) = match (op_a, b_contiguous) {
        (Ok(op_a), Some(c)) => (op_a, c),
        (Err(e), _) => return Err(e),
        (_, None) => return Err("an mma operand is not a tile that a pipelined loop loads"),
    };
    let fragment = Layout::wgmma_a_swapped(k, n, m, num_warps).ok_or("the tile does not fit wgmma's shapes")?;
    if !op_a.k_major || b_contiguous != 1 || cx.layout(b).shape != fragment.shape {
        return Err("tf32 wgmma reads a K-major a, and b from N-major rows");
    }
    let m_step = cols.min(MAX_N);
    // `a`'s sub-block each step reads, relative to the warpgroup's.
    let steps: Vec<(usize, usize, usize)> = (0..k / step_k)
        .flat_map(|ks| (0..rows / SLAB_M).flat_map(move |slab| (0..cols / m_step).map(move |mi| (ks, slab, mi))))
        .collect();
    let a_offset = |m0: usize, s: &(usize, usize, usize)| Product::swapped_a_offset(&op_a, m_step, m0, s);
    let mut a_origins = Vec::new();
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
        a_origins.push(oa);
    }
    Ok(Product::Swapped {
        m_step,
        steps,
        a: op_a,
        a_origins,
        fragment,
        b_contiguous,
        k_steps: k / step_k,
    })
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
