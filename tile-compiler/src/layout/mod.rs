//! Layouts: which thread holds which tile element in which register, and the
//! pass that gives every tile value one.
//!
//! All tile dimensions are powers of two, so a layout is a map from the bits
//! of (register index, lane, warp) to the bits of the element's coordinates
//! (a "linear layout" as in Triton, restricted to permutations). A lane or
//! warp bit that maps to no coordinate bit means those threads hold copies.
//! Reductions, broadcasts, reshapes and transposes are then bit relabelings.

use crate::ir::*;
use crate::warps::WarpSplit;
use std::collections::{HashMap, HashSet};

mod assign;
pub use assign::assign_layouts;

/// Bit `1` of dimension `0` is written `(0, 1)`.
pub type Bit = (usize, u32);

pub const LANE_BITS: usize = 5;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Vec<usize>,
    /// Register index bit i selects coordinate bit `reg[i]`.
    pub reg: Vec<Bit>,
    /// Lane bit i selects `lane[i]`, or nothing (lanes hold copies).
    pub lane: Vec<Option<Bit>>,
    /// Warp bit i selects `warp[i]`, or nothing.
    pub warp: Vec<Option<Bit>>,
}

fn log2(n: usize) -> u32 {
    n.trailing_zeros()
}

/// Coordinate bits of `shape` in row-major order, lowest first.
fn row_major_bits(shape: &[usize]) -> Vec<Bit> {
    let mut bits = Vec::new();
    for d in (0..shape.len()).rev() {
        for b in 0..log2(shape[d]) {
            bits.push((d, b));
        }
    }
    bits
}

impl Layout {
    /// The default layout: each thread owns runs of `vec` contiguous elements
    /// of the last dimension (one 16-byte access), lanes cover the next
    /// elements of the row (coalesced), warps split the outermost dimensions
    /// first (so several rows reduce without crossing warps), and registers
    /// repeat the pattern over the rest.
    pub fn blocked(shape: &[usize], num_warps: u32, vec: usize) -> Layout {
        let row_major = row_major_bits(shape);
        let last_bits = shape.last().map(|&n| log2(n)).unwrap_or(0) as usize;
        let nvec = (log2(vec) as usize).min(last_bits);
        let mut reg: Vec<Bit> = row_major[..nvec].to_vec();
        let mut free = row_major[nvec..].iter().copied();
        let lane: Vec<Option<Bit>> = (0..LANE_BITS).map(|_| free.next()).collect();
        let rest: Vec<Bit> = free.collect();
        // Outermost dimension first, lowest bit first within a dimension.
        let mut outer_first = rest.clone();
        outer_first.sort_by_key(|&(d, b)| (d, b));
        let warp: Vec<Option<Bit>> = (0..log2(num_warps as usize) as usize)
            .map(|i| outer_first.get(i).copied())
            .collect();
        reg.extend(rest.into_iter().filter(|b| !warp.contains(&Some(*b))));
        Layout {
            shape: shape.to_vec(),
            reg,
            lane,
            warp,
        }
    }

    /// The same with the warp bits of `axis` moved into the registers:
    /// every warp holds whole lines along `axis`, so a scan or sort along
    /// it stays within warps. A warp bit on the axis trades places with
    /// the highest register bit of another dimension (the warps then hold
    /// other lines); without one, the warps that split the axis hold
    /// copies of it instead.
    pub fn within_warps(&self, axis: usize) -> Layout {
        let mut l = self.clone();
        for i in 0..l.warp.len() {
            if let Some(bit) = l.warp[i]
                && bit.0 == axis
            {
                match l.reg.iter().rposition(|b| b.0 != axis) {
                    Some(j) => {
                        l.warp[i] = Some(l.reg[j]);
                        l.reg[j] = bit;
                    }
                    None => {
                        l.reg.push(bit);
                        l.warp[i] = None;
                    }
                }
            }
        }
        l
    }

    /// The accumulator layout of an `[m, n]` `mma` tile: the C fragment of
    /// `mma.sync.m16n8` repeated over each warp's tile, warps as [`mma_warps`].
    pub fn mma_acc(m: usize, n: usize, num_warps: u32, split: WarpSplit) -> Layout {
        let (warp, tm, tn) = mma_warps(m, n, num_warps, split);
        let mut reg = vec![(1, 0), (0, 3)];
        reg.extend((3..log2(tn)).map(|b| (1, b)));
        reg.extend((4..log2(tm)).map(|b| (0, b)));
        Layout {
            shape: vec![m, n],
            reg,
            lane: vec![Some((1, 1)), Some((1, 2)), Some((0, 0)), Some((0, 1)), Some((0, 2))],
            warp,
        }
    }

    /// The accumulator layout of an `[m, n]` `wgmma` tile (see
    /// [`wgmma_warpgroups`]): in each warpgroup, warp w holds rows
    /// 16w..16w+16 of every 64-row slab, in the C fragment of `mma.sync.m16n8`
    /// repeated along N (`wgmma`'s register order), then over the slabs.
    pub fn wgmma_acc(m: usize, n: usize, num_warps: u32) -> Option<Layout> {
        let (groups, tm, tn) = wgmma_warpgroups(m, n, num_warps)?;
        let mut reg = vec![(1, 0), (0, 3)];
        reg.extend((3..log2(tn)).map(|b| (1, b)));
        reg.extend((6..log2(tm)).map(|b| (0, b)));
        let mut warp = vec![Some((0, 4)), Some((0, 5))];
        warp.extend(groups.into_iter().map(Some));
        Some(Layout {
            shape: vec![m, n],
            reg,
            lane: vec![Some((1, 1)), Some((1, 2)), Some((0, 0)), Some((0, 1)), Some((0, 2))],
            warp,
        })
    }

    /// The register-sourced A fragment of a 16-bit `wgmma` whose result is
    /// `[m, n]` (warpgroups as [`wgmma_warpgroups`]): per warp the
    /// `mma.sync.m16n8k16` A fragment, warp w of a warpgroup on rows
    /// 16w..16w+16 of every 64-row slab, registers repeated over K, then
    /// over the slabs. Warpgroups that split N hold copies. The rows are
    /// [`wgmma_acc`](Self::wgmma_acc)'s, so a tile computed from a product
    /// feeds the next one without leaving its threads (attention's `p`).
    pub fn wgmma_a(m: usize, k: usize, n: usize, num_warps: u32) -> Option<Layout> {
        let (groups, tm, _) = wgmma_warpgroups(m, n, num_warps)?;
        let mut reg = vec![(1, 0), (0, 3), (1, 3)];
        reg.extend((4..log2(k)).map(|b| (1, b)));
        reg.extend((6..log2(tm)).map(|b| (0, b)));
        let mut warp = vec![Some((0, 4)), Some((0, 5))];
        warp.extend(groups.into_iter().map(|(d, b)| (d == 0).then_some((0, b))));
        Some(Layout {
            shape: vec![m, k],
            reg,
            lane: vec![Some((1, 1)), Some((1, 2)), Some((0, 0)), Some((0, 1)), Some((0, 2))],
            warp,
        })
    }

    /// The accumulator layout of an `[m, n]` tile that `wgmma` computes
    /// transposed, as `b^T a^T`: the [`wgmma_acc`](Self::wgmma_acc) layout
    /// of the `[n, m]` product, transposed. A warp's eight row groups are
    /// eight consecutive columns, so each store instruction writes whole
    /// 32-byte sectors of f32.
    pub fn wgmma_acc_swapped(m: usize, n: usize, num_warps: u32) -> Option<Layout> {
        Some(Layout::wgmma_acc(n, m, num_warps)?.permute(&[1, 0]))
    }

    /// The register-sourced A fragment of the transposed product `b^T a^T`
    /// (tf32 `m64nNk8`: per warp the `mma.sync.m16n8k8` A fragment, warp w
    /// of a warpgroup on rows 16w..16w+16), in `b`'s coordinates `[k, n]`:
    /// registers repeat it over K, then over the warpgroup's 64-row slabs.
    /// Warpgroups that split `m` hold copies. A warp's read of one register
    /// (four K rows of eight consecutive N columns in a 128-byte-swizzled
    /// tile) meets 2-way bank conflicts when the rows are stored in order;
    /// the pipeline stores them interleaved, which avoids them
    /// (`lower::pipeline::interleaved_row`). Permuting the product's rows
    /// instead leaves the accumulator in 16-byte runs, stored through a
    /// shared tile that leaves 128x256 f32 tiles two stages (slower:
    /// bench-results/LOG.md).
    pub fn wgmma_a_swapped(k: usize, n: usize, m: usize, num_warps: u32) -> Option<Layout> {
        let (groups, rows, _) = wgmma_warpgroups(n, m, num_warps)?;
        let mut reg = vec![(1, 3), (0, 2)];
        reg.extend((3..log2(k)).map(|b| (0, b)));
        reg.extend((6..log2(rows)).map(|b| (1, b)));
        let mut warp = vec![Some((1, 4)), Some((1, 5))];
        warp.extend(groups.into_iter().map(|(d, b)| (d == 0).then_some((1, b))));
        Some(Layout {
            shape: vec![k, n],
            reg,
            lane: vec![Some((0, 0)), Some((0, 1)), Some((1, 0)), Some((1, 1)), Some((1, 2))],
            warp,
        })
    }

    /// The A-operand layout (`[m, k]`, row-major fragments) of an `mma` whose
    /// result is `[m, n]`; `tf32` selects the m16n8k8 fragment.
    pub fn mma_a(m: usize, k: usize, n: usize, num_warps: u32, split: WarpSplit, tf32: bool) -> Layout {
        let (warp, tm, _) = mma_warps(m, n, num_warps, split);
        // Warps along N share A: those warp bits select nothing.
        let warp = warp.into_iter().map(|w| w.filter(|b| b.0 == 0)).collect();
        let (mut reg, lane) = if tf32 {
            (
                vec![(0, 3), (1, 2)],
                vec![Some((1, 0)), Some((1, 1)), Some((0, 0)), Some((0, 1)), Some((0, 2))],
            )
        } else {
            (
                vec![(1, 0), (0, 3), (1, 3)],
                vec![Some((1, 1)), Some((1, 2)), Some((0, 0)), Some((0, 1)), Some((0, 2))],
            )
        };
        let k0 = if tf32 { 3 } else { 4 };
        reg.extend((k0..log2(k)).map(|b| (1, b)));
        reg.extend((4..log2(tm)).map(|b| (0, b)));
        Layout {
            shape: vec![m, k],
            reg,
            lane,
            warp,
        }
    }

    /// The B-operand layout (`[k, n]`, column fragments) of an `mma` whose
    /// result is `[m, n]`.
    pub fn mma_b(k: usize, n: usize, m: usize, num_warps: u32, split: WarpSplit, tf32: bool) -> Layout {
        let (warp, _, tn) = mma_warps(m, n, num_warps, split);
        let warp = warp.into_iter().map(|w| w.filter(|b| b.0 == 1)).collect();
        let (mut reg, lane) = if tf32 {
            (
                vec![(0, 2)],
                vec![Some((0, 0)), Some((0, 1)), Some((1, 0)), Some((1, 1)), Some((1, 2))],
            )
        } else {
            (
                vec![(0, 0), (0, 3)],
                vec![Some((0, 1)), Some((0, 2)), Some((1, 0)), Some((1, 1)), Some((1, 2))],
            )
        };
        reg.extend((3..log2(tn)).map(|b| (1, b)));
        let k0 = if tf32 { 3 } else { 4 };
        reg.extend((k0..log2(k)).map(|b| (0, b)));
        Layout {
            shape: vec![k, n],
            reg,
            lane,
            warp,
        }
    }

    /// The register holding each coordinate in thread 0 (lane 0 of warp 0).
    pub fn reg_index(&self) -> HashMap<Vec<usize>, usize> {
        (0..self.num_regs()).map(|r| (self.reg_coord(r), r)).collect()
    }

    pub fn num_regs(&self) -> usize {
        1 << self.reg.len()
    }

    fn add_bit(coord: &mut [usize], bit: Option<Bit>) {
        if let Some((d, b)) = bit {
            coord[d] |= 1 << b;
        }
    }

    /// The coordinates register `r` holds in thread (lane 0, warp 0).
    pub fn reg_coord(&self, r: usize) -> Vec<usize> {
        let mut c = vec![0; self.shape.len()];
        for (i, bit) in self.reg.iter().enumerate() {
            if r >> i & 1 == 1 {
                Self::add_bit(&mut c, Some(*bit));
            }
        }
        c
    }

    /// The coordinates register `r` holds in the thread with index `tid`.
    pub fn coord(&self, r: usize, tid: usize) -> Vec<usize> {
        let mut c = self.reg_coord(r);
        for (i, bit) in self.lane.iter().enumerate() {
            if tid >> i & 1 == 1 {
                Self::add_bit(&mut c, *bit);
            }
        }
        for (i, bit) in self.warp.iter().enumerate() {
            if tid >> (LANE_BITS + i) & 1 == 1 {
                Self::add_bit(&mut c, *bit);
            }
        }
        c
    }

    /// Thread-index bits that select no coordinate: threads differing only in
    /// them hold the same elements.
    pub fn replicated_mask(&self) -> u32 {
        let mut m = 0;
        for (i, b) in self.lane.iter().enumerate() {
            if b.is_none() {
                m |= 1 << i;
            }
        }
        for (i, b) in self.warp.iter().enumerate() {
            if b.is_none() {
                m |= 1 << (LANE_BITS + i);
            }
        }
        m
    }

    /// The layout of a tile of shape `to` (same rank, each dimension equal
    /// or 1) seen from this one: bits of the collapsed dimensions disappear.
    ///
    /// This is both the layout of a reduction's result and the layout a
    /// value must have to be broadcast into this one without moving data.
    pub fn project(&self, to: &[usize]) -> Layout {
        let gone = |b: &Bit| to[b.0] == 1 && self.shape[b.0] > 1;
        Layout {
            shape: to.to_vec(),
            reg: self.reg.iter().copied().filter(|b| !gone(b)).collect(),
            lane: self.lane.iter().map(|b| b.filter(|b| !gone(b))).collect(),
            warp: self.warp.iter().map(|b| b.filter(|b| !gone(b))).collect(),
        }
    }

    /// The first `len` positions (a power of two) along `axis`: the axis's
    /// bits from `len` up disappear, registers dropped, lanes and warps
    /// left holding copies.
    pub fn head(&self, axis: usize, len: usize) -> Layout {
        let gone = |b: &Bit| b.0 == axis && 1usize << b.1 >= len;
        let mut shape = self.shape.clone();
        shape[axis] = len;
        Layout {
            shape,
            reg: self.reg.iter().copied().filter(|b| !gone(b)).collect(),
            lane: self.lane.iter().map(|b| b.filter(|b| !gone(b))).collect(),
            warp: self.warp.iter().map(|b| b.filter(|b| !gone(b))).collect(),
        }
    }

    /// The same elements seen as another row-major shape: a relabeling of bits.
    pub fn reshape(&self, to: &[usize]) -> Layout {
        let from_bits = row_major_bits(&self.shape);
        let to_bits = row_major_bits(to);
        let flat: HashMap<Bit, usize> = from_bits.iter().enumerate().map(|(i, b)| (*b, i)).collect();
        let relabel = |b: &Bit| to_bits[flat[b]];
        Layout {
            shape: to.to_vec(),
            reg: self.reg.iter().map(relabel).collect(),
            lane: self.lane.iter().map(|b| b.as_ref().map(relabel)).collect(),
            warp: self.warp.iter().map(|b| b.as_ref().map(relabel)).collect(),
        }
    }

    /// Dimension `i` of the result is dimension `perm[i]` of this layout.
    pub fn permute(&self, perm: &[usize]) -> Layout {
        let inv: Vec<usize> = (0..perm.len())
            .map(|d| perm.iter().position(|&p| p == d).expect("permutation"))
            .collect();
        let relabel = |b: &Bit| (inv[b.0], b.1);
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            reg: self.reg.iter().map(relabel).collect(),
            lane: self.lane.iter().map(|b| b.as_ref().map(relabel)).collect(),
            warp: self.warp.iter().map(|b| b.as_ref().map(relabel)).collect(),
        }
    }

    /// The same layout with bit `b` of dimension `dim` renamed `rename(b)`:
    /// where each element lies when that dimension's index is stored with
    /// its bits permuted.
    pub fn rename_bits(&self, dim: usize, rename: impl Fn(u32) -> u32) -> Layout {
        let relabel = |&(d, b): &Bit| if d == dim { (d, rename(b)) } else { (d, b) };
        Layout {
            shape: self.shape.clone(),
            reg: self.reg.iter().map(relabel).collect(),
            lane: self.lane.iter().map(|b| b.as_ref().map(relabel)).collect(),
            warp: self.warp.iter().map(|b| b.as_ref().map(relabel)).collect(),
        }
    }

    /// When `other` holds the same elements in the same threads, only in
    /// another register order: for each register of `other`, the register of
    /// `self` that holds its element.
    pub fn register_permutation(&self, other: &Layout) -> Option<Vec<usize>> {
        if self.shape != other.shape || self.lane != other.lane || self.warp != other.warp {
            return None;
        }
        let pos: Vec<usize> = other
            .reg
            .iter()
            .map(|b| self.reg.iter().position(|x| x == b))
            .collect::<Option<_>>()?;
        if pos.len() != self.reg.len() {
            return None;
        }
        Some(
            (0..other.num_regs())
                .map(|r| {
                    pos.iter()
                        .enumerate()
                        .filter(|(i, _)| r >> i & 1 == 1)
                        .map(|(_, p)| 1 << p)
                        .sum()
                })
                .collect(),
        )
    }

    /// How many consecutive elements of dimension `dim` a warp holds in one
    /// register slot: the thread's leading run and the lanes that continue it.
    pub fn warp_run(&self, dim: usize) -> usize {
        let run = self.contiguous_run(dim).trailing_zeros();
        let lanes = (run..).take_while(|&b| self.lane.contains(&Some((dim, b)))).count() as u32;
        1 << (run + lanes)
    }

    /// How many leading registers hold consecutive elements of dimension
    /// `dim` (a run that a vector memory access can move at once).
    pub fn contiguous_run(&self, dim: usize) -> usize {
        let k = self
            .reg
            .iter()
            .enumerate()
            .take_while(|(i, b)| **b == (dim, *i as u32))
            .count();
        1 << k
    }
}

/// How the warpgroups (four warps each) of a block split an `[m, n]`
/// `wgmma` tile: the coordinate bit each warpgroup bit selects (M first,
/// while each keeps at least 64 rows, then N), and the warpgroup tile
/// `[tm, tn]`. `None` when `wgmma` cannot compute the tile: fewer than four
/// warps or a warp count not a multiple of four, fewer than 64 rows per
/// warpgroup, or fewer than 8 columns.
pub fn wgmma_warpgroups(m: usize, n: usize, num_warps: u32) -> Option<(Vec<Bit>, usize, usize)> {
    if num_warps < 4 || !num_warps.is_multiple_of(4) || m < 64 || n < 8 {
        return None;
    }
    let (mut tm, mut tn) = (m, n);
    let mut groups = Vec::new();
    for _ in 0..log2(num_warps as usize / 4) {
        if tm / 2 >= 64 {
            groups.push((0, log2(tm) - 1));
            tm /= 2;
        } else if tn / 2 >= 8 {
            groups.push((1, log2(tn) - 1));
            tn /= 2;
        } else {
            return None;
        }
    }
    Some((groups, tm, tn))
}

/// How the warps of a block split an `[m, n]` `mma` tile: for each warp bit
/// the coordinate bit it selects (the highest bits of M or N), and the warp
/// tile `[tm, tn]` (at least 16 x 8). Splits as `split` says first.
pub fn mma_warps(m: usize, n: usize, num_warps: u32, split: WarpSplit) -> (Vec<Option<Bit>>, usize, usize) {
    let (mut tm, mut tn) = (m, n);
    let mut warp = Vec::new();
    for _ in 0..log2(num_warps as usize) {
        let first_m = split == WarpSplit::Rows || tm >= tn;
        let split_m = tm / 2 >= 16 && (first_m || tn / 2 < 8);
        if split_m {
            warp.push(Some((0, log2(tm) - 1)));
            tm /= 2;
        } else if tn / 2 >= 8 {
            warp.push(Some((1, log2(tn) - 1)));
            tn /= 2;
        } else {
            warp.push(None);
        }
    }
    (warp, tm, tn)
}

/// The layouts of all tile values of a function, after the pass.
pub type Layouts = HashMap<ValueId, Layout>;

/// Which instructions compute `mma`: `mma.sync` everywhere, or Hopper's
/// warpgroup `wgmma` (16-bit operands; sm_90a only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmaPath {
    Portable,
    Wgmma,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgmma_accumulator_covers_the_tile_in_the_instruction_register_order() {
        for (m, n, warps) in [(64, 64, 4), (128, 128, 8), (128, 256, 8), (128, 64, 4), (64, 128, 8)] {
            let l = Layout::wgmma_acc(m, n, warps).expect("fits wgmma");
            let mut seen = vec![0usize; m * n];
            for tid in 0..32 * warps as usize {
                for r in 0..l.num_regs() {
                    let c = l.coord(r, tid);
                    seen[c[0] * n + c[1]] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{m}x{n} on {warps} warps");
            // PTX's m64nNk16 D fragment: warp w of a warpgroup holds rows
            // 16w + lane/4 (+8), register 4j + i at column 8j + 2(lane%4) + i%2.
            let (lane, warp) = (13, 2);
            let tid = 32 * warp + lane;
            for j in 0..4 {
                for i in 0..4 {
                    let c = l.coord(4 * j + i, tid);
                    assert_eq!(
                        c,
                        vec![16 * warp + lane / 4 + 8 * (i / 2), 8 * j + 2 * (lane % 4) + i % 2]
                    );
                }
            }
        }
        assert!(Layout::wgmma_acc(32, 64, 4).is_none(), "fewer than 64 rows");
        assert!(Layout::wgmma_acc(64, 64, 2).is_none(), "not a warpgroup");
    }

    #[test]
    fn transposed_wgmma_product_covers_the_tile_in_the_instruction_register_order() {
        for (m, n, warps) in [(128, 128, 8), (64, 64, 4), (64, 128, 4), (128, 64, 8), (128, 256, 8)] {
            let acc = Layout::wgmma_acc_swapped(m, n, warps).expect("fits wgmma");
            let k = 32;
            let frag = Layout::wgmma_a_swapped(k, n, m, warps).expect("fits wgmma");
            let (mut seen_acc, mut seen_frag) = (vec![0usize; m * n], vec![0usize; k * n]);
            for tid in 0..32 * warps as usize {
                for r in 0..acc.num_regs() {
                    let c = acc.coord(r, tid);
                    seen_acc[c[0] * n + c[1]] += 1;
                }
                for r in 0..frag.num_regs() {
                    let c = frag.coord(r, tid);
                    seen_frag[c[0] * n + c[1]] += 1;
                }
            }
            assert!(seen_acc.iter().all(|&s| s == 1), "{m}x{n} on {warps} warps");
            // Warpgroups along M hold copies of `b`'s fragment.
            let copies = warps as usize / 4 / (n / 64).min(warps as usize / 4);
            assert!(seen_frag.iter().all(|&s| s == copies), "{m}x{n} on {warps} warps");
            // The product's m64nNk8 fragments: A register i holds row
            // 16w + lane/4 (+8 for i odd), K column lane%4 (+4 for i >= 2);
            // D register 4j + i holds the same rows at column 8j + 2(lane%4) + i%2.
            let (lane, warp) = (13, 2);
            let tid = 32 * warp + lane;
            for i in 0..4 {
                let row = 16 * warp + lane / 4 + 8 * (i % 2);
                assert_eq!(frag.coord(i, tid), vec![lane % 4 + 4 * (i / 2), row]);
                for j in 0..4 {
                    let row = 16 * warp + lane / 4 + 8 * (i / 2);
                    assert_eq!(acc.coord(4 * j + i, tid), vec![8 * j + 2 * (lane % 4) + i % 2, row]);
                }
            }
        }
    }

    #[test]
    fn warp_runs_count_the_lanes_that_continue_a_threads_run() {
        // mma.sync's accumulator: 2 columns a thread, 4 lanes along the row.
        assert_eq!(Layout::mma_acc(64, 64, 4, WarpSplit::Longer).warp_run(1), 8);
        assert_eq!(Layout::mma_acc(64, 64, 4, WarpSplit::Longer).warp_run(0), 8);
        // Its transpose: one element a thread, 8 lanes along the row.
        assert_eq!(Layout::wgmma_acc_swapped(128, 128, 8).expect("fits").warp_run(1), 8);
        assert_eq!(Layout::blocked(&[64, 64], 4, 4).warp_run(1), 64);
    }

    #[test]
    fn blocked_layout_covers_each_element_once() {
        for (shape, warps, vec) in [
            (vec![1, 1024], 4, 4),
            (vec![64, 64], 4, 4),
            (vec![8, 2], 2, 8),
            (vec![16], 8, 4),
            (vec![4, 8, 16], 2, 8),
        ] {
            let l = Layout::blocked(&shape, warps, vec);
            let n: usize = shape.iter().product();
            let mut seen = vec![0usize; n];
            let threads = 32 * warps as usize;
            for tid in 0..threads {
                if tid as u32 & l.replicated_mask() != 0 {
                    continue;
                }
                for r in 0..l.num_regs() {
                    let c = l.coord(r, tid);
                    let flat = c.iter().zip(&shape).fold(0, |acc, (x, d)| acc * d + x);
                    seen[flat] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{shape:?}: {seen:?}");
        }
    }

    #[test]
    fn blocked_layout_gives_each_thread_a_16_byte_run() {
        let l = Layout::blocked(&[1, 4096], 8, 4);
        assert_eq!(l.contiguous_run(1), 4);
        assert_eq!(l.coord(0, 1), vec![0, 4]);
        assert_eq!(l.coord(0, 32), vec![0, 128]);
        assert_eq!(l.coord(4, 0), vec![0, 1024]);
    }

    #[test]
    fn blocked_layout_gives_warps_whole_rows_when_it_can() {
        let l = Layout::blocked(&[4, 1024], 4, 8);
        assert_eq!(l.warp, vec![Some((0, 0)), Some((0, 1))]);
        // A row reduction then stays inside each warp.
        assert!(l.project(&[4, 1]).warp.iter().all(|b| b.is_some()));
    }

    #[test]
    fn reduction_result_broadcasts_back_without_moving_data() {
        let l = Layout::blocked(&[64, 64], 4, 4);
        let reduced = l.project(&[64, 1]);
        // Each thread holds the row sums of exactly the rows it holds.
        for tid in 0..128 {
            for r in 0..l.num_regs() {
                let c = l.coord(r, tid);
                let found = (0..reduced.num_regs()).any(|q| reduced.coord(q, tid) == vec![c[0], 0]);
                assert!(found);
            }
        }
    }

    #[test]
    fn reshape_and_permute_keep_elements_in_place() {
        let l = Layout::blocked(&[8, 16], 2, 4);
        let r = l.reshape(&[2, 4, 16]);
        let p = l.permute(&[1, 0]);
        for tid in 0..64 {
            for q in 0..l.num_regs() {
                let c = l.coord(q, tid);
                let flat = c[0] * 16 + c[1];
                let cr = r.coord(q, tid);
                assert_eq!(cr[0] * 64 + cr[1] * 16 + cr[2], flat);
                assert_eq!(p.coord(q, tid), vec![c[1], c[0]]);
            }
        }
    }

    /// Every element of an mma tile is held exactly once per group of warps
    /// that needs it (operands are shared across the other dimension).
    #[test]
    fn mma_layouts_cover_their_tiles() {
        for (m, n, k, w, tf32, split) in [
            (16, 8, 16, 1, false, WarpSplit::Longer),
            (128, 128, 32, 8, false, WarpSplit::Longer),
            (64, 32, 16, 4, true, WarpSplit::Longer),
            (32, 256, 64, 8, false, WarpSplit::Longer),
            (64, 128, 16, 4, false, WarpSplit::Rows),
            (128, 64, 32, 8, true, WarpSplit::Rows),
        ] {
            for (l, copies) in [
                (Layout::mma_acc(m, n, w, split), 1),
                (Layout::mma_a(m, k, n, w, split, tf32), 0),
                (Layout::mma_b(k, n, m, w, split, tf32), 0),
            ] {
                let total: usize = l.shape.iter().product();
                let mut seen = vec![0usize; total];
                for tid in 0..32 * w as usize {
                    for r in 0..l.num_regs() {
                        let c = l.coord(r, tid);
                        seen[c[0] * l.shape[1] + c[1]] += 1;
                    }
                }
                let first = seen[0];
                assert!(seen.iter().all(|&s| s == first), "{:?} uneven: {seen:?}", l.shape);
                if copies == 1 {
                    assert_eq!(first, 1, "the accumulator is not replicated");
                }
            }
        }
    }

    #[test]
    fn register_permutation_maps_equal_elements() {
        let a = Layout::blocked(&[4, 8], 1, 4);
        let mut b = a.clone();
        b.reg.reverse();
        let map = a.register_permutation(&b).expect("same threads");
        for (rb, &ra) in map.iter().enumerate() {
            assert_eq!(a.reg_coord(ra), b.reg_coord(rb));
        }
    }
}
