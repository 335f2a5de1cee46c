//! Sorts along an axis (`sort`, `argsort`, `topk`): a bitonic network over
//! the axis's coordinate bits, each compare-exchange between partners
//! across one bit, in the thread (a register bit), another lane
//! (`shfl.sync.bfly`) or another warp (through shared memory). Each
//! element goes through the network as one unsigned key, its value made to
//! order as an unsigned integer above its position (flipped for a
//! descending sort): 64 bits, 32 for bf16. One compare orders values and
//! breaks ties by position (the lower first), and `argsort` is the
//! positions. For `topk` the layout pass keeps the axis within warps.

use super::emit::*;
use super::state::SortLines;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::{LANE_BITS, Layout};
use crate::ptx::RegClass;

/// A block's direction bit in the network: the same for every thread, or
/// a bit of this thread's index.
enum Direction {
    Const(bool),
    Lane(String),
}

/// What a sort's network compares along: the argument's layout and axis,
/// the axis's bits and the final direction.
struct Network<'l> {
    la: &'l Layout,
    axis: usize,
    bits: u32,
    descending: bool,
    /// 64-bit keys; bf16 values take 32 (16 bits of value above 16 of
    /// position: an axis holds at most 65,536).
    wide: bool,
}

impl Network<'_> {
    fn class(&self) -> RegClass {
        if self.wide { RegClass::B64 } else { RegClass::B32 }
    }
}

impl Network<'_> {
    /// The register bit that selects the axis's bit `b`, if one does.
    fn reg_bit(&self, b: u32) -> Option<usize> {
        self.la.reg.iter().position(|&x| x == (self.axis, b))
    }

    /// The thread-index bit that selects the axis's bit `b`, if one does,
    /// and whether it is a lane's (else a warp's).
    fn thread_bit(&self, b: u32) -> Option<(usize, bool)> {
        let bit = Some((self.axis, b));
        match self.la.lane.iter().position(|&x| x == bit) {
            Some(i) => Some((i, true)),
            None => self
                .la
                .warp
                .iter()
                .position(|&x| x == bit)
                .map(|w| (LANE_BITS + w, false)),
        }
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
        // `topk` and `argtopk` of one tile share the network.
        let lines = match self.networks.get(&memo) {
            Some(lines) => lines.clone(),
            None => {
                let lines = self.network(arg, axis, (key, descending), keep);
                self.networks.insert(memo, lines.clone());
                lines
            }
        };
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
        let vals = self.regs_as(arg, key);
        let pos = self.axis_positions(la, axis);
        let net = Network {
            la,
            axis,
            bits: la.shape[axis].trailing_zeros(),
            descending,
            wide: self.dtype(arg) != DType::BF16,
        };
        let mut keys: Vec<String> = vals
            .iter()
            .zip(&pos)
            .map(|(v, p)| self.sort_key(&net, key, v, p))
            .collect();
        let (bits, kept) = (net.bits, keep.trailing_zeros());
        let mut live: Vec<usize> = (0..keys.len()).collect();
        for s in 1..=kept {
            self.merge(&net, &mut keys, &live, (s, s));
        }
        for b in kept..bits {
            // The better of positions `p` and `p ^ 2^b`, at both.
            if let Some(i) = net.reg_bit(b) {
                for &lo in live.iter().filter(|&&q| q >> i & 1 == 0) {
                    let hi = lo | 1 << i;
                    let c = self.before(&net, &keys[lo], &keys[hi]);
                    keys[lo] = self.select_key(&net, &c, &keys[lo].clone(), &keys[hi].clone());
                }
                live.retain(|&q| q >> i & 1 == 0);
            } else if let Some(bit) = net.thread_bit(b) {
                let others = self.partners(&net, &keys, &live, bit);
                for (&q, other) in live.iter().zip(&others) {
                    let c = self.before(&net, &keys[q], other);
                    keys[q] = self.select_key(&net, &c, &keys[q].clone(), other);
                }
            }
            self.merge(&net, &mut keys, &live, (kept, b + 1));
        }
        let (vals, pos) = keys.iter().map(|k| self.unsort_key(&net, key, k)).unzip();
        SortLines { vals, pos }
    }

    /// One merge of a bitonic network: compare-exchanges across the axis's
    /// bits `span - 1` down to 0, in the `live` registers, each block of
    /// `2^span` positions sorted in the network's direction, or the other
    /// way where the position's bit `dir` is set (below the axis's bits).
    fn merge(&mut self, net: &Network, keys: &mut [String], live: &[usize], (span, dir_bit): (u32, u32)) {
        let dir_lane = (dir_bit < net.bits)
            .then(|| net.thread_bit(dir_bit))
            .flatten()
            .map(|(i, _)| self.thread_bit(i));
        let dir_reg = (dir_bit < net.bits).then(|| net.reg_bit(dir_bit)).flatten();
        let dir = |q: usize| match (&dir_lane, dir_reg) {
            (Some(p), _) => Direction::Lane(p.clone()),
            (None, Some(i)) => Direction::Const(q >> i & 1 == 1),
            (None, None) => Direction::Const(false),
        };
        for t in (0..span).rev() {
            if let Some(i) = net.reg_bit(t) {
                for &lo in live.iter().filter(|&&q| q >> i & 1 == 0) {
                    let hi = lo | 1 << i;
                    let c = self.before(net, &keys[lo], &keys[hi]);
                    let keep = self.xor_bit(&c, &dir(lo));
                    let (kl, kh) = (keys[lo].clone(), keys[hi].clone());
                    keys[lo] = self.select_key(net, &keep, &kl, &kh);
                    keys[hi] = self.select_key(net, &keep, &kh, &kl);
                }
            } else if let Some(bit) = net.thread_bit(t) {
                let upper = self.thread_bit(bit.0);
                let others = self.partners(net, keys, live, bit);
                for (&q, other) in live.iter().zip(&others) {
                    // Keep this thread's element where it belongs before
                    // the partner's and this thread is the lower one (the
                    // block's direction and the thread's side flip that).
                    let c = self.before(net, &keys[q], other);
                    let c = self.xor_bit(&c, &Direction::Lane(upper.clone()));
                    let keep = self.xor_bit(&c, &dir(q));
                    keys[q] = self.select_key(net, &keep, &keys[q].clone(), other);
                }
            }
        }
    }

    /// The `live` keys of the thread across thread-index bit `(i, lane)`:
    /// shuffled within the warp, or through shared memory across warps.
    fn partners(&mut self, net: &Network, keys: &[String], live: &[usize], (i, lane): (usize, bool)) -> Vec<String> {
        let mine: Vec<String> = live.iter().map(|&q| keys[q].clone()).collect();
        if !lane {
            return self.across_warps(&mine, net.class(), i);
        }
        mine.iter()
            .map(|k| {
                if !net.wide {
                    let o = self.reg(RegClass::B32);
                    self.emit(format!("shfl.sync.bfly.b32 {o}, {k}, {}, 31, -1;", 1 << i));
                    return o;
                }
                let (lo, hi) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
                self.emit(format!("mov.b64 {{{lo}, {hi}}}, {k};"));
                for h in [&lo, &hi] {
                    self.emit(format!("shfl.sync.bfly.b32 {h}, {h}, {}, 31, -1;", 1 << i));
                }
                let o = self.reg(RegClass::B64);
                self.emit(format!("mov.b64 {o}, {{{lo}, {hi}}};"));
                o
            })
            .collect()
    }

    /// Whether key `a` comes before key `b`.
    fn before(&mut self, net: &Network, a: &str, b: &str) -> String {
        let p = self.reg(RegClass::Pred);
        let cmp = if net.descending { "gt" } else { "lt" };
        let bits = if net.wide { 64 } else { 32 };
        self.emit(format!("setp.{cmp}.u{bits} {p}, {a}, {b};"));
        p
    }

    fn select_key(&mut self, net: &Network, c: &str, a: &str, b: &str) -> String {
        let d = self.reg(net.class());
        let bits = if net.wide { 64 } else { 32 };
        self.emit(format!("selp.b{bits} {d}, {a}, {b}, {c};"));
        d
    }

    /// An element's key: the value's bits made to order as an unsigned
    /// integer (floats: negative ones flipped, the rest with the sign bit
    /// set; `-0.0` as `0.0` and every NaN as one above infinity), above the
    /// position (inverted when `descending`, so that equal values put the
    /// lower position first either way); 32 bits of each, or for bf16
    /// (seen as f32) the top 16 of each.
    fn sort_key(&mut self, net: &Network, key: DType, v: &str, p: &str) -> String {
        let hi = self.reg(RegClass::B32);
        match key {
            DType::F32 => {
                let (z, nan, m) = (
                    self.reg(RegClass::F32),
                    self.reg(RegClass::Pred),
                    self.reg(RegClass::B32),
                );
                self.emit(format!("add.f32 {z}, {v}, 0f00000000;"));
                self.emit(format!("setp.nan.f32 {nan}, {v}, {v};"));
                self.emit(format!("mov.b32 {hi}, {z};"));
                self.emit(format!("selp.b32 {hi}, 0x7fc00000, {hi}, {nan};"));
                self.emit(format!("shr.s32 {m}, {hi}, 31;"));
                self.emit(format!("or.b32 {m}, {m}, 0x80000000;"));
                self.emit(format!("xor.b32 {hi}, {hi}, {m};"));
            }
            DType::I32 => self.emit(format!("xor.b32 {hi}, {v}, 0x80000000;")),
            _ => self.emit(format!("mov.b32 {hi}, {v};")),
        }
        let lo = if net.descending {
            let n = self.reg(RegClass::B32);
            self.emit(format!("not.b32 {n}, {p};"));
            n
        } else {
            p.to_string()
        };
        let k = self.reg(net.class());
        if net.wide {
            self.emit(format!("mov.b64 {k}, {{{lo}, {hi}}};"));
        } else {
            self.emit(format!("prmt.b32 {k}, {lo}, {hi}, 0x7610;"));
        }
        k
    }

    /// A key's value (in the key type) and position.
    fn unsort_key(&mut self, net: &Network, key: DType, k: &str) -> (String, String) {
        let (lo, hi) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
        if net.wide {
            self.emit(format!("mov.b64 {{{lo}, {hi}}}, {k};"));
        } else {
            self.emit(format!("and.b32 {lo}, {k}, 0xffff;"));
            self.emit(format!("and.b32 {hi}, {k}, 0xffff0000;"));
        }
        if net.descending {
            self.emit(format!("not.b32 {lo}, {lo};"));
            if !net.wide {
                self.emit(format!("and.b32 {lo}, {lo}, 0xffff;"));
            }
        }
        let v = self.reg(RegClass::of(key));
        match key {
            DType::F32 => {
                let (pos, flip, b) = (
                    self.reg(RegClass::Pred),
                    self.reg(RegClass::B32),
                    self.reg(RegClass::B32),
                );
                self.emit(format!("setp.lt.s32 {pos}, {hi}, 0;"));
                self.emit(format!("not.b32 {flip}, {hi};"));
                self.emit(format!("xor.b32 {b}, {hi}, 0x80000000;"));
                self.emit(format!("selp.b32 {b}, {b}, {flip}, {pos};"));
                if !net.wide {
                    self.emit(format!("and.b32 {b}, {b}, 0xffff0000;"));
                }
                self.emit(format!("mov.b32 {v}, {b};"));
            }
            DType::I32 => self.emit(format!("xor.b32 {v}, {hi}, 0x80000000;")),
            _ => self.emit(format!("mov.b32 {v}, {hi};")),
        }
        (v, lo)
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
}
