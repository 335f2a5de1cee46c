//! The scratch area: the shared memory ops borrow for a moment (layout
//! conversions, reductions across warps, operand staging, TMA stores).
//! Each such op's need is decided here, from the layouts, before lowering;
//! the area is as large as the largest need (ops take it in turn).

use super::Context;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::{Bit, Layout, MmaPath};
use crate::plan::pipeline::uses;
use crate::plan::swizzle::Swizzle;

/// The most shared memory a portable conversion's tile takes at once.
const MAX_PORTABLE_CONVERSION_BYTES: usize = 64 * 1024;

/// How a layout conversion moves its tile, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// Not emitted: a loop-invariant `wgmma` A operand stored before its
    /// loop straight from the tile it converts ([`staged_once`]).
    StoredUnconverted,
    /// Read from its pipeline stage (fragments with `ldmatrix`, or by
    /// `wgmma` through descriptors): the stage is the shared tile.
    Staged,
    /// The same elements in each thread: registers reordered.
    Permutation,
    /// A 16-bit or f32 `mma` operand from a layout with 16-byte runs:
    /// vector stores into a swizzled tile, then `ldmatrix`.
    Operand,
    /// Through a swizzled shared tile with the widest accesses both
    /// layouts allow, in parts on the portable path.
    Swizzled,
    /// Element by element through shared memory.
    Elementwise,
}

impl Conversion {
    /// The conversion of `arg` into `result`'s layout, and the scratch
    /// bytes it takes. `staged`: `result` is read from a pipeline stage.
    pub fn of(cx: &Context, arg: ValueId, result: ValueId, staged: bool) -> (Conversion, usize) {
        if staged_once(cx, result) == Some(arg) {
            return (Conversion::StoredUnconverted, 0);
        }
        if staged {
            return (Conversion::Staged, 0);
        }
        let (la, lb) = (cx.layout(arg), cx.layout(result));
        if la.register_permutation(lb).is_some() {
            return (Conversion::Permutation, 0);
        }
        let dtype = cx.dtype(arg);
        if cx.operands.contains_key(&result)
            && let Some((_, tile)) = operand_tile(la, lb, dtype.bytes())
        {
            return (Conversion::Operand, tile.rows * tile.row_bytes);
        }
        if let Some((tile, dropped)) = swizzled_tile(cx.path, la, lb, dtype) {
            return (Conversion::Swizzled, (tile.rows >> dropped.len()) * tile.row_bytes);
        }
        let bytes = if dtype.is_half() { 2 } else { 4 };
        (Conversion::Elementwise, la.shape.iter().product::<usize>() * bytes)
    }
}

/// An operand tile staged for `ldmatrix`: the stored orientation (rows run
/// along the source's contiguous dimension, a 16-byte run) and the
/// swizzled tile, `None` when the source has no such runs.
pub fn operand_tile(la: &Layout, lb: &Layout, eb: usize) -> Option<(usize, Swizzle)> {
    let contiguous = (0..2).find(|&d| la.contiguous_run(d) >= 16 / eb)?;
    let other = 1 - contiguous;
    Some((
        contiguous,
        Swizzle {
            rows: lb.shape[other],
            row_bytes: lb.shape[contiguous] * eb,
        },
    ))
}

/// The swizzled shared tile a conversion from `la` to `lb` goes through
/// (rows along the last dimension, all of them: the tile before the
/// dropped bits halve it), and the row bits whose values take the tile in
/// turns; `None` for elements other than 2 or 4 bytes, or rows under 16 bytes.
pub fn swizzled_tile(path: MmaPath, la: &Layout, lb: &Layout, dtype: DType) -> Option<(Swizzle, Vec<Bit>)> {
    if dtype == DType::Bool {
        return None;
    }
    let eb = dtype.bytes();
    let cols = *la.shape.last()?;
    let rows: usize = la.shape[..la.shape.len() - 1].iter().product();
    if cols * eb < 16 {
        return None;
    }
    let dropped = if path == MmaPath::Portable {
        parts(la, lb, rows * cols * eb)
    } else {
        Vec::new()
    };
    Some((
        Swizzle {
            rows,
            row_bytes: cols * eb,
        },
        dropped,
    ))
}

/// Row bits held in registers by both layouts (the highest first) whose
/// values split a conversion over [`MAX_PORTABLE_CONVERSION_BYTES`] into
/// parts that take the shared tile in turns; none when it fits at once or
/// the layouts share too few such bits.
fn parts(la: &Layout, lb: &Layout, bytes: usize) -> Vec<Bit> {
    let last = la.shape.len() - 1;
    let mut shared: Vec<Bit> = la
        .reg
        .iter()
        .filter(|&&(dim, _)| dim < last)
        .filter(|b| lb.reg.contains(b))
        .copied()
        .collect();
    shared.sort_by_key(|&(dim, b)| (std::cmp::Reverse(b), dim));
    let needed = bytes
        .div_ceil(MAX_PORTABLE_CONVERSION_BYTES)
        .next_power_of_two()
        .trailing_zeros() as usize;
    if needed > shared.len() {
        return Vec::new();
    }
    shared.truncate(needed);
    shared
}

/// The warp bits of `la` along `axis`: the partial results a reduction
/// combines across warps, through shared memory.
pub fn reduced_warp_bits(la: &Layout, axis: usize) -> Vec<usize> {
    (0..la.warp.len())
        .filter(|&i| matches!(la.warp[i], Some((d, _)) if d == axis))
        .collect()
}

/// Scratch bytes of a reduction of `arg` along `axis` into `result`: one
/// f32 (and for arg-reductions one index) per partial, when warps hold
/// parts of a row.
pub fn reduction_bytes(cx: &Context, op: ReduceOp, arg: ValueId, axis: usize, result: ValueId) -> usize {
    let wbits = reduced_warp_bits(cx.layout(arg), axis);
    if wbits.is_empty() {
        return 0;
    }
    let n: usize = cx.layout(result).shape.iter().product();
    let region = (1usize << wbits.len()) * n * 4;
    if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
        2 * region
    } else {
        region
    }
}

/// A store through TMA (`lower/tma_store.rs`): the tile goes a panel of
/// `inner` columns (a 128-byte line or less) at a time, through a scratch
/// tile of `rows` lines of `line` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TmaStore {
    pub rows: usize,
    pub line: usize,
    pub inner: usize,
}

impl TmaStore {
    /// The store of `value` into tensor `t` through TMA, when it can go
    /// that way: in a warp-specialized kernel (`specialized`), a tensor
    /// accessed with vectors and not read by the kernel (its loads would
    /// not see the copies), a tile not converted into 16-byte runs for the
    /// store (a 16-bit accumulator: staged once already, it stores whole
    /// sectors), rows of 16 bytes to a TMA box's 256, at most one
    /// dimension but the last longer than 1, and threads that split no
    /// more columns than a 128-byte panel holds.
    pub fn of(cx: &Context, t: usize, value: ValueId, specialized: bool) -> Option<TmaStore> {
        let body = &cx.func.body;
        if !specialized || !cx.vectorized.contains(&t) || reads(body, t) || converted(body, value) {
            return None;
        }
        let l = cx.layout(value);
        let eb = cx.func.tensor(t).dtype.bytes();
        let last = l.shape.len() - 1;
        let rows_dim = (0..last).rev().find(|&d| l.shape[d] > 1).or(last.checked_sub(1))?;
        let (cols, rows) = (l.shape[last], l.shape[rows_dim]);
        let line = (cols * eb).min(128);
        let inner = line / eb;
        let threads_split_panels = l
            .lane
            .iter()
            .chain(&l.warp)
            .flatten()
            .any(|&(d, b)| d == last && 1 << b >= inner);
        let one_row_dim = (0..last).all(|d| d == rows_dim || l.shape[d] == 1);
        (line >= 16 && rows <= 256 && one_row_dim && !threads_split_panels).then_some(TmaStore { rows, line, inner })
    }
}

/// Whether `ops` load or gather from tensor `t`.
fn reads(ops: &[Op], t: usize) -> bool {
    all_ops(ops)
        .iter()
        .any(|op| matches!(op.kind, OpKind::Load { tensor, .. } | OpKind::Gather { tensor, .. } if tensor == t))
}

/// Whether `v` is the result of a layout conversion in `ops`.
fn converted(ops: &[Op], v: ValueId) -> bool {
    all_ops(ops)
        .iter()
        .any(|op| matches!(op.kind, OpKind::Convert(_)) && op.results.contains(&v))
}

/// The loop-invariant 16-bit `a` operands of the `mma`s in loop `body`
/// in `wgmma`'s A fragment (the layout pass chose it) with rows of 32
/// bytes or more, other than those in `stored` (stored already, or read
/// from a stage): lowering stores them once, swizzled, before the loop.
pub fn invariant_a_operands(cx: &Context, body: &[Op], stored: &dyn Fn(ValueId) -> bool) -> Vec<ValueId> {
    if cx.path != MmaPath::Wgmma {
        return Vec::new();
    }
    let inside = defined_in(body);
    let mut found = Vec::new();
    for op in all_ops(body) {
        let OpKind::Mma { a, b, .. } = op.kind else {
            continue;
        };
        let l = cx.layout(a);
        let (m, k, n) = (l.shape[0], l.shape[1], cx.layout(b).shape[1]);
        let sw = Swizzle {
            rows: m,
            row_bytes: k * cx.dtype(a).bytes(),
        };
        let fragment = Layout::wgmma_a(m, k, n, cx.func.num_warps).as_ref() == Some(l);
        if !inside.contains(&a) && !stored(a) && !found.contains(&a) && fragment && sw.line_bytes() >= 32 {
            found.push(a);
        }
    }
    found
}

/// The tile a top-level conversion `result` converts, when `result` is
/// one of a later loop's invariant `a` operands and nothing else: then
/// that tile is stored as it is, swizzled, and the conversion (a round
/// trip through the scratch area) is not emitted; the stores then also
/// come after the loop's first copies are issued, so the tile's own load
/// overlaps them.
pub fn staged_once(cx: &Context, result: ValueId) -> Option<ValueId> {
    let body = &cx.func.body;
    let source = body.iter().find_map(|op| match op.kind {
        OpKind::Convert(arg) if op.results.first() == Some(&result) => Some(arg),
        _ => None,
    })?;
    let in_loop = body.iter().find_map(|op| match &op.kind {
        OpKind::For { body: inner, .. } if invariant_a_operands(cx, inner, &|_| false).contains(&result) => Some(inner),
        _ => None,
    })?;
    let as_a = all_ops(in_loop)
        .iter()
        .filter(|op| matches!(op.kind, OpKind::Mma { a, .. } if a == result))
        .count();
    let writable = *cx.layout(source).shape.last()? * cx.dtype(source).bytes() >= 16;
    (writable && as_a == uses(body, result) && cx.layout(source).shape == cx.layout(result).shape).then_some(source)
}
