//! Sorts along an axis (`sort`, `argsort`): a bitonic network over the
//! axis's coordinate bits, each compare-exchange between partners across
//! one bit, in the thread (a register bit) or in another lane
//! (`shfl.sync.bfly`). Every element carries its position along the axis,
//! so the order is strict (ties: the lower position first) and `argsort`
//! is the positions. The layout pass keeps the axis within warps.

use super::emit::*;
use crate::dtype::DType;
use crate::ir::*;
use crate::ptx::{RegClass, arith_type};

/// A block's direction bit in the network: the same for every thread, or
/// this thread's lane bit.
enum Direction {
    Const(bool),
    Lane(String),
}

impl Lower<'_> {
    pub(super) fn sort(
        &mut self,
        arg: ValueId,
        axis: usize,
        (descending, indices): (bool, bool),
        keep: usize,
    ) -> Vec<String> {
        let la = self.layout(arg);
        let dtype = self.dtype(arg);
        // 16-bit floats compare as f32.
        let key = if dtype.is_half() { DType::F32 } else { dtype };
        let mut vals = self.regs_as(arg, key);
        let mut pos = self.axis_positions(la, axis);
        let bits = la.shape[axis].trailing_zeros();
        let reg_bit = |b: u32| la.reg.iter().position(|&x| x == (axis, b));
        let lane_bit = |b: u32| la.lane.iter().position(|&x| x == Some((axis, b)));
        for s in 1..=bits {
            // Blocks of 2^s positions: those with bit `s` set run the other way.
            let dir_lane = (s < bits).then(|| lane_bit(s)).flatten().map(|i| self.lane_pred(i));
            let dir = |q: usize| match (&dir_lane, (s < bits).then(|| reg_bit(s)).flatten()) {
                (Some(p), _) => Direction::Lane(p.clone()),
                (None, Some(i)) => Direction::Const(q >> i & 1 == 1),
                (None, None) => Direction::Const(false),
            };
            for t in (0..s).rev() {
                if let Some(i) = reg_bit(t) {
                    for lo in (0..vals.len()).filter(|q| q >> i & 1 == 0) {
                        let hi = lo | 1 << i;
                        let c = self.before(key, descending, (&vals[lo], &pos[lo]), (&vals[hi], &pos[hi]));
                        let keep = self.xor_bit(&c, &dir(lo));
                        let (vl, vh) = (vals[lo].clone(), vals[hi].clone());
                        let (pl, ph) = (pos[lo].clone(), pos[hi].clone());
                        vals[lo] = self.select(key, &keep, &vl, &vh);
                        vals[hi] = self.select(key, &keep, &vh, &vl);
                        pos[lo] = self.select(DType::I32, &keep, &pl, &ph);
                        pos[hi] = self.select(DType::I32, &keep, &ph, &pl);
                    }
                } else if let Some(i) = lane_bit(t) {
                    let upper = self.lane_pred(i);
                    for q in 0..vals.len() {
                        let (ov, op) = (self.reg(RegClass::of(key)), self.reg(RegClass::B32));
                        self.emit(format!("shfl.sync.bfly.b32 {ov}, {}, {}, 31, -1;", vals[q], 1 << i));
                        self.emit(format!("shfl.sync.bfly.b32 {op}, {}, {}, 31, -1;", pos[q], 1 << i));
                        // Keep this lane's element where it belongs before
                        // the partner's and this lane is the lower one (the
                        // block's direction and the lane's side flip that).
                        let c = self.before(key, descending, (&vals[q], &pos[q]), (&ov, &op));
                        let c = self.xor_bit(&c, &Direction::Lane(upper.clone()));
                        let keep = self.xor_bit(&c, &dir(q));
                        vals[q] = self.select(key, &keep, &vals[q].clone(), &ov);
                        pos[q] = self.select(DType::I32, &keep, &pos[q].clone(), &op);
                    }
                }
            }
        }
        let (out, class) = if indices {
            (pos, RegClass::B32)
        } else {
            (vals, RegClass::of(key))
        };
        let out = self.head(axis, keep, out, class, arg);
        if indices || dtype == key {
            out
        } else {
            out.iter().map(|r| self.cast(key, dtype, r)).collect()
        }
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
