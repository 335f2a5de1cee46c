//! Inclusive scans along an axis (`cumsum`, `cumprod`, `cummax`,
//! `cummin`): a butterfly over the axis's coordinate bits, lowest first.
//! After bit `k`, each element holds the scan of its aligned block of
//! `2^(k+1)` positions and the block's total; its partner across bit `k`
//! is another register of the thread, another lane (`shfl.sync.bfly`), or
//! another warp (through shared memory, [`Lower::across_warps`]).

use super::emit::*;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::LANE_BITS;
use crate::ptx::RegClass;

impl Lower<'_> {
    pub(super) fn scan(&mut self, op: ScanOp, arg: ValueId, axis: usize, reverse: bool) -> Vec<String> {
        let la = self.layout(arg);
        let dtype = self.dtype(arg);
        // Floats scan in f32, as reductions do.
        let acc = if dtype.is_float() { DType::F32 } else { dtype };
        let bop = match op {
            ScanOp::Sum => BinaryOp::Add,
            ScanOp::Prod => BinaryOp::Mul,
            ScanOp::Max => BinaryOp::Max,
            ScanOp::Min => BinaryOp::Min,
        };
        let mut prefix = self.regs_as(arg, acc);
        let mut total = prefix.clone();
        for b in 0..la.shape[axis].trailing_zeros() {
            let bit = (axis, b);
            if let Some(i) = la.reg.iter().position(|&x| x == bit) {
                for lower in (0..prefix.len()).filter(|q| q >> i & 1 == 0) {
                    let upper = lower | 1 << i;
                    if reverse {
                        prefix[lower] = self.binary(bop, acc, &prefix[lower], &total[upper]);
                    } else {
                        prefix[upper] = self.binary(bop, acc, &total[lower], &prefix[upper]);
                    }
                    let both = self.binary(bop, acc, &total[lower], &total[upper]);
                    total[lower] = both.clone();
                    total[upper] = both;
                }
            } else {
                let lane = la.lane.iter().position(|&x| x == Some(bit));
                let warp = la.warp.iter().position(|&x| x == Some(bit)).map(|w| LANE_BITS + w);
                let Some(i) = lane.or(warp) else { continue };
                // Whether this thread is the upper partner.
                let upper = self.thread_bit(i);
                let others = match lane {
                    Some(_) => total
                        .iter()
                        .map(|t| {
                            let other = self.reg(RegClass::of(acc));
                            self.emit(format!("shfl.sync.bfly.b32 {other}, {t}, {}, 31, -1;", 1 << i));
                            other
                        })
                        .collect(),
                    None => self.across_warps(&total, RegClass::of(acc), i),
                };
                for (q, other) in others.iter().enumerate() {
                    prefix[q] = if reverse {
                        let with = self.binary(bop, acc, &prefix[q], other);
                        self.select(acc, &upper, &prefix[q], &with)
                    } else {
                        let with = self.binary(bop, acc, other, &prefix[q]);
                        self.select(acc, &upper, &with, &prefix[q])
                    };
                    total[q] = self.binary(bop, acc, &total[q], other);
                }
            }
        }
        if dtype == acc {
            prefix
        } else {
            prefix.iter().map(|r| self.cast(acc, dtype, r)).collect()
        }
    }
}
