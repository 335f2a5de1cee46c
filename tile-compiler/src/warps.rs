//! How many warps each variant of a kernel runs with: the first decision
//! after the IR is checked, before layouts (which map tiles onto those
//! warps). A `num_warps` hint in the attribute is taken as given, except
//! where a kernel's products need more to keep their accumulators in
//! registers.

use crate::ast;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{self, Func, OpKind, ValueId};
use std::collections::HashSet;

/// Which side of an `mma` tile a block's warps split first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarpSplit {
    /// The longer side: square-ish warp tiles read the fewest operand
    /// fragments from shared memory (a matmul).
    Longer,
    /// Rows, down to 16 per warp: every row of a product stays within one
    /// warp, so reducing it along its rows needs no shared memory, and a
    /// tile computed from it rows-wise feeds the next product's A operand
    /// from the registers that hold it (attention's `p @ v`).
    Rows,
}

impl WarpSplit {
    /// [`WarpSplit::Rows`] when some `mma`'s result flows, through any ops,
    /// into a reduction along rows (the last axis) or into another `mma`'s
    /// A operand; [`WarpSplit::Longer`] otherwise.
    pub fn of(func: &Func) -> WarpSplit {
        let ops = crate::ir::all_ops(&func.body);
        let mut derived: HashSet<ValueId> = HashSet::new();
        // Loops carry values backwards: repeat until nothing changes.
        loop {
            let before = derived.len();
            for op in &ops {
                let from_mma =
                    matches!(op.kind, OpKind::Mma { .. }) || op.kind.operands().iter().any(|v| derived.contains(v));
                if from_mma {
                    derived.extend(&op.results);
                    if let OpKind::For { args, .. } = &op.kind {
                        derived.extend(args);
                    }
                }
            }
            if derived.len() == before {
                break;
            }
        }
        let rows_matter = ops.iter().any(|op| match &op.kind {
            OpKind::Reduce { arg, axis, .. } | OpKind::Scan { arg, axis, .. } | OpKind::Sort { arg, axis, .. } => {
                derived.contains(arg) && func.values[*arg].shape.as_ref().is_some_and(|s| *axis + 1 == s.len())
            }
            OpKind::Mma { a, .. } => derived.contains(a),
            _ => false,
        });
        if rows_matter {
            WarpSplit::Rows
        } else {
            WarpSplit::Longer
        }
    }
}

/// Registers per thread a tile may take before the kernel is rejected.
const MAX_ELEMS_PER_THREAD: usize = 128;

/// Picks `num_warps`: the hint or one warp per 512 elements of the largest tile
/// (one per 4096 accumulator elements for `mma` kernels), then more where
/// warps that split a product's rows would hold too many accumulators.
pub fn choose_warps(func: &ir::Func, hint: Option<u32>) -> u32 {
    row_split_warps(func, hint.unwrap_or_else(|| default_warps(func)))
}

/// Accumulator registers a thread may hold across a kernel's products
/// when its warps split their rows: half of the 255 it can have.
const ROW_SPLIT_ACCUMULATORS: usize = 128;

/// `warps`, doubled while the warps split the products' rows (their rows
/// are reduced, or feed another `mma`: attention), each thread would hold
/// more than [`ROW_SPLIT_ACCUMULATORS`] of the products' accumulators
/// together, and each warp would keep at least 16 rows (`mma`'s M).
/// Attention with 128 queries, heads of 128 and 128 keys per step holds
/// 256 a thread at four warps, which spilled (ptxas); eight hold 128.
fn row_split_warps(func: &ir::Func, warps: u32) -> u32 {
    if WarpSplit::of(func) != WarpSplit::Rows {
        return warps;
    }
    let accumulators = accumulator_shapes(func);
    let elements: usize = accumulators.iter().map(|s| s.iter().product::<usize>()).sum();
    let rows = accumulators.iter().map(|s| s[0]).max().unwrap_or(0);
    let mut warps = warps;
    while elements > ROW_SPLIT_ACCUMULATORS * 32 * warps as usize && 32 * warps as usize <= rows {
        warps *= 2;
    }
    warps
}

/// The shapes of the accumulators of a kernel's `mma`s.
fn accumulator_shapes(func: &ir::Func) -> Vec<Vec<usize>> {
    ir::all_ops(&func.body)
        .iter()
        .filter_map(|op| match &op.kind {
            ir::OpKind::Mma { acc, .. } => func.values[*acc].shape.clone(),
            _ => None,
        })
        .collect()
}

/// `num_warps` without a hint: one warp per 512 elements of the largest
/// tile (16 per thread: two to four 16-byte vectors), from 1 to 16 warps.
/// When the kernel reduces rows (along the last axis) and there are fewer
/// rows than that, it takes one warp per row if a warp can hold a row in at
/// most 32 registers per thread: the reductions then need no shared memory.
fn default_warps(func: &ir::Func) -> u32 {
    // Tensor-core kernels: one warp per 4096 accumulator elements (2048 for
    // f32 operands, whose fragments take twice the registers), at most 8, so
    // 16-bit warps compute 64x64 tiles: fewer fragment reads per product
    // than 32x64 ones (BENCHMARKS.md has the measurement).
    let mma_warps = ir::all_ops(&func.body)
        .iter()
        .filter_map(|op| match &op.kind {
            ir::OpKind::Mma { a, acc, .. } => {
                let elems: usize = func.values[*acc].shape.as_ref()?.iter().product();
                let (per_warp, most) = if func.values[*a].dtype == DType::F32 {
                    (2048, 8)
                } else {
                    (4096, 8)
                };
                Some((elems / per_warp).clamp(1, most))
            }
            _ => None,
        })
        .max();
    if let Some(w) = mma_warps {
        return w as u32;
    }
    let max = func
        .tile_shapes()
        .map(|s| s.iter().product::<usize>())
        .max()
        .unwrap_or(1);
    let mut warps = (max / 512).clamp(1, 16);
    let rows = ir::all_ops(&func.body)
        .iter()
        .filter_map(|op| match &op.kind {
            ir::OpKind::Reduce { arg, axis, .. }
            | ir::OpKind::Scan { arg, axis, .. }
            | ir::OpKind::Sort { arg, axis, .. } => {
                let shape = func.values[*arg].shape.as_ref()?;
                (*axis == shape.len() - 1).then(|| shape[..*axis].iter().product::<usize>())
            }
            _ => None,
        })
        .min();
    if let Some(rows) = rows
        && rows < warps
        && max / (32 * rows) <= 32
    {
        warps = rows;
    }
    warps as u32
}

/// Warps for a kernel's `wgmma` variant, when it has `mma`s, in order of
/// preference. When the warps split its products' rows (their rows are
/// reduced, or feed another `mma`: attention), a warpgroup per 64 rows of
/// the tallest product, whatever the hint: `wgmma`'s M, so each warp holds
/// 16 rows of each tile (a hint sized for `mma.sync`, 32 rows a warp, would
/// leave each warpgroup two slabs, and attention's heads of 64 run faster
/// with two warpgroups than with one). Otherwise the hint; or one warpgroup,
/// and two when a tile has at least 128 rows and 128 x 128 elements (each
/// warpgroup then holds a 64-row slab or more). A 128 x 128 tile prefers
/// one warpgroup, if a second one can take turns with it on the tiles
/// (ping-pong consumers; the plan's warp specialization decides): the epilogue of one then
/// overlaps the other's K-loop. Two split it otherwise.
pub fn wgmma_warps(func: &ir::Func, hint: Option<u32>) -> Vec<u32> {
    let accumulators = accumulator_shapes(func);
    let Some(largest) = accumulators.iter().max_by_key(|shape| (shape[0] * shape[1], shape[0])) else {
        return Vec::new();
    };
    if WarpSplit::of(func) == WarpSplit::Rows {
        let tallest = accumulators.iter().map(|shape| shape[0]).max().unwrap_or(largest[0]);
        return vec![4 * (tallest / 64).clamp(1, 4) as u32];
    }
    match (hint, largest[0] >= 128, largest[0] * largest[1]) {
        (Some(h), _, _) => vec![h],
        (None, true, n) if n == 128 * 128 => vec![4, 8],
        (None, true, n) if n > 128 * 128 => vec![8],
        _ => vec![4],
    }
}

/// The scalar-access variant of a tensor-core kernel stages operands through
/// registers, which needs room: it gets twice the warps (up to 8), unless
/// `keep` (the vector variant, or a kernel that fixes `num_warps`).
pub fn scalar_warps(func: &ir::Func, keep: bool) -> u32 {
    let has_mma = ir::all_ops(&func.body)
        .iter()
        .any(|op| matches!(op.kind, ir::OpKind::Mma { .. }));
    if keep || !has_mma {
        func.num_warps
    } else {
        (func.num_warps * 2).min(8)
    }
}

/// Rejects tiles too large to live in registers with the chosen warp count.
pub fn check_registers(kernel: &ast::Kernel, func: &ir::Func) -> Result<()> {
    let threads = 32 * func.num_warps as usize;
    for op in ir::all_ops(&func.body) {
        for &r in &op.results {
            if let Some(shape) = &func.values[r].shape {
                let per_thread = shape.iter().product::<usize>() / threads;
                if per_thread > MAX_ELEMS_PER_THREAD {
                    return Err(Error::new(
                        op.span,
                        format!(
                            "tile {shape:?} needs {per_thread} registers per thread with num_warps = {}: the limit is {MAX_ELEMS_PER_THREAD}; use a smaller tile or raise num_warps in #[tile::kernel(.., num_warps = N)] (kernel `{}`)",
                            func.num_warps, kernel.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
