//! Reductions along an axis: in-thread, across lanes with `shfl.sync.bfly`,
//! then across warps through shared memory.

use super::emit::*;
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::LANE_BITS;
use crate::ptx::RegClass;

impl Lower<'_> {
    // ---- reductions ------------------------------------------------------------

    pub(super) fn combine(&mut self, op: ReduceOp, dtype: DType, a: &str, b: &str) -> String {
        let bop = match op {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Max => BinaryOp::Max,
            _ => BinaryOp::Min,
        };
        self.binary(bop, dtype, a, b)
    }

    /// Picks `(bv, bi)` over `(av, ai)` when it is larger (smaller for argmin),
    /// or equal with a smaller index.
    pub(super) fn combine_arg(&mut self, op: ReduceOp, a: (&str, &str), b: (&str, &str)) -> (String, String) {
        let cmp = if op == ReduceOp::ArgMax { "gt" } else { "lt" };
        let (p, q, s) = (
            self.reg(RegClass::Pred),
            self.reg(RegClass::Pred),
            self.reg(RegClass::Pred),
        );
        self.emit(format!("setp.{cmp}.f32 {p}, {}, {};", b.0, a.0));
        self.emit(format!("setp.eq.f32 {q}, {}, {};", b.0, a.0));
        self.emit(format!("setp.lt.s32 {s}, {}, {};", b.1, a.1));
        self.emit(format!("and.pred {q}, {q}, {s};"));
        self.emit(format!("or.pred {p}, {p}, {q};"));
        let (v, i) = (self.reg(RegClass::F32), self.reg(RegClass::B32));
        self.emit(format!("selp.f32 {v}, {}, {}, {p};", b.0, a.0));
        self.emit(format!("selp.b32 {i}, {}, {}, {p};", b.1, a.1));
        (v, i)
    }

    pub(super) fn reduce(&mut self, op: ReduceOp, arg: ValueId, axis: usize, result: ValueId) -> Vec<String> {
        let (la, lr) = (self.layout(arg), self.layout(result));
        let in_dtype = self.dtype(arg);
        let is_arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
        // Floats reduce in f32; arg-reductions compare as f32 too.
        let acc_dtype = if in_dtype.is_float() || is_arg {
            DType::F32
        } else {
            in_dtype
        };
        let src = self.regs_as(arg, acc_dtype);
        let idx: Vec<String> = if is_arg {
            self.axis_positions(la, axis)
        } else {
            Vec::new()
        };

        // 1. Inside each thread.
        let keep: Vec<usize> = (0..la.reg.len()).filter(|&i| la.reg[i].0 != axis).collect();
        let fold: Vec<usize> = (0..la.reg.len()).filter(|&i| la.reg[i].0 == axis).collect();
        let mut vals = Vec::new();
        let mut idxs = Vec::new();
        for q in 0..lr.num_regs() {
            let base: usize = keep.iter().enumerate().map(|(j, &i)| (q >> j & 1) << i).sum();
            let mut members: Vec<(String, String)> = (0..1usize << fold.len())
                .map(|m| {
                    let r = base | fold.iter().enumerate().map(|(j, &i)| (m >> j & 1) << i).sum::<usize>();
                    (src[r].clone(), idx.get(r).cloned().unwrap_or_default())
                })
                .collect();
            // Pairwise tree: shorter dependency chains and better rounding for sums.
            while members.len() > 1 {
                let mut next = Vec::new();
                for pair in members.chunks(2) {
                    next.push(if is_arg {
                        self.combine_arg(op, (&pair[0].0, &pair[0].1), (&pair[1].0, &pair[1].1))
                    } else {
                        (self.combine(op, acc_dtype, &pair[0].0, &pair[1].0), String::new())
                    });
                }
                members = next;
            }
            let (v, i) = members.pop().expect("one member");
            vals.push(v);
            idxs.push(i);
        }

        // 2. Across the lanes of a warp.
        for (bit, b) in la.lane.iter().enumerate() {
            if !matches!(b, Some((d, _)) if *d == axis) {
                continue;
            }
            for q in 0..vals.len() {
                let ov = self.reg(RegClass::of(acc_dtype));
                self.emit(format!("shfl.sync.bfly.b32 {ov}, {}, {}, 31, -1;", vals[q], 1 << bit));
                if is_arg {
                    let oi = self.reg(RegClass::B32);
                    self.emit(format!("shfl.sync.bfly.b32 {oi}, {}, {}, 31, -1;", idxs[q], 1 << bit));
                    let (v, i) = self.combine_arg(op, (&vals[q], &idxs[q]), (&ov, &oi));
                    vals[q] = v;
                    idxs[q] = i;
                } else {
                    vals[q] = self.combine(op, acc_dtype, &vals[q], &ov);
                }
            }
        }

        // 3. Across warps, through shared memory.
        let wbits: Vec<usize> = (0..la.warp.len())
            .filter(|&i| matches!(la.warp[i], Some((d, _)) if d == axis))
            .collect();
        if !wbits.is_empty() {
            let n: usize = lr.shape.iter().product();
            let k = 1usize << wbits.len();
            let region = k * n * 4;
            // The warp's position along the axis, compacted: which partial it holds.
            let j = self.reg(RegClass::B32);
            self.emit(format!("mov.b32 {j}, 0;"));
            for (pos, &w) in wbits.iter().enumerate() {
                let t = self.reg(RegClass::B32);
                self.emit(format!("bfe.u32 {t}, {}, {}, 1;", self.tid, LANE_BITS + w));
                self.emit(format!("shl.b32 {t}, {t}, {pos};"));
                self.emit(format!("or.b32 {j}, {j}, {t};"));
            }
            let rbase = self.smem_base(lr, 4);
            let wbase = self.reg(RegClass::B32);
            self.emit(format!("mad.lo.s32 {wbase}, {j}, {}, {rbase};", n * 4));
            let wmask = lr.replicated_mask() & !wbits.iter().map(|w| 1u32 << (LANE_BITS + w)).sum::<u32>();
            let owner = self.owner_pred(wmask);
            let guard = owner.map(|p| format!("@{p} ")).unwrap_or_default();
            let vty = if acc_dtype == DType::F32 { "f32" } else { "b32" };
            self.barrier();
            for q in 0..vals.len() {
                let imm = flat(&lr.reg_coord(q), &lr.shape) * 4;
                self.emit(format!("{guard}st.shared.{vty} {}, {};", addr(&wbase, imm), vals[q]));
                if is_arg {
                    self.emit(format!(
                        "{guard}st.shared.b32 {}, {};",
                        addr(&wbase, imm + region),
                        idxs[q]
                    ));
                }
            }
            self.barrier();
            for q in 0..vals.len() {
                let at = flat(&lr.reg_coord(q), &lr.shape) * 4;
                let mut acc: Option<(String, String)> = None;
                for part in 0..k {
                    let imm = at + part * n * 4;
                    let v = self.reg(RegClass::of(acc_dtype));
                    self.emit(format!("ld.shared.{vty} {v}, {};", addr(&rbase, imm)));
                    let i = if is_arg {
                        let i = self.reg(RegClass::B32);
                        self.emit(format!("ld.shared.b32 {i}, {};", addr(&rbase, imm + region)));
                        i
                    } else {
                        String::new()
                    };
                    acc = Some(match acc {
                        None => (v, i),
                        Some((av, ai)) if is_arg => self.combine_arg(op, (&av, &ai), (&v, &i)),
                        Some((av, _)) => (self.combine(op, acc_dtype, &av, &v), String::new()),
                    });
                }
                let (v, i) = acc.expect("at least one partial");
                vals[q] = v;
                idxs[q] = i;
            }
        }
        if is_arg {
            return idxs;
        }
        if acc_dtype == in_dtype {
            vals
        } else {
            vals.iter().map(|v| self.cast(acc_dtype, in_dtype, v)).collect()
        }
    }
}
