//! Expressions: names, literals (weakly typed until used), casts, unary and
//! binary operators with NumPy broadcasting.

use super::*;

impl Checker<'_> {
    pub(super) fn expr(&mut self, e: &Expr) -> Result<Val> {
        match e {
            Expr::Int(i, None, _) => Ok(Val::Weak(Weak::Int(*i))),
            Expr::Int(i, Some(d), span) => Ok(Val::Value(self.constant(Weak::Int(*i), *d, *span)?)),
            Expr::Float(x, None, _) => Ok(Val::Weak(Weak::Float(*x))),
            Expr::Float(x, Some(d), span) => Ok(Val::Value(self.constant(Weak::Float(*x), *d, *span)?)),
            Expr::Bool(b, _) => Ok(Val::Weak(Weak::Bool(*b))),
            Expr::Var(id) => match self.lookup(&id.to_string()) {
                Some(b) => Ok(b.val),
                None => bail!(
                    id.span(),
                    "unknown name `{id}`: declare it with `let`, or make it a kernel parameter (a const parameter needs `const {id}: usize` and a list in the attribute)"
                ),
            },
            Expr::Path(segs, span) => self.path(segs, *span),
            Expr::Binary(op, a, b, span) => {
                let va = self.expr(a)?;
                let vb = self.expr(b)?;
                self.binary(*op, va, vb, *span)
            }
            Expr::Unary(op, a, span) => {
                let v = self.expr(a)?;
                match (op, v) {
                    (UnOp::Neg, Val::Weak(Weak::Int(i))) => match i.checked_neg() {
                        Some(n) => Ok(Val::Weak(Weak::Int(n))),
                        None => bail!(*span, "this constant expression overflows 64-bit integers"),
                    },
                    (UnOp::Neg, Val::Weak(Weak::Float(x))) => Ok(Val::Weak(Weak::Float(-x))),
                    (UnOp::Not, Val::Weak(Weak::Bool(b))) => Ok(Val::Weak(Weak::Bool(!b))),
                    _ => {
                        let id = self.concrete(v, None, *span)?;
                        let ty = self.ty(id).clone();
                        let uop = match op {
                            UnOp::Neg => {
                                if !(ty.dtype.is_float() || ty.dtype == DType::I32) {
                                    bail!(*span, "`-` applies to floats and i32, not {}", ty.dtype);
                                }
                                UnaryOp::Neg
                            }
                            UnOp::Not => {
                                if ty.dtype.is_float() {
                                    bail!(*span, "`!` applies to bool and integers, not {}", ty.dtype);
                                }
                                UnaryOp::Not
                            }
                        };
                        Ok(Val::Value(self.push(OpKind::Unary(uop, id), Some(ty), *span)))
                    }
                }
            }
            Expr::Call {
                func,
                generics,
                args,
                span,
            } => self.call(func, generics, args, *span),
            Expr::Method {
                recv,
                method,
                generics,
                args,
                span,
            } => self.method(recv, method, generics, args, *span),
            Expr::Array(_, span) => bail!(
                *span,
                "lists are written only as indices and shapes of DSL operations (`x.load([i, 0], [1, BLOCK])`)"
            ),
            Expr::Cast(a, ty, span) => {
                let d = self.resolve(ty)?;
                let v = self.expr(a)?;
                self.cast(v, d, *span)
            }
        }
    }

    pub(super) fn path(&mut self, segs: &[proc_macro2::Ident], span: Span) -> Result<Val> {
        let names: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
        let ty = names[names.len() - 2].as_str();
        let ty = if ty == "consts" && names.len() >= 3 {
            names[names.len() - 3].as_str()
        } else {
            ty
        };
        let last = names.last().expect("path").as_str();
        let w = match (ty, last) {
            ("f32", "INFINITY") => Weak::Float(f64::INFINITY),
            ("f32", "NEG_INFINITY") => Weak::Float(f64::NEG_INFINITY),
            ("f32", "MAX") => Weak::Float(f32::MAX as f64),
            ("f32", "MIN") => Weak::Float(f32::MIN as f64),
            ("f32", "MIN_POSITIVE") => Weak::Float(f32::MIN_POSITIVE as f64),
            ("f32", "EPSILON") => Weak::Float(f32::EPSILON as f64),
            ("f32", "PI") => Weak::Float(std::f64::consts::PI),
            ("f32", "E") => Weak::Float(std::f64::consts::E),
            ("f32", "LN_2") => Weak::Float(std::f64::consts::LN_2),
            ("f32", "LOG2_E") => Weak::Float(std::f64::consts::LOG2_E),
            ("f32", "FRAC_2_SQRT_PI") => Weak::Float(std::f64::consts::FRAC_2_SQRT_PI),
            ("f32", "SQRT_2") => Weak::Float(std::f64::consts::SQRT_2),
            ("i32", "MAX") => Weak::Int(i32::MAX as i64),
            ("i32", "MIN") => Weak::Int(i32::MIN as i64),
            ("u32", "MAX") => Weak::Int(u32::MAX as i64),
            _ => bail!(
                span,
                "unknown constant `{}`: the DSL knows f32::INFINITY, NEG_INFINITY, MAX, MIN, EPSILON, the f32 consts (PI, LN_2, LOG2_E, ..) and i32/u32 MAX and MIN",
                names.join("::")
            ),
        };
        Ok(Val::Weak(w))
    }

    pub(super) fn cast(&mut self, v: Val, to: DType, span: Span) -> Result<Val> {
        match v {
            Val::Weak(Weak::Int(i)) if to.is_int() || to.is_float() => {
                Ok(Val::Value(self.constant(Weak::Int(i), to, span)?))
            }
            Val::Weak(Weak::Float(x)) if to.is_float() => Ok(Val::Value(self.constant(Weak::Float(x), to, span)?)),
            Val::Weak(Weak::Float(x)) if to.is_int() => {
                Ok(Val::Value(self.constant(Weak::Int(x.trunc() as i64), to, span)?))
            }
            _ => {
                let id = self.concrete(v, None, span)?;
                let ty = self.ty(id).clone();
                if ty.dtype == to {
                    return Ok(Val::Value(id));
                }
                Ok(Val::Value(self.push(
                    OpKind::Cast(id),
                    Some(Ty {
                        dtype: to,
                        shape: ty.shape,
                    }),
                    span,
                )))
            }
        }
    }

    pub(super) fn fold(op: BinOp, a: Weak, b: Weak, span: Span) -> Result<Weak> {
        use Weak::*;
        Ok(match (a, b) {
            (Int(x), Int(y)) => match op {
                BinOp::Div | BinOp::Rem if y == 0 => bail!(span, "division by zero in a constant expression"),
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                    let r = match op {
                        BinOp::Add => x.checked_add(y),
                        BinOp::Sub => x.checked_sub(y),
                        BinOp::Mul => x.checked_mul(y),
                        BinOp::Div => x.checked_div(y),
                        _ => x.checked_rem(y),
                    };
                    match r {
                        Some(v) => Int(v),
                        None => bail!(span, "this constant expression overflows 64-bit integers"),
                    }
                }
                BinOp::BitAnd => Int(x & y),
                BinOp::BitOr => Int(x | y),
                BinOp::BitXor => Int(x ^ y),
                BinOp::Shl => Int(x << (y & 63)),
                BinOp::Shr => Int(x >> (y & 63)),
                BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => Bool(compare(op, x, y)),
                BinOp::And | BinOp::Or => bail!(span, "`&&` and `||` take bools"),
            },
            (Bool(x), Bool(y)) => match op {
                BinOp::And | BinOp::BitAnd => Bool(x && y),
                BinOp::Or | BinOp::BitOr => Bool(x || y),
                BinOp::BitXor | BinOp::Ne => Bool(x != y),
                BinOp::Eq => Bool(x == y),
                _ => bail!(span, "this operator does not apply to bools"),
            },
            (Bool(_), _) | (_, Bool(_)) => bail!(span, "bools and numbers don't mix"),
            (a, b) => {
                let f = |w: Weak| match w {
                    Int(i) => i as f64,
                    Float(x) => x,
                    Bool(_) => unreachable!(),
                };
                let (x, y) = (f(a), f(b));
                match op {
                    BinOp::Add => Float(x + y),
                    BinOp::Sub => Float(x - y),
                    BinOp::Mul => Float(x * y),
                    BinOp::Div => Float(x / y),
                    BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => Bool(compare(op, x, y)),
                    _ => bail!(span, "this operator does not apply to floats"),
                }
            }
        })
    }

    /// The common element type of two operands; weak literals adopt the other side's.
    pub(super) fn unify(&mut self, a: Val, b: Val, span: Span) -> Result<(ValueId, ValueId)> {
        let (ta, tb) = (self.val_ty(a), self.val_ty(b));
        let (ia, ib) = match (&ta, &tb) {
            (Some(_), None) => {
                let d = ta.as_ref().expect("typed").dtype;
                (self.concrete(a, None, span)?, self.concrete(b, Some(d), span)?)
            }
            (None, Some(_)) => {
                let d = tb.as_ref().expect("typed").dtype;
                (self.concrete(a, Some(d), span)?, self.concrete(b, None, span)?)
            }
            _ => (self.concrete(a, None, span)?, self.concrete(b, None, span)?),
        };
        let (da, db) = (self.ty(ia).dtype, self.ty(ib).dtype);
        if da != db {
            bail!(
                span,
                "mismatched element types {da} and {db}: the DSL never converts implicitly; cast one side, e.g. `x.cast::<{da}>()`"
            );
        }
        Ok((ia, ib))
    }

    /// Broadcasts two values to their common shape (scalars stay scalars when both are).
    pub(super) fn broadcast_pair(&mut self, a: ValueId, b: ValueId, span: Span) -> Result<(ValueId, ValueId)> {
        let (sa, sb) = (self.ty(a).shape.clone(), self.ty(b).shape.clone());
        let shape = match (&sa, &sb) {
            (None, None) => return Ok((a, b)),
            (Some(s), None) | (None, Some(s)) => s.clone(),
            (Some(x), Some(y)) => Self::broadcast_shapes(x, y, span)?,
        };
        Ok((self.broadcast_to(a, &shape, span)?, self.broadcast_to(b, &shape, span)?))
    }

    pub(super) fn binary(&mut self, op: BinOp, a: Val, b: Val, span: Span) -> Result<Val> {
        if let (Val::Weak(x), Val::Weak(y)) = (a, b) {
            return Ok(Val::Weak(Self::fold(op, x, y, span)?));
        }
        let (ia, ib) = self.unify(a, b, span)?;
        let dtype = self.ty(ia).dtype;
        let bop = match op {
            BinOp::Add => BinaryOp::Add,
            BinOp::Sub => BinaryOp::Sub,
            BinOp::Mul => BinaryOp::Mul,
            BinOp::Div => BinaryOp::Div,
            BinOp::Rem => BinaryOp::Rem,
            BinOp::And | BinOp::BitAnd => BinaryOp::And,
            BinOp::Or | BinOp::BitOr => BinaryOp::Or,
            BinOp::BitXor => BinaryOp::Xor,
            BinOp::Shl => BinaryOp::Shl,
            BinOp::Shr => BinaryOp::Shr,
            BinOp::Eq => BinaryOp::Eq,
            BinOp::Ne => BinaryOp::Ne,
            BinOp::Lt => BinaryOp::Lt,
            BinOp::Le => BinaryOp::Le,
            BinOp::Gt => BinaryOp::Gt,
            BinOp::Ge => BinaryOp::Ge,
        };
        self.check_binary_dtype(bop, op, dtype, span)?;
        let (ia, ib) = self.broadcast_pair(ia, ib, span)?;
        let shape = self.ty(ia).shape.clone();
        let rd = if bop.is_comparison() { DType::Bool } else { dtype };
        Ok(Val::Value(self.push(
            OpKind::Binary(bop, ia, ib),
            Some(Ty { dtype: rd, shape }),
            span,
        )))
    }

    pub(super) fn check_binary_dtype(&self, bop: BinaryOp, op: BinOp, dtype: DType, span: Span) -> Result<()> {
        let ok = match bop {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min => {
                dtype != DType::Bool
            }
            BinaryOp::Rem | BinaryOp::Shl | BinaryOp::Shr => dtype.is_int(),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                if matches!(op, BinOp::And | BinOp::Or) {
                    dtype == DType::Bool
                } else {
                    dtype == DType::Bool || dtype.is_int()
                }
            }
            BinaryOp::Eq | BinaryOp::Ne => true,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => dtype != DType::Bool,
        };
        if !ok {
            bail!(span, "this operator does not apply to {dtype}");
        }
        Ok(())
    }

    pub(super) fn arg_count(args: &[Expr], n: usize, name: &str, usage: &str, span: Span) -> Result<()> {
        if args.len() != n {
            bail!(
                span,
                "`{name}` takes {n} argument{}, found {}: write `{usage}`",
                if n == 1 { "" } else { "s" },
                args.len()
            );
        }
        Ok(())
    }

    pub(super) fn generic_dtype(
        &self,
        generics: &[syn::GenericArgument],
        name: &str,
        span: Span,
    ) -> Result<Option<DType>> {
        match generics {
            [] => Ok(None),
            [syn::GenericArgument::Type(t)] => Ok(Some(self.resolve(t)?)),
            _ => bail!(span, "`{name}` takes one element type, e.g. `{name}::<f32>(..)`"),
        }
    }
}

/// A comparison operator applied to two numbers of one kind.
fn compare<T: PartialOrd>(op: BinOp, x: T, y: T) -> bool {
    match op {
        BinOp::Eq => x == y,
        BinOp::Ne => x != y,
        BinOp::Lt => x < y,
        BinOp::Le => x <= y,
        BinOp::Gt => x > y,
        BinOp::Ge => x >= y,
        _ => unreachable!("only comparisons reach compare"),
    }
}
