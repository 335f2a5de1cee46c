//! Inclusive scans along an axis (`cumsum`, `cumprod`, `cummax`,
//! `cummin`): a butterfly over the axis's coordinate bits, lowest first.
//! After bit `k`, each element holds the scan of its aligned block of
//! `2^(k+1)` positions and the block's total; its partner across bit `k`
//! is another register of the thread, or another lane (`shfl.sync.bfly`).
//! The layout pass keeps a scanned axis within warps (`Layout::within_warps`).

use super::emit::*;
use crate::dtype::DType;
use crate::ir::*;
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
            } else if let Some(i) = la.lane.iter().position(|&x| x == Some(bit)) {
                // Whether this lane is the upper partner.
                let upper = self.lane_pred(i);
                for q in 0..prefix.len() {
                    let other = self.reg(RegClass::of(acc));
                    self.emit(format!("shfl.sync.bfly.b32 {other}, {}, {}, 31, -1;", total[q], 1 << i));
                    prefix[q] = if reverse {
                        let with = self.binary(bop, acc, &prefix[q], &other);
                        self.select(acc, &upper, &prefix[q], &with)
                    } else {
                        let with = self.binary(bop, acc, &other, &prefix[q]);
                        self.select(acc, &upper, &with, &prefix[q])
                    };
                    total[q] = self.binary(bop, acc, &total[q], &other);
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
