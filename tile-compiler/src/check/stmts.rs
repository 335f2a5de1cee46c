//! Statements: `let`, assignment, `for` loops with the tiles they carry, and
//! `if` on block-uniform scalars.

use super::*;

impl Checker<'_> {
    pub(super) fn stmts(&mut self, stmts: &[Stmt]) -> Result<()> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<()> {
        match s {
            Stmt::LetArray { names, init } => {
                let values = self.several(init)?;
                if values.len() != names.len() {
                    bail!(
                        init.span(),
                        "this returns {} values but the pattern names {}",
                        values.len(),
                        names.len()
                    );
                }
                for (n, v) in names.iter().zip(values) {
                    self.bind(&n.to_string(), Val::Value(v), false);
                }
            }
            Stmt::Let {
                name,
                mutable,
                ann,
                init,
            } => {
                let mut v = self.expr(init)?;
                if let Val::Tensor(_) = v {
                    bail!(init.span(), "tensors can't be rebound: use the parameter name directly");
                }
                if let Some(ann) = ann {
                    let span = syn::spanned::Spanned::span(ann);
                    let d = self.resolve(ann).map_err(|_| {
                        crate::error::Error::new(
                            span,
                            "annotate scalars with their element type (`let n: i32 = ..`); tile shapes and types are inferred",
                        )
                    })?;
                    let id = self.concrete(v, Some(d), init.span())?;
                    let ty = self.ty(id).clone();
                    if ty.dtype != d || !ty.is_scalar() {
                        bail!(span, "`{name}` is annotated {d} but its value is {ty}");
                    }
                    v = Val::Value(id);
                }
                self.bind(&name.to_string(), v, *mutable);
            }
            Stmt::Assign { name, value, span } => {
                let key = name.to_string();
                let Some(b) = self.lookup(&key) else {
                    bail!(name.span(), "unknown name `{name}`");
                };
                if !b.mutable {
                    bail!(
                        name.span(),
                        "`{name}` is not mutable: declare it with `let mut {name} = ..` to assign it"
                    );
                }
                let v = self.expr(value)?;
                let v = self.same_type(b.val, v, &key, *span)?;
                self.assign(&key, v);
            }
            Stmt::Expr(e) => {
                self.expr(e)?;
            }
            Stmt::For {
                var,
                lo,
                hi,
                body,
                span,
            } => self.for_loop(var.as_ref(), lo, hi, body, *span)?,
            Stmt::If { cond, then, els, span } => self.if_stmt(cond, then, els, *span)?,
        }
        Ok(())
    }

    /// Checks that an assigned value keeps the variable's type; adapts weak literals.
    pub(super) fn same_type(&mut self, old: Val, new: Val, name: &str, span: Span) -> Result<Val> {
        let Some(old_ty) = self.val_ty(old) else {
            return Ok(new);
        };
        let id = self.concrete(new, Some(old_ty.dtype), span)?;
        let new_ty = self.ty(id).clone();
        if new_ty != old_ty {
            bail!(
                span,
                "`{name}` holds a {old_ty} but is assigned a {new_ty}: a variable keeps its shape and dtype (cast with `.cast::<T>()`, or bind a new name with `let`)"
            );
        }
        Ok(Val::Value(id))
    }

    /// Names assigned anywhere in `stmts` (nested bodies included).
    pub(super) fn assigned_names(stmts: &[Stmt], out: &mut Vec<String>) {
        for s in stmts {
            match s {
                Stmt::Assign { name, .. } => {
                    let n = name.to_string();
                    if !out.contains(&n) {
                        out.push(n);
                    }
                }
                Stmt::For { body, .. } => Self::assigned_names(body, out),
                Stmt::If { then, els, .. } => {
                    Self::assigned_names(then, out);
                    Self::assigned_names(els, out);
                }
                _ => {}
            }
        }
    }

    /// The outer mutable names a body assigns, made concrete so they can be carried.
    pub(super) fn carried(&mut self, bodies: &[&[Stmt]], span: Span) -> Result<Vec<(String, ValueId)>> {
        let mut names = Vec::new();
        for b in bodies {
            Self::assigned_names(b, &mut names);
        }
        let mut out = Vec::new();
        for n in names {
            if let Some(b) = self.lookup(&n)
                && b.mutable
            {
                let id = self.concrete(b.val, None, span)?;
                self.assign(&n, Val::Value(id));
                out.push((n, id));
            }
        }
        Ok(out)
    }

    pub(super) fn scalar_int(&mut self, e: &Expr, what: &str) -> Result<ValueId> {
        let v = self.expr(e)?;
        let id = self.concrete(v, Some(DType::I32), e.span())?;
        let ty = self.ty(id).clone();
        if !ty.is_scalar() || ty.dtype != DType::I32 {
            bail!(
                e.span(),
                "{what} must be a block-uniform i32 scalar, found {ty} (convert a scalar with `as i32`)"
            );
        }
        Ok(id)
    }

    pub(super) fn for_loop(
        &mut self,
        var: Option<&proc_macro2::Ident>,
        lo: &Expr,
        hi: &Expr,
        body: &[Stmt],
        span: Span,
    ) -> Result<()> {
        let lo = self.scalar_int(lo, "a loop bound")?;
        let hi = self.scalar_int(hi, "a loop bound")?;
        let carried = self.carried(&[body], span)?;
        let var_id = self.new_value(Ty::scalar(DType::I32));
        let mut args = Vec::new();
        self.scopes.push(HashMap::new());
        for (name, init) in &carried {
            let a = self.new_value(self.ty(*init).clone());
            args.push(a);
            self.bind(name, Val::Value(a), true);
        }
        self.scopes.push(HashMap::new());
        if let Some(v) = var {
            self.bind(&v.to_string(), Val::Value(var_id), false);
        }
        self.blocks.push(Vec::new());
        self.stmts(body)?;
        self.scopes.pop();
        let mut yields = Vec::new();
        for ((name, _), arg) in carried.iter().zip(&args) {
            let cur = self.lookup(name).expect("carried name").val;
            let Val::Value(id) = self.same_type(Val::Value(*arg), cur, name, span)? else {
                unreachable!("same_type returns a value")
            };
            yields.push(id);
        }
        self.scopes.pop();
        let body_ops = self.blocks.pop().expect("loop block");
        let results: Vec<ValueId> = args.iter().map(|a| self.new_value(self.ty(*a).clone())).collect();
        self.blocks.last_mut().expect("block").push(Op {
            kind: OpKind::For {
                lo,
                hi,
                var: var_id,
                inits: carried.iter().map(|(_, v)| *v).collect(),
                args,
                body: body_ops,
                yields,
            },
            results: results.clone(),
            span,
        });
        for ((name, _), r) in carried.iter().zip(results) {
            self.assign(name, Val::Value(r));
        }
        Ok(())
    }

    pub(super) fn if_stmt(&mut self, cond: &Expr, then: &[Stmt], els: &[Stmt], span: Span) -> Result<()> {
        let c = self.expr(cond)?;
        if let Val::Weak(Weak::Bool(b)) = c {
            // Compile-time condition: only the taken branch exists.
            self.scopes.push(HashMap::new());
            self.stmts(if b { then } else { els })?;
            self.scopes.pop();
            return Ok(());
        }
        let c = self.concrete(c, Some(DType::Bool), cond.span())?;
        let cty = self.ty(c).clone();
        if cty != Ty::scalar(DType::Bool) {
            bail!(
                cond.span(),
                "`if` needs a block-uniform bool scalar, found {cty}: to choose per element, use `select(cond, a, b)`"
            );
        }
        let carried = self.carried(&[then, els], span)?;
        let branch = |cx: &mut Self, stmts: &[Stmt]| -> Result<(Vec<Op>, Vec<ValueId>)> {
            cx.scopes.push(HashMap::new());
            for (name, v) in &carried {
                cx.bind(name, Val::Value(*v), true);
            }
            cx.scopes.push(HashMap::new());
            cx.blocks.push(Vec::new());
            cx.stmts(stmts)?;
            cx.scopes.pop();
            let mut ys = Vec::new();
            for (name, init) in &carried {
                let cur = cx.lookup(name).expect("carried").val;
                let Val::Value(id) = cx.same_type(Val::Value(*init), cur, name, span)? else {
                    unreachable!()
                };
                ys.push(id);
            }
            cx.scopes.pop();
            Ok((cx.blocks.pop().expect("branch"), ys))
        };
        let (then_body, then_yields) = branch(self, then)?;
        let (else_body, else_yields) = branch(self, els)?;
        let results: Vec<ValueId> = carried
            .iter()
            .map(|(_, v)| self.new_value(self.ty(*v).clone()))
            .collect();
        self.blocks.last_mut().expect("block").push(Op {
            kind: OpKind::If {
                cond: c,
                then_body,
                then_yields,
                else_body,
                else_yields,
            },
            results: results.clone(),
            span,
        });
        for ((name, _), r) in carried.iter().zip(results) {
            self.assign(name, Val::Value(r));
        }
        Ok(())
    }
}
