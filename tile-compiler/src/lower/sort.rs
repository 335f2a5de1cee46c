//! Sorts along an axis (`sort`, `argsort`): a bitonic network over the
//! axis's coordinate bits, each compare-exchange between partners across
//! one bit, in the thread (a register bit) or in another lane
//! (`shfl.sync.bfly`). Every element carries its position along the axis,
//! so the order is strict (ties: the lower position first) and `argsort`
//! is the positions. The layout pass keeps the axis within warps.

use super::emit::*;
use super::state::SortLines;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::Layout;
use crate::ptx::{RegClass, arith_type};

/// A block's direction bit in the network: the same for every thread, or
/// this thread's lane bit.
enum Direction {
    Const(bool),
    Lane(String),
}

/// What a sort's network compares along: the argument's layout and axis,
/// the axis's bits, the key type and the final direction.
struct Network<'l> {
    la: &'l Layout,
    axis: usize,
    bits: u32,
    key: DType,
    descending: bool,
}

impl Network<'_> {
    /// The register bit that selects the axis's bit `b`, if one does.
    fn reg_bit(&self, b: u32) -> Option<usize> {
        self.la.reg.iter().position(|&x| x == (self.axis, b))
    }

    /// The lane bit that selects the axis's bit `b`, if one does.
    fn lane_bit(&self, b: u32) -> Option<usize> {
        self.la.lane.iter().position(|&x| x == Some((self.axis, b)))
    }
}

impl Lower<'_> {
    /// A bitonic network: runs of `keep` positions sorted (all of the axis
    /// for `sort`), then for `topk` each pair of runs, one ascending and one
    /// descending, reduced across the next bit to the better element of
    /// each pair of positions (a bitonic run holding the pair's best
    /// `keep`) and merged; registers of the halves left behind are not
    /// computed again.
    pub(super) fn sort(
        &mut self,
        arg: ValueId,
        axis: usize,
        (descending, indices): (bool, bool),
        keep: usize,
    ) -> Vec<String> {
        let dtype = self.dtype(arg);
        // 16-bit floats compare as f32.
        let key = if dtype.is_half() { DType::F32 } else { dtype };
        let memo = (arg, axis, descending, keep);
        let lines = match self.networks.get(&memo) {
            Some(lines) => lines.clone(),
            None => {
                let lines = self.network(arg, axis, (key, descending), keep);
                self.networks.insert(memo, lines.clone());
                lines
            }
        };
        // `topk` and `argtopk` of one tile share the network.
        let (out, class) = if indices {
            (lines.pos, RegClass::B32)
        } else {
            (lines.vals, RegClass::of(key))
        };
        let out = self.head(axis, keep, out, class, arg);
        if indices || dtype == key {
            out
        } else {
            out.iter().map(|r| self.cast(key, dtype, r)).collect()
        }
    }

    /// The network's elements after it: sorted runs of `keep` positions
    /// cut to the best `keep` as described at [`Lower::sort`].
    fn network(&mut self, arg: ValueId, axis: usize, (key, descending): (DType, bool), keep: usize) -> SortLines {
        let la = self.layout(arg);
        let mut lines = SortLines {
            vals: self.regs_as(arg, key),
            pos: self.axis_positions(la, axis),
        };
        let bits = la.shape[axis].trailing_zeros();
        let kept = keep.trailing_zeros();
        let mut live: Vec<usize> = (0..lines.vals.len()).collect();
        let net = Network {
            la,
            axis,
            bits,
            key,
            descending,
        };
        for s in 1..=kept {
            self.merge(&net, &mut lines, &live, (s, s));
        }
        for b in kept..bits {
            // The better of positions `p` and `p ^ 2^b`, at both.
            if let Some(i) = net.reg_bit(b) {
                for &lo in live.iter().filter(|&&q| q >> i & 1 == 0) {
                    let hi = lo | 1 << i;
                    let c = self.before(
                        key,
                        descending,
                        (&lines.vals[lo], &lines.pos[lo]),
                        (&lines.vals[hi], &lines.pos[hi]),
                    );
                    let (vl, vh) = (lines.vals[lo].clone(), lines.vals[hi].clone());
                    let (pl, ph) = (lines.pos[lo].clone(), lines.pos[hi].clone());
                    lines.vals[lo] = self.select(key, &c, &vl, &vh);
                    lines.pos[lo] = self.select(DType::I32, &c, &pl, &ph);
                }
                live.retain(|&q| q >> i & 1 == 0);
            } else if let Some(i) = net.lane_bit(b) {
                for &q in &live {
                    let (ov, op) = self.partner(key, (&lines.vals[q], &lines.pos[q]), i);
                    let c = self.before(key, descending, (&lines.vals[q], &lines.pos[q]), (&ov, &op));
                    lines.vals[q] = self.select(key, &c, &lines.vals[q].clone(), &ov);
                    lines.pos[q] = self.select(DType::I32, &c, &lines.pos[q].clone(), &op);
                }
            }
            self.merge(&net, &mut lines, &live, (kept, b + 1));
        }
        lines
    }

    /// One merge of a bitonic network: compare-exchanges across the axis's
    /// bits `span - 1` down to 0, in the `live` registers, each block of
    /// `2^span` positions sorted in the network's direction, or the other
    /// way where the position's bit `dir` is set (below the axis's bits).
    fn merge(&mut self, net: &Network, lines: &mut SortLines, live: &[usize], (span, dir_bit): (u32, u32)) {
        let dir_lane = (dir_bit < net.bits)
            .then(|| net.lane_bit(dir_bit))
            .flatten()
            .map(|i| self.lane_pred(i));
        let dir_reg = (dir_bit < net.bits).then(|| net.reg_bit(dir_bit)).flatten();
        let dir = |q: usize| match (&dir_lane, dir_reg) {
            (Some(p), _) => Direction::Lane(p.clone()),
            (None, Some(i)) => Direction::Const(q >> i & 1 == 1),
            (None, None) => Direction::Const(false),
        };
        let key = net.key;
        for t in (0..span).rev() {
            if let Some(i) = net.reg_bit(t) {
                for &lo in live.iter().filter(|&&q| q >> i & 1 == 0) {
                    let hi = lo | 1 << i;
                    let c = self.before(
                        key,
                        net.descending,
                        (&lines.vals[lo], &lines.pos[lo]),
                        (&lines.vals[hi], &lines.pos[hi]),
                    );
                    let keep = self.xor_bit(&c, &dir(lo));
                    let (vl, vh) = (lines.vals[lo].clone(), lines.vals[hi].clone());
                    let (pl, ph) = (lines.pos[lo].clone(), lines.pos[hi].clone());
                    lines.vals[lo] = self.select(key, &keep, &vl, &vh);
                    lines.vals[hi] = self.select(key, &keep, &vh, &vl);
                    lines.pos[lo] = self.select(DType::I32, &keep, &pl, &ph);
                    lines.pos[hi] = self.select(DType::I32, &keep, &ph, &pl);
                }
            } else if let Some(i) = net.lane_bit(t) {
                let upper = self.lane_pred(i);
                for &q in live {
                    let (ov, op) = self.partner(key, (&lines.vals[q], &lines.pos[q]), i);
                    // Keep this lane's element where it belongs before
                    // the partner's and this lane is the lower one (the
                    // block's direction and the lane's side flip that).
                    let c = self.before(key, net.descending, (&lines.vals[q], &lines.pos[q]), (&ov, &op));
                    let c = self.xor_bit(&c, &Direction::Lane(upper.clone()));
                    let keep = self.xor_bit(&c, &dir(q));
                    lines.vals[q] = self.select(key, &keep, &lines.vals[q].clone(), &ov);
                    lines.pos[q] = self.select(DType::I32, &keep, &lines.pos[q].clone(), &op);
                }
            }
        }
    }

    /// The element of the lane across lane bit `i`: its value and position.
    fn partner(&mut self, key: DType, (v, p): (&str, &str), i: usize) -> (String, String) {
        let (ov, op) = (self.reg(RegClass::of(key)), self.reg(RegClass::B32));
        self.emit(format!("shfl.sync.bfly.b32 {ov}, {v}, {}, 31, -1;", 1 << i));
        self.emit(format!("shfl.sync.bfly.b32 {op}, {p}, {}, 31, -1;", 1 << i));
        (ov, op)
    }

    /// The registers of the first `keep` positions along `axis` of `regs`
    /// (in `arg`'s layout, the axis within warps), in that layout's
    /// [`head`](crate::layout::Layout::head): the registers holding them,
    /// and in lanes that held later positions, the values of the lane that
    /// holds the copy's elements.
    fn head(&mut self, axis: usize, keep: usize, regs: Vec<String>, class: RegClass, arg: ValueId) -> Vec<String> {
        let la = self.layout(arg);
        if keep == la.shape[axis] {
            return regs;
        }
        let lr = la.head(axis, keep);
        let at = la.reg_index();
        let kept: Vec<String> = (0..lr.num_regs()).map(|q| regs[at[&lr.reg_coord(q)]].clone()).collect();
        let gone = |b: &Option<(usize, u32)>| matches!(b, Some((d, bit)) if *d == axis && 1usize << bit >= keep);
        let mask: u32 = la
            .lane
            .iter()
            .enumerate()
            .filter(|(_, b)| gone(b))
            .map(|(i, _)| 1 << i)
            .sum();
        if mask == 0 {
            return kept;
        }
        let src = self.reg(RegClass::B32);
        self.emit(format!("and.b32 {src}, {}, {};", self.tid, 31 & !mask));
        kept.iter()
            .map(|v| {
                let d = self.reg(class);
                self.emit(format!("shfl.sync.idx.b32 {d}, {v}, {src}, 31, -1;"));
                d
            })
            .collect()
    }

    /// `c` flipped where `bit` is set.
    fn xor_bit(&mut self, c: &str, bit: &Direction) -> String {
        match bit {
            Direction::Const(false) => c.to_string(),
            Direction::Const(true) => {
                let d = self.reg(RegClass::Pred);
                self.emit(format!("not.pred {d}, {c};"));
                d
            }
            Direction::Lane(p) => {
                let d = self.reg(RegClass::Pred);
                self.emit(format!("xor.pred {d}, {c}, {p};"));
                d
            }
        }
    }

    /// Whether `(value, position)` `a` comes before `b`: the smaller value
    /// first (the larger where `descending`), NaN the largest value, equal
    /// values by position.
    fn before(&mut self, key: DType, descending: bool, a: (&str, &str), b: (&str, &str)) -> String {
        let t = arith_type(key);
        let (lt, gt) = (self.reg(RegClass::Pred), self.reg(RegClass::Pred));
        self.emit(format!("setp.lt.{t} {lt}, {}, {};", a.0, b.0));
        self.emit(format!("setp.gt.{t} {gt}, {}, {};", a.0, b.0));
        if key == DType::F32 {
            // NaN above every number: a NaN `a` is greater than a number `b`.
            let (an, bn, x) = (
                self.reg(RegClass::Pred),
                self.reg(RegClass::Pred),
                self.reg(RegClass::Pred),
            );
            self.emit(format!("setp.nan.f32 {an}, {}, {};", a.0, a.0));
            self.emit(format!("setp.nan.f32 {bn}, {}, {};", b.0, b.0));
            self.emit(format!("not.pred {x}, {an};"));
            self.emit(format!("and.pred {x}, {x}, {bn};"));
            self.emit(format!("or.pred {lt}, {lt}, {x};"));
            self.emit(format!("not.pred {x}, {bn};"));
            self.emit(format!("and.pred {x}, {x}, {an};"));
            self.emit(format!("or.pred {gt}, {gt}, {x};"));
        }
        let (first, second) = if descending { (gt, lt) } else { (lt, gt) };
        // Equal values (neither before the other): the lower position first.
        let (eq, earlier, d) = (
            self.reg(RegClass::Pred),
            self.reg(RegClass::Pred),
            self.reg(RegClass::Pred),
        );
        self.emit(format!("or.pred {eq}, {first}, {second};"));
        self.emit(format!("not.pred {eq}, {eq};"));
        self.emit(format!("setp.lt.s32 {earlier}, {}, {};", a.1, b.1));
        self.emit(format!("and.pred {d}, {eq}, {earlier};"));
        self.emit(format!("or.pred {d}, {d}, {first};"));
        d
    }
}
