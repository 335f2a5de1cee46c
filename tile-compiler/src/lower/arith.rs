//! Element-wise arithmetic: unary math, binary operators, select and casts.

use super::emit::*;
use crate::dtype::DType;
use crate::ir::{BinaryOp, UnaryOp};
use crate::ptx::{RegClass, arith_type, f32_imm};

/// `2^x` on the GPU: the hardware approximation, results below 2^-126
/// flushed to zero (`.ftz`; a subnormal `x` gives 1 either way). Without
/// `.ftz`, ptxas wraps each `MUFU.EX2` in a range check and two multiplies
/// to produce subnormal results: 3 of the ~15 instructions attention's loop
/// spends per score (SASS, sm_90a).
pub(super) const EX2: &str = "ex2.approx.ftz.f32";

impl Lower<'_> {
    pub(super) fn unary(&mut self, op: UnaryOp, dtype: DType, a: &str) -> String {
        if dtype.is_half() {
            let x = self.widen(a, dtype);
            let y = self.unary(op, DType::F32, &x);
            return self.narrow(&y, dtype);
        }
        let class = RegClass::of(dtype);
        let d = self.reg(class);
        let t = arith_type(dtype);
        match (op, dtype) {
            (UnaryOp::Not, DType::Bool) => self.emit(format!("not.pred {d}, {a};")),
            (UnaryOp::Not, _) => self.emit(format!("not.b32 {d}, {a};")),
            (UnaryOp::Neg, _) => self.emit(format!("neg.{t} {d}, {a};")),
            (UnaryOp::Abs, _) => self.emit(format!("abs.{t} {d}, {a};")),
            (UnaryOp::Exp, _) => {
                let s = self.reg(RegClass::F32);
                self.emit(format!("mul.f32 {s}, {a}, {};", f32_imm(std::f64::consts::LOG2_E)));
                self.emit(format!("{EX2} {d}, {s};"));
            }
            (UnaryOp::Exp2, _) => self.emit(format!("{EX2} {d}, {a};")),
            (UnaryOp::Log, _) => {
                let s = self.reg(RegClass::F32);
                self.emit(format!("lg2.approx.f32 {s}, {a};"));
                self.emit(format!("mul.f32 {d}, {s}, {};", f32_imm(std::f64::consts::LN_2)));
            }
            (UnaryOp::Log2, _) => self.emit(format!("lg2.approx.f32 {d}, {a};")),
            (UnaryOp::Sqrt, _) => self.emit(format!("sqrt.rn.f32 {d}, {a};")),
            (UnaryOp::Rsqrt, _) => self.emit(format!("rsqrt.approx.f32 {d}, {a};")),
            (UnaryOp::Tanh, _) => self.emit(format!("tanh.approx.f32 {d}, {a};")),
            (UnaryOp::Erf, _) => return self.erf(a),
            (UnaryOp::Gelu, _) => return self.gelu(a),
            (UnaryOp::Bitcast, _) => unreachable!("lowered by `bitcast`, which knows the result's type"),
        }
        d
    }

    /// `a`'s 32 bits in a register of `to`'s class.
    pub(super) fn bitcast(&mut self, to: DType, a: &str) -> String {
        let d = self.reg(RegClass::of(to));
        self.emit(format!("mov.b32 {d}, {a};"));
        d
    }

    /// GELU in the tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`,
    /// the cubic term in one `fma`.
    fn gelu(&mut self, x: &str) -> String {
        let cube = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {cube}, {x}, {x};"));
        self.emit(format!("mul.f32 {cube}, {cube}, {x};"));
        let inner = self.reg(RegClass::F32);
        self.emit(format!("fma.rn.f32 {inner}, {cube}, {}, {x};", f32_imm(0.044715)));
        self.emit(format!(
            "mul.f32 {inner}, {inner}, {};",
            f32_imm((2.0 / std::f64::consts::PI).sqrt())
        ));
        let t = self.reg(RegClass::F32);
        self.emit(format!("tanh.approx.f32 {t}, {inner};"));
        self.emit(format!("add.f32 {t}, {t}, 0f3F800000;"));
        let half = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {half}, {x}, 0f3F000000;"));
        let d = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {d}, {half}, {t};"));
        d
    }

    /// erf(x) = sign(x) (1 - p(t) e^{-x^2}), t = 1 / (1 + 0.3275911 |x|)
    /// (Abramowitz & Stegun 7.1.26, absolute error under 1.5e-7).
    pub(super) fn erf(&mut self, x: &str) -> String {
        let ax = self.reg(RegClass::F32);
        self.emit(format!("abs.f32 {ax}, {x};"));
        let den = self.reg(RegClass::F32);
        self.emit(format!("fma.rn.f32 {den}, {ax}, {}, 0f3F800000;", f32_imm(0.3275911)));
        let t = self.reg(RegClass::F32);
        self.emit(format!("rcp.rn.f32 {t}, {den};"));
        let coeffs = [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592];
        let mut p = self.f32_const(coeffs[0]);
        for c in &coeffs[1..] {
            let n = self.reg(RegClass::F32);
            self.emit(format!("fma.rn.f32 {n}, {p}, {t}, {};", f32_imm(*c)));
            p = n;
        }
        let pt = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {pt}, {p}, {t};"));
        let sq = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {sq}, {ax}, {ax};"));
        let arg = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {arg}, {sq}, {};", f32_imm(-std::f64::consts::LOG2_E)));
        let e = self.reg(RegClass::F32);
        self.emit(format!("{EX2} {e}, {arg};"));
        let r = self.reg(RegClass::F32);
        self.emit(format!("neg.f32 {pt}, {pt};"));
        self.emit(format!("fma.rn.f32 {r}, {pt}, {e}, 0f3F800000;"));
        let d = self.reg(RegClass::F32);
        self.emit(format!("copysign.f32 {d}, {x}, {r};"));
        d
    }

    pub(super) fn binary(&mut self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> String {
        if dtype.is_half() {
            let x = self.widen(a, dtype);
            let y = self.widen(b, dtype);
            let r = self.binary(op, DType::F32, &x, &y);
            return if op.is_comparison() { r } else { self.narrow(&r, dtype) };
        }
        let t = arith_type(dtype);
        if op.is_comparison() {
            let d = self.reg(RegClass::Pred);
            if dtype == DType::Bool {
                match op {
                    BinaryOp::Ne => self.emit(format!("xor.pred {d}, {a}, {b};")),
                    BinaryOp::Eq => {
                        self.emit(format!("xor.pred {d}, {a}, {b};"));
                        self.emit(format!("not.pred {d}, {d};"));
                    }
                    _ => unreachable!("checked: bools compare only for equality"),
                }
                return d;
            }
            let cmp = match (op, dtype.is_float()) {
                (BinaryOp::Eq, _) => "eq",
                (BinaryOp::Ne, true) => "neu",
                (BinaryOp::Ne, false) => "ne",
                (BinaryOp::Lt, _) => "lt",
                (BinaryOp::Le, _) => "le",
                (BinaryOp::Gt, _) => "gt",
                _ => "ge",
            };
            self.emit(format!("setp.{cmp}.{t} {d}, {a}, {b};"));
            return d;
        }
        let d = self.reg(RegClass::of(dtype));
        let bits = if dtype == DType::Bool { "pred" } else { "b32" };
        let ins = match op {
            BinaryOp::Add => format!("add.{t}"),
            BinaryOp::Sub => format!("sub.{t}"),
            BinaryOp::Mul if dtype.is_float() => format!("mul.{t}"),
            BinaryOp::Mul => format!("mul.lo.{t}"),
            BinaryOp::Div if dtype.is_float() => format!("div.rn.{t}"),
            BinaryOp::Div => format!("div.{t}"),
            BinaryOp::Rem => format!("rem.{t}"),
            BinaryOp::Max => format!("max.{t}"),
            BinaryOp::Min => format!("min.{t}"),
            BinaryOp::And => format!("and.{bits}"),
            BinaryOp::Or => format!("or.{bits}"),
            BinaryOp::Xor => format!("xor.{bits}"),
            BinaryOp::Shl => "shl.b32".to_string(),
            BinaryOp::Shr => format!("shr.{t}"),
            _ => unreachable!("comparisons handled above"),
        };
        self.emit(format!("{ins} {d}, {a}, {b};"));
        if matches!(op, BinaryOp::Div | BinaryOp::Rem) && !dtype.is_float() {
            return self.by_zero_defined(op, d, a, b);
        }
        d
    }

    /// Integer quotient or remainder `d` of `a` by `b`, with a zero divisor
    /// giving what the CPU version gives (all ones, and `a`): PTX leaves
    /// that result unspecified, and the two versions must agree on every
    /// input. A constant divisor costs nothing, ptxas folds the check.
    fn by_zero_defined(&mut self, op: BinaryOp, d: String, a: &str, b: &str) -> String {
        let zero = self.reg(RegClass::Pred);
        self.emit(format!("setp.eq.u32 {zero}, {b}, 0;"));
        let all_ones = u32::MAX.to_string();
        let by_zero = if op == BinaryOp::Div { &all_ones } else { a };
        let r = self.reg(RegClass::B32);
        self.emit(format!("selp.b32 {r}, {by_zero}, {d}, {zero};"));
        r
    }

    pub(super) fn select(&mut self, dtype: DType, c: &str, a: &str, b: &str) -> String {
        if dtype == DType::Bool {
            let (x, y, d) = (
                self.reg(RegClass::Pred),
                self.reg(RegClass::Pred),
                self.reg(RegClass::Pred),
            );
            self.emit(format!("and.pred {x}, {c}, {a};"));
            self.emit(format!("not.pred {y}, {c};"));
            self.emit(format!("and.pred {y}, {y}, {b};"));
            self.emit(format!("or.pred {d}, {x}, {y};"));
            return d;
        }
        let class = RegClass::of(dtype);
        let d = self.reg(class);
        let t = if dtype.is_half() { "b16" } else { arith_type(dtype) };
        self.emit(format!("selp.{t} {d}, {a}, {b}, {c};"));
        d
    }

    pub(super) fn cast(&mut self, from: DType, to: DType, a: &str) -> String {
        use DType::*;
        if from == to {
            return a.to_string();
        }
        match (from, to) {
            (Bool, _) => {
                let d = self.reg(RegClass::B32);
                self.emit(format!("selp.u32 {d}, 1, 0, {a};"));
                self.cast(U32, to, &d)
            }
            (_, Bool) => {
                let p = self.reg(RegClass::Pred);
                let cmp = if from.is_float() { "neu" } else { "ne" };
                let x = self.widen(a, from);
                let t = if from.is_float() { "f32" } else { arith_type(from) };
                let zero = if from.is_float() { "0f00000000" } else { "0" };
                self.emit(format!("setp.{cmp}.{t} {p}, {x}, {zero};"));
                p
            }
            (I32, U32) | (U32, I32) => a.to_string(),
            (F16 | BF16, _) => {
                let f = self.widen(a, from);
                self.cast(F32, to, &f)
            }
            (_, F16 | BF16) => {
                let f = self.cast(from, F32, a);
                self.narrow(&f, to)
            }
            (F32, I32 | U32) => {
                let d = self.reg(RegClass::B32);
                self.emit(format!("cvt.rzi.{}.f32 {d}, {a};", arith_type(to)));
                d
            }
            (I32 | U32, F32) => {
                let d = self.reg(RegClass::F32);
                self.emit(format!("cvt.rn.f32.{} {d}, {a};", arith_type(from)));
                d
            }
            _ => unreachable!("all dtype pairs covered"),
        }
    }
}
