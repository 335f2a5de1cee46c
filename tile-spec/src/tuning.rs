//! The tuning a kernel declares (`grid = ..`, `key = [..]` in
//! `#[tile::kernel]`): sizes the host computes at launch from the
//! arguments and a configuration's const values, as postfix programs.

use std::borrow::Cow;
use std::fmt;

/// One step of a [`Size`] program: a value pushed, or an operation on the
/// two values on top of the stack (the first pushed is the left operand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeOp {
    /// An integer.
    Int(u64),
    /// The value of const parameter `i`.
    Const(usize),
    /// The value of integer scalar parameter `i` (among all parameters).
    Scalar(usize),
    /// `t.shape(axis)` of tensor parameter `param`.
    Dim {
        param: usize,
        axis: usize,
    },
    Add,
    Sub,
    Mul,
    /// Division rounded down.
    Div,
    /// Division rounded up: `cdiv(a, b)`.
    Cdiv,
    Max,
    Min,
}

/// A size as a postfix program over [`SizeOp`]s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Size(pub Cow<'static, [SizeOp]>);

/// What a [`Size`] reads: a const parameter's value, an integer scalar
/// argument, or a dimension of a tensor argument.
pub trait SizeArgs {
    fn constant(&self, i: usize) -> Option<u64>;
    fn scalar(&self, param: usize) -> Option<u64>;
    fn dim(&self, param: usize, axis: usize) -> Option<u64>;
}

/// Why a [`Size`] has no value for some arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// An argument it reads is missing or negative (a scalar), named by its
    /// step.
    Argument(SizeOp),
    /// A subtraction below zero, a division by zero or an overflow.
    Arithmetic(SizeOp),
    /// A program whose stack would pass [`Size::MAX_DEPTH`] values.
    TooDeep,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Argument(op) => write!(f, "no non-negative value for {op:?}"),
            SizeError::Arithmetic(op) => write!(f, "{op:?} has no value (below zero, division by zero or overflow)"),
            SizeError::TooDeep => write!(f, "more than {} values on the stack", Size::MAX_DEPTH),
        }
    }
}

impl Size {
    /// The most values a program's stack holds while it runs (evaluation
    /// allocates nothing: it runs before every tuned launch).
    pub const MAX_DEPTH: usize = 16;

    /// The size for `args`.
    pub fn eval(&self, args: &dyn SizeArgs) -> Result<u64, SizeError> {
        let mut stack = Stack::default();
        for &op in self.0.iter() {
            let value = match op {
                SizeOp::Int(n) => Some(n),
                SizeOp::Const(i) => args.constant(i),
                SizeOp::Scalar(p) => args.scalar(p),
                SizeOp::Dim { param, axis } => args.dim(param, axis),
                _ => {
                    let b = stack.pop().expect("a well-formed program");
                    let a = stack.pop().expect("a well-formed program");
                    let v = match op {
                        SizeOp::Add => a.checked_add(b),
                        SizeOp::Sub => a.checked_sub(b),
                        SizeOp::Mul => a.checked_mul(b),
                        SizeOp::Div => a.checked_div(b),
                        SizeOp::Cdiv => (b != 0).then(|| a.div_ceil(b)),
                        SizeOp::Max => Some(a.max(b)),
                        _ => Some(a.min(b)),
                    };
                    stack.push(v.ok_or(SizeError::Arithmetic(op))?)?;
                    continue;
                }
            };
            stack.push(value.ok_or(SizeError::Argument(op))?)?;
        }
        Ok(stack.pop().expect("a well-formed program"))
    }
}

/// A fixed-size stack of values.
#[derive(Default)]
struct Stack {
    values: [u64; Size::MAX_DEPTH],
    len: usize,
}

impl Stack {
    fn push(&mut self, v: u64) -> Result<(), SizeError> {
        *self.values.get_mut(self.len).ok_or(SizeError::TooDeep)? = v;
        self.len += 1;
        Ok(())
    }

    fn pop(&mut self) -> Option<u64> {
        self.len = self.len.checked_sub(1)?;
        Some(self.values[self.len])
    }
}

/// A kernel's tuning: the problem sizes whose size classes share a choice,
/// and the grid (one to three axes, x first) each configuration launches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub key: Cow<'static, [Size]>,
    pub grid: Cow<'static, [Size]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Args;
    impl SizeArgs for Args {
        fn constant(&self, i: usize) -> Option<u64> {
            [64, 128].get(i).copied()
        }
        fn scalar(&self, _: usize) -> Option<u64> {
            None
        }
        fn dim(&self, param: usize, axis: usize) -> Option<u64> {
            Some([[1000, 768], [768, 3000]][param][axis])
        }
    }

    /// `cdiv(a.shape(0), BM) * cdiv(b.shape(1), BN)`, as a `static` holds it.
    static GRID: Size = Size(Cow::Borrowed(&[
        SizeOp::Dim { param: 0, axis: 0 },
        SizeOp::Const(0),
        SizeOp::Cdiv,
        SizeOp::Dim { param: 1, axis: 1 },
        SizeOp::Const(1),
        SizeOp::Cdiv,
        SizeOp::Mul,
    ]));

    #[test]
    fn a_grid_is_computed_from_shapes_and_const_values() {
        assert_eq!(GRID.eval(&Args), Ok(16 * 24));
    }

    #[test]
    fn sizes_without_a_value_are_errors_not_wraps_or_panics() {
        let below = Size(vec![SizeOp::Int(1), SizeOp::Int(2), SizeOp::Sub].into());
        assert_eq!(below.eval(&Args), Err(SizeError::Arithmetic(SizeOp::Sub)));
        let by_zero = Size(vec![SizeOp::Int(1), SizeOp::Int(0), SizeOp::Cdiv].into());
        assert_eq!(by_zero.eval(&Args), Err(SizeError::Arithmetic(SizeOp::Cdiv)));
        let huge = Size(vec![SizeOp::Int(u64::MAX), SizeOp::Int(2), SizeOp::Mul].into());
        assert!(huge.eval(&Args).is_err());
        let missing = Size(vec![SizeOp::Scalar(2)].into());
        assert_eq!(missing.eval(&Args), Err(SizeError::Argument(SizeOp::Scalar(2))));
        let deep = Size(vec![SizeOp::Int(1); Size::MAX_DEPTH + 1].into());
        assert_eq!(deep.eval(&Args), Err(SizeError::TooDeep));
    }
}
