//! Type and shape checking: turns the AST of one specialization (const
//! parameters substituted) into tile IR. Every DSL rule about types, shapes,
//! broadcasting, tensors and control flow is enforced here, with spanned
//! errors that say what to write instead.

use crate::ast::{self, BinOp, Expr, Stmt, UnOp};
use crate::dtype::{DType, Ty};
use crate::error::{Result, bail};
use crate::ir::*;
use proc_macro2::Span;
use std::collections::HashMap;

/// Largest tile dimension and element count accepted.
const MAX_TILE_ELEMS: usize = 1 << 16;

/// Builds the IR of `kernel` for one assignment of its type and const parameters.
pub fn check(kernel: &ast::Kernel, types: &[(String, DType)], consts: &[(String, i64)]) -> Result<Func> {
    let mut cx = Checker {
        kernel,
        types: types.iter().cloned().collect(),
        values: Vec::new(),
        blocks: vec![Vec::new()],
        scopes: vec![HashMap::new()],
        ranks: vec![None; kernel.params.len()],
        dim_uses: Vec::new(),
    };
    for (name, v) in consts {
        cx.bind(name, Val::Weak(Weak::Int(*v)), false);
    }
    for (i, p) in kernel.params.iter().enumerate() {
        let val = match p.kind {
            ast::ParamKind::Tensor { .. } => Val::Tensor(i),
            ast::ParamKind::Scalar(d) => {
                Val::Value(cx.push(OpKind::ScalarParam(i), Some(Ty::scalar(d)), p.name.span()))
            }
        };
        cx.bind(&p.name.to_string(), val, false);
    }
    cx.scopes.push(HashMap::new());
    cx.stmts(&kernel.body)?;

    for &(t, axis, span) in &cx.dim_uses {
        if let Some(rank) = cx.ranks[t] {
            if axis >= rank {
                bail!(
                    span,
                    "axis {axis} is out of range for tensor `{}` of rank {rank}: axes count from 0 to {}",
                    kernel.params[t].name,
                    rank - 1
                );
            }
        }
    }
    let mut params = Vec::new();
    for (i, p) in kernel.params.iter().enumerate() {
        params.push(match &p.kind {
            ast::ParamKind::Tensor { elem, mutable } => {
                let (dtype, mutable) = (cx.elem(elem), *mutable);
                let Some(rank) = cx.ranks[i] else {
                    bail!(
                        p.name.span(),
                        "tensor `{}` is never loaded, stored or read, so its rank is unknown: use it or remove it",
                        p.name
                    );
                };
                Param::Tensor(TensorParam {
                    name: p.name.to_string(),
                    dtype,
                    mutable,
                    rank,
                })
            }
            ast::ParamKind::Scalar(dtype) => Param::Scalar {
                name: p.name.to_string(),
                dtype: *dtype,
            },
        });
    }
    let body = cx.blocks.pop().expect("function block");
    Ok(Func {
        name: kernel.name.to_string(),
        params,
        values: cx.values,
        body,
        num_warps: 0,
    })
}

/// A compile-time literal whose element type is fixed by its first use.
#[derive(Clone, Copy, Debug)]
enum Weak {
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Clone, Copy, Debug)]
enum Val {
    Value(ValueId),
    Weak(Weak),
    Tensor(usize),
    /// What a `store` evaluates to: nothing.
    Unit,
}

#[derive(Clone, Copy)]
struct Binding {
    val: Val,
    mutable: bool,
}

struct Checker<'k> {
    kernel: &'k ast::Kernel,
    /// The element type each type parameter stands for in this specialization.
    types: HashMap<String, DType>,
    values: Vec<Ty>,
    blocks: Vec<Vec<Op>>,
    scopes: Vec<HashMap<String, Binding>>,
    ranks: Vec<Option<usize>>,
    /// `tensor.shape(axis)` uses, checked once every rank is known.
    dim_uses: Vec<(usize, usize, Span)>,
}

fn pow2(n: usize) -> bool {
    n.is_power_of_two()
}

/// `1 coordinate`, `2 coordinates`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn weak_dtype(w: Weak) -> DType {
    match w {
        Weak::Int(_) => DType::I32,
        Weak::Float(_) => DType::F32,
        Weak::Bool(_) => DType::Bool,
    }
}

const THREAD_LEVEL: &[&str] = &[
    "thread_idx",
    "thread_id",
    "threadIdx",
    "tid",
    "lane_id",
    "laneid",
    "warp_id",
    "warpid",
    "block_dim",
    "blockDim",
    "syncthreads",
    "__syncthreads",
    "sync_threads",
    "barrier",
    "bar_sync",
    "syncwarp",
    "__syncwarp",
    "shfl",
    "shfl_sync",
    "__shfl_sync",
    "shfl_xor",
    "shared",
    "shared_array",
    "__shared__",
];

impl<'k> Checker<'k> {
    // ---- building -------------------------------------------------------

    fn push(&mut self, kind: OpKind, ty: Option<Ty>, span: Span) -> ValueId {
        let results = match ty {
            Some(t) => {
                self.values.push(t);
                vec![self.values.len() - 1]
            }
            None => vec![],
        };
        let id = results.first().copied().unwrap_or(usize::MAX);
        self.blocks
            .last_mut()
            .expect("open block")
            .push(Op { kind, results, span });
        id
    }

    fn new_value(&mut self, ty: Ty) -> ValueId {
        self.values.push(ty);
        self.values.len() - 1
    }

    fn ty(&self, v: ValueId) -> &Ty {
        &self.values[v]
    }

    fn bind(&mut self, name: &str, val: Val, mutable: bool) {
        self.scopes
            .last_mut()
            .expect("scope")
            .insert(name.to_string(), Binding { val, mutable });
    }

    fn lookup(&self, name: &str) -> Option<Binding> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    fn assign(&mut self, name: &str, val: Val) {
        for s in self.scopes.iter_mut().rev() {
            if let Some(b) = s.get_mut(name) {
                b.val = val;
                return;
            }
        }
    }

    fn tensor_param(&self, i: usize) -> (&'k ast::Param, DType, bool) {
        let p = &self.kernel.params[i];
        match &p.kind {
            ast::ParamKind::Tensor { elem, mutable } => (p, self.elem(elem), *mutable),
            ast::ParamKind::Scalar(_) => unreachable!("tensor index names a scalar"),
        }
    }

    fn elem(&self, e: &ast::Elem) -> DType {
        match e {
            ast::Elem::Fixed(d) => *d,
            ast::Elem::Param(name) => self.types[name],
        }
    }

    /// The element type a Rust type names here: a type parameter's current
    /// type, or a fixed one.
    fn resolve(&self, ty: &syn::Type) -> Result<DType> {
        if let syn::Type::Path(p) = ty {
            if let Some(d) = p.path.get_ident().and_then(|i| self.types.get(&i.to_string())) {
                return Ok(*d);
            }
        }
        crate::parse::type_dtype(ty)
    }

    /// Records or checks the rank a tensor is used with.
    fn use_rank(&mut self, t: usize, rank: usize, span: Span) -> Result<()> {
        match self.ranks[t] {
            None => self.ranks[t] = Some(rank),
            Some(r) if r != rank => {
                let name = &self.kernel.params[t].name;
                bail!(
                    span,
                    "tensor `{name}` is used here with rank {rank} but elsewhere with rank {r}: a tensor has one rank; index it with {r} coordinate{}",
                    if r == 1 { "" } else { "s" }
                )
            }
            _ => {}
        }
        Ok(())
    }

    // ---- values ----------------------------------------------------------

    fn constant(&mut self, w: Weak, dtype: DType, span: Span) -> Result<ValueId> {
        let c = match (w, dtype) {
            (Weak::Bool(b), DType::Bool) => ConstVal::Bool(b),
            (Weak::Int(i), d) if d.is_int() => {
                let ok = match d {
                    DType::I32 => i32::try_from(i).is_ok(),
                    _ => u32::try_from(i).is_ok(),
                };
                if !ok {
                    bail!(span, "the literal {i} does not fit in {d}");
                }
                ConstVal::Int(i)
            }
            (Weak::Int(i), d) if d.is_float() => ConstVal::Float(i as f64),
            (Weak::Float(x), d) if d.is_float() => ConstVal::Float(x),
            (Weak::Float(_), d) => bail!(
                span,
                "a float literal can't be used as {d}: write an integer, or convert with `as {d}`"
            ),
            (w, d) => bail!(span, "a {} literal can't be used as {d}", weak_dtype(w)),
        };
        Ok(self.push(OpKind::Const(c), Some(Ty::scalar(dtype)), span))
    }

    /// Makes an IR value of `v`, giving weak literals `want` (or their default type).
    fn concrete(&mut self, v: Val, want: Option<DType>, span: Span) -> Result<ValueId> {
        match v {
            Val::Value(id) => Ok(id),
            Val::Weak(w) => self.constant(w, want.unwrap_or(weak_dtype(w)), span),
            Val::Tensor(t) => {
                let name = &self.kernel.params[t].name;
                bail!(
                    span,
                    "`{name}` is a tensor, not a tile: load a tile from it with `{name}.load(index, shape)`"
                )
            }
            Val::Unit => bail!(span, "`store` produces no value"),
        }
    }

    fn val_ty(&self, v: Val) -> Option<Ty> {
        match v {
            Val::Value(id) => Some(self.ty(id).clone()),
            _ => None,
        }
    }

    /// A compile-time integer (literal, const parameter, or arithmetic of them).
    fn const_int(&mut self, e: &Expr, what: &str) -> Result<i64> {
        match self.expr(e)? {
            Val::Weak(Weak::Int(i)) => Ok(i),
            _ => bail!(
                e.span(),
                "{what} must be a compile-time integer: a literal or a const generic parameter (listed in #[tile::kernel(..)])"
            ),
        }
    }

    /// A list of compile-time tile dimensions, each a power of two.
    fn shape(&mut self, e: &Expr) -> Result<Vec<usize>> {
        let Expr::Array(items, span) = e else {
            bail!(
                e.span(),
                "write a tile shape as a list of compile-time dimensions: `[64, BLOCK]`"
            );
        };
        if items.is_empty() {
            bail!(*span, "a tile has at least one dimension");
        }
        let mut dims = Vec::new();
        for it in items {
            let d = self.const_int(it, "a tile dimension")?;
            if d <= 0 || !pow2(d as usize) {
                bail!(
                    it.span(),
                    "tile dimension {d} is not a power of two: every tile dimension is a power of two (1, 2, 4, ..); load a larger tile and let the padding cover the edge"
                );
            }
            dims.push(d as usize);
        }
        self.check_size(&dims, *span)?;
        Ok(dims)
    }

    fn check_size(&self, dims: &[usize], span: Span) -> Result<()> {
        match dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) {
            Some(n) if n <= MAX_TILE_ELEMS => Ok(()),
            count => bail!(
                span,
                "tile {dims:?} has {} elements, more than the {MAX_TILE_ELEMS} a block can hold in registers: use a smaller tile and loop over the rest",
                count.map_or("too many".to_string(), |n| n.to_string())
            ),
        }
    }

    /// A tile-grid or element index: block-uniform integer scalars.
    fn index(&mut self, e: &Expr) -> Result<Vec<ValueId>> {
        let Expr::Array(items, span) = e else {
            bail!(e.span(), "write an index as a list of scalars: `[row, 0]`");
        };
        if items.is_empty() {
            bail!(
                *span,
                "an index has one coordinate per tensor dimension, and tensors have at least one: `[i]`"
            );
        }
        let mut out = Vec::new();
        for it in items {
            let v = self.expr(it)?;
            let id = self.concrete(v, Some(DType::I32), it.span())?;
            let ty = self.ty(id).clone();
            if !ty.is_scalar() || !ty.dtype.is_int() {
                bail!(
                    it.span(),
                    "an index is a block-uniform integer scalar (i32), found {ty}"
                );
            }
            let id = if ty.dtype == DType::U32 {
                self.push(OpKind::Cast(id), Some(Ty::scalar(DType::I32)), it.span())
            } else {
                id
            };
            out.push(id);
        }
        Ok(out)
    }

    fn axis(&mut self, e: &Expr, rank: usize) -> Result<usize> {
        let a = self.const_int(e, "an axis")?;
        if a < 0 || a as usize >= rank {
            bail!(
                e.span(),
                "axis {a} is out of range for a tile of rank {rank}: axes count from 0 to {}",
                rank - 1
            );
        }
        Ok(a as usize)
    }

    /// Shape of broadcasting `a` with `b` (NumPy rules).
    fn broadcast_shapes(a: &[usize], b: &[usize], span: Span) -> Result<Vec<usize>> {
        let n = a.len().max(b.len());
        let mut out = vec![0; n];
        for i in 0..n {
            let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            out[i] = if da == db || db == 1 {
                da
            } else if da == 1 {
                db
            } else {
                bail!(
                    span,
                    "shapes {a:?} and {b:?} can't be broadcast together: dimension {i} is {da} on one side and {db} on the other; each dimension must match or be 1 (reductions keep their axis as 1, so `x - x.max(1)` works)"
                );
            };
        }
        Ok(out)
    }

    /// Brings `v` (tile or scalar) to tile `shape`, adding reshape/broadcast/splat ops.
    fn broadcast_to(&mut self, v: ValueId, shape: &[usize], span: Span) -> Result<ValueId> {
        let ty = self.ty(v).clone();
        let dtype = ty.dtype;
        let Some(vs) = ty.shape else {
            return Ok(self.push(OpKind::Splat(v), Some(Ty::tile(dtype, shape.to_vec())), span));
        };
        if vs == shape {
            return Ok(v);
        }
        let merged = Self::broadcast_shapes(&vs, shape, span)?;
        if merged != shape {
            bail!(span, "a tile of shape {vs:?} can't be broadcast to {shape:?}");
        }
        let mut cur = v;
        if vs.len() < shape.len() {
            let mut padded = vec![1; shape.len() - vs.len()];
            padded.extend(&vs);
            cur = self.push(OpKind::Reshape(cur), Some(Ty::tile(dtype, padded)), span);
        }
        Ok(self.push(OpKind::Broadcast(cur), Some(Ty::tile(dtype, shape.to_vec())), span))
    }

    // ---- statements --------------------------------------------------------

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<()> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<()> {
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
    fn same_type(&mut self, old: Val, new: Val, name: &str, span: Span) -> Result<Val> {
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
    fn assigned_names(stmts: &[Stmt], out: &mut Vec<String>) {
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
    fn carried(&mut self, bodies: &[&[Stmt]], span: Span) -> Result<Vec<(String, ValueId)>> {
        let mut names = Vec::new();
        for b in bodies {
            Self::assigned_names(b, &mut names);
        }
        let mut out = Vec::new();
        for n in names {
            if let Some(b) = self.lookup(&n) {
                if b.mutable {
                    let id = self.concrete(b.val, None, span)?;
                    self.assign(&n, Val::Value(id));
                    out.push((n, id));
                }
            }
        }
        Ok(out)
    }

    fn scalar_int(&mut self, e: &Expr, what: &str) -> Result<ValueId> {
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

    fn for_loop(
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

    fn if_stmt(&mut self, cond: &Expr, then: &[Stmt], els: &[Stmt], span: Span) -> Result<()> {
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

    // ---- expressions -------------------------------------------------------

    fn expr(&mut self, e: &Expr) -> Result<Val> {
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

    fn path(&mut self, segs: &[proc_macro2::Ident], span: Span) -> Result<Val> {
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

    fn cast(&mut self, v: Val, to: DType, span: Span) -> Result<Val> {
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

    fn fold(op: BinOp, a: Weak, b: Weak, span: Span) -> Result<Weak> {
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
                BinOp::Eq => Bool(x == y),
                BinOp::Ne => Bool(x != y),
                BinOp::Lt => Bool(x < y),
                BinOp::Le => Bool(x <= y),
                BinOp::Gt => Bool(x > y),
                BinOp::Ge => Bool(x >= y),
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
                    BinOp::Eq => Bool(x == y),
                    BinOp::Ne => Bool(x != y),
                    BinOp::Lt => Bool(x < y),
                    BinOp::Le => Bool(x <= y),
                    BinOp::Gt => Bool(x > y),
                    BinOp::Ge => Bool(x >= y),
                    _ => bail!(span, "this operator does not apply to floats"),
                }
            }
        })
    }

    /// The common element type of two operands; weak literals adopt the other side's.
    fn unify(&mut self, a: Val, b: Val, span: Span) -> Result<(ValueId, ValueId)> {
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
    fn broadcast_pair(&mut self, a: ValueId, b: ValueId, span: Span) -> Result<(ValueId, ValueId)> {
        let (sa, sb) = (self.ty(a).shape.clone(), self.ty(b).shape.clone());
        let shape = match (&sa, &sb) {
            (None, None) => return Ok((a, b)),
            (Some(s), None) | (None, Some(s)) => s.clone(),
            (Some(x), Some(y)) => Self::broadcast_shapes(x, y, span)?,
        };
        Ok((self.broadcast_to(a, &shape, span)?, self.broadcast_to(b, &shape, span)?))
    }

    fn binary(&mut self, op: BinOp, a: Val, b: Val, span: Span) -> Result<Val> {
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

    fn check_binary_dtype(&self, bop: BinaryOp, op: BinOp, dtype: DType, span: Span) -> Result<()> {
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

    fn arg_count(args: &[Expr], n: usize, name: &str, usage: &str, span: Span) -> Result<()> {
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

    fn generic_dtype(&self, generics: &[syn::GenericArgument], name: &str, span: Span) -> Result<Option<DType>> {
        match generics {
            [] => Ok(None),
            [syn::GenericArgument::Type(t)] => Ok(Some(self.resolve(t)?)),
            _ => bail!(span, "`{name}` takes one element type, e.g. `{name}::<f32>(..)`"),
        }
    }

    fn call(
        &mut self,
        func: &proc_macro2::Ident,
        generics: &[syn::GenericArgument],
        args: &[Expr],
        span: Span,
    ) -> Result<Val> {
        let name = func.to_string();
        let unary = match name.as_str() {
            "exp" => Some(UnaryOp::Exp),
            "exp2" => Some(UnaryOp::Exp2),
            "log" => Some(UnaryOp::Log),
            "log2" => Some(UnaryOp::Log2),
            "sqrt" => Some(UnaryOp::Sqrt),
            "rsqrt" => Some(UnaryOp::Rsqrt),
            "tanh" => Some(UnaryOp::Tanh),
            "erf" => Some(UnaryOp::Erf),
            "abs" => Some(UnaryOp::Abs),
            _ => None,
        };
        if let Some(uop) = unary {
            Self::arg_count(args, 1, &name, &format!("{name}(x)"), span)?;
            let v = self.expr(&args[0])?;
            let v = match v {
                Val::Weak(Weak::Int(i)) if uop != UnaryOp::Abs => Val::Weak(Weak::Float(i as f64)),
                v => v,
            };
            let id = self.concrete(v, None, args[0].span())?;
            let ty = self.ty(id).clone();
            let ok = if uop == UnaryOp::Abs {
                ty.dtype.is_float() || ty.dtype == DType::I32
            } else {
                ty.dtype.is_float()
            };
            if !ok {
                bail!(
                    span,
                    "`{name}` takes a float tile or scalar, found {ty}: cast first with `.cast::<f32>()`"
                );
            }
            return Ok(Val::Value(self.push(OpKind::Unary(uop, id), Some(ty), span)));
        }
        match name.as_str() {
            "block_id" | "num_blocks" => {
                Self::arg_count(args, 1, &name, &format!("{name}(0)"), span)?;
                let a = self.const_int(&args[0], "the grid axis")?;
                if !(0..3).contains(&a) {
                    bail!(args[0].span(), "the grid has axes 0, 1 and 2, not {a}");
                }
                let kind = if name == "block_id" {
                    OpKind::BlockId(a as usize)
                } else {
                    OpKind::NumBlocks(a as usize)
                };
                Ok(Val::Value(self.push(kind, Some(Ty::scalar(DType::I32)), span)))
            }
            "arange" => {
                Self::arg_count(args, 1, &name, "arange(N)", span)?;
                let n = self.const_int(&args[0], "the length of `arange`")?;
                if n <= 0 || !pow2(n as usize) {
                    bail!(
                        args[0].span(),
                        "tile dimension {n} is not a power of two: `arange(N)` makes a tile of N elements and every tile dimension is a power of two"
                    );
                }
                self.check_size(&[n as usize], span)?;
                Ok(Val::Value(self.push(
                    OpKind::Arange,
                    Some(Ty::tile(DType::I32, vec![n as usize])),
                    span,
                )))
            }
            "full" | "zeros" => {
                let want = self.generic_dtype(generics, &name, span)?;
                let (shape, v) = if name == "full" {
                    Self::arg_count(args, 2, &name, "full([M, N], value)", span)?;
                    (self.shape(&args[0])?, self.expr(&args[1])?)
                } else {
                    Self::arg_count(args, 1, &name, "zeros([M, N])", span)?;
                    (self.shape(&args[0])?, Val::Weak(Weak::Int(0)))
                };
                let want = want.or(if name == "zeros" { Some(DType::F32) } else { None });
                let id = self.concrete(v, want, span)?;
                let ty = self.ty(id).clone();
                if !ty.is_scalar() {
                    bail!(args[args.len() - 1].span(), "the fill value is a scalar, found {ty}");
                }
                if let Some(w) = want {
                    if w != ty.dtype {
                        bail!(span, "the fill value is {} but the tile is {w}", ty.dtype);
                    }
                }
                Ok(Val::Value(self.push(
                    OpKind::Splat(id),
                    Some(Ty::tile(ty.dtype, shape)),
                    span,
                )))
            }
            "max" | "min" => {
                Self::arg_count(args, 2, &name, &format!("{name}(a, b)"), span)?;
                let a = self.expr(&args[0])?;
                let b = self.expr(&args[1])?;
                if let (Val::Weak(x), Val::Weak(y)) = (a, b) {
                    let lt = Self::fold(BinOp::Lt, x, y, span)?;
                    let a_lt_b = matches!(lt, Weak::Bool(true));
                    return Ok(Val::Weak(if (name == "max") == a_lt_b { y } else { x }));
                }
                let (ia, ib) = self.unify(a, b, span)?;
                let dtype = self.ty(ia).dtype;
                if dtype == DType::Bool {
                    bail!(span, "`{name}` takes numbers, not bools");
                }
                let (ia, ib) = self.broadcast_pair(ia, ib, span)?;
                let ty = self.ty(ia).clone();
                let bop = if name == "max" { BinaryOp::Max } else { BinaryOp::Min };
                Ok(Val::Value(self.push(OpKind::Binary(bop, ia, ib), Some(ty), span)))
            }
            "select" => {
                Self::arg_count(args, 3, &name, "select(cond, a, b)", span)?;
                let c = self.expr(&args[0])?;
                let c = self.concrete(c, Some(DType::Bool), args[0].span())?;
                if self.ty(c).dtype != DType::Bool {
                    bail!(
                        args[0].span(),
                        "the condition of `select` is a bool tile or scalar (a comparison), found {}",
                        self.ty(c)
                    );
                }
                let a = self.expr(&args[1])?;
                let b = self.expr(&args[2])?;
                let (ia, ib) = self.unify(a, b, span)?;
                let shapes: Vec<Vec<usize>> = [c, ia, ib].iter().filter_map(|v| self.ty(*v).shape.clone()).collect();
                let (c, ia, ib) = match shapes.split_first() {
                    None => (c, ia, ib),
                    Some((first, rest)) => {
                        let mut shape = first.clone();
                        for s in rest {
                            shape = Self::broadcast_shapes(&shape, s, span)?;
                        }
                        (
                            self.broadcast_to(c, &shape, span)?,
                            self.broadcast_to(ia, &shape, span)?,
                            self.broadcast_to(ib, &shape, span)?,
                        )
                    }
                };
                let ty = self.ty(ia).clone();
                Ok(Val::Value(self.push(OpKind::Select(c, ia, ib), Some(ty), span)))
            }
            "cdiv" => {
                Self::arg_count(args, 2, &name, "cdiv(a, b)", span)?;
                let a = self.expr(&args[0])?;
                let b = self.expr(&args[1])?;
                let sum = self.binary(BinOp::Add, a, b, span)?;
                let one = Val::Weak(Weak::Int(1));
                let num = self.binary(BinOp::Sub, sum, one, span)?;
                let q = self.binary(BinOp::Div, num, b, span)?;
                if let Val::Value(id) = q {
                    if !self.ty(id).dtype.is_int() {
                        bail!(span, "`cdiv` divides integers");
                    }
                }
                Ok(q)
            }
            n if THREAD_LEVEL.contains(&n) => bail!(
                func.span(),
                "`{n}` is a thread-level construct, and tile kernels never name threads, lanes, warps, barriers or shared memory: write block-level tile operations (load, arithmetic, sum, store) and the compiler maps them onto threads and inserts the synchronization"
            ),
            n if n.starts_with("atomic") => bail!(
                func.span(),
                "atomics are not part of the DSL yet: give each block its own output tile"
            ),
            "mma" => {
                Self::arg_count(args, 3, &name, "mma(a, b, acc)", span)?;
                let a = self.expr(&args[0])?;
                let a = self.concrete(a, None, args[0].span())?;
                let b = self.expr(&args[1])?;
                let b = self.concrete(b, None, args[1].span())?;
                let acc = self.expr(&args[2])?;
                let acc = self.concrete(acc, Some(DType::F32), args[2].span())?;
                self.mma(a, b, acc, [args[0].span(), args[1].span(), args[2].span()], span)
            }
            "dot" | "matmul" => bail!(
                func.span(),
                "matrix products are written `mma(a, b, acc)`: acc + a @ b on the tensor cores, with an f32 accumulator"
            ),
            "group_tiles" => bail!(
                func.span(),
                "`group_tiles` returns a row and a column: `let [m, n] = group_tiles(block_id(0), tiles_m, tiles_n, 8);`"
            ),
            "where_" | "r#where" => bail!(func.span(), "the per-element choice is spelled `select(cond, a, b)`"),
            _ => bail!(
                func.span(),
                "unknown DSL function `{name}`: a kernel can call only DSL operations (block_id, num_blocks, arange, full, zeros, exp, exp2, log, log2, sqrt, rsqrt, tanh, erf, abs, max, min, select, cdiv, mma) and methods on tensors and tiles"
            ),
        }
    }

    fn method(
        &mut self,
        recv: &Expr,
        method: &proc_macro2::Ident,
        generics: &[syn::GenericArgument],
        args: &[Expr],
        span: Span,
    ) -> Result<Val> {
        let name = method.to_string();
        // `x.load(..).pad(v)` is one load with an explicit padding value.
        if name == "pad" {
            let Expr::Method {
                recv: inner,
                method: m,
                args: load_args,
                span: load_span,
                ..
            } = recv
            else {
                bail!(span, "`.pad(value)` follows a load: `x.load(index, shape).pad(value)`");
            };
            if m != "load" && m != "gather" {
                bail!(
                    span,
                    "`.pad(value)` follows a load: `x.load(index, shape).pad(value)` or `x.gather(indices).pad(value)`"
                );
            }
            Self::arg_count(args, 1, "pad", "x.load(index, shape).pad(value)", span)?;
            let t = self.tensor_recv(inner, m == "load")?;
            return if m == "load" {
                self.load(t, load_args, Some(&args[0]), *load_span)
            } else {
                self.gather(t, load_args, Some(&args[0]), *load_span)
            };
        }
        let rv = self.expr(recv)?;
        if let Val::Tensor(t) = rv {
            return match name.as_str() {
                "load" => self.load(t, args, None, span),
                "gather" => self.gather(t, args, None, span),
                "scatter" => self.scatter(t, args, span),
                "store" => self.store(t, args, span),
                "shape" => {
                    Self::arg_count(args, 1, "shape", "x.shape(axis)", span)?;
                    let a = self.const_int(&args[0], "the axis of `shape`")?;
                    if a < 0 {
                        bail!(args[0].span(), "axes count from 0, not {a}");
                    }
                    self.dim_uses.push((t, a as usize, args[0].span()));
                    Ok(Val::Value(self.push(
                        OpKind::TensorDim {
                            tensor: t,
                            axis: a as usize,
                        },
                        Some(Ty::scalar(DType::I32)),
                        span,
                    )))
                }
                "get" => {
                    Self::arg_count(args, 1, "get", "x.get([i, j])", span)?;
                    let index = self.index(&args[0])?;
                    self.use_rank(t, index.len(), span)?;
                    let (_, dtype, _) = self.tensor_param(t);
                    Ok(Val::Value(self.push(
                        OpKind::Get { tensor: t, index },
                        Some(Ty::scalar(dtype)),
                        span,
                    )))
                }
                _ => bail!(
                    method.span(),
                    "unknown tensor method `{name}`: tensors have load, store, gather, scatter, get and shape"
                ),
            };
        }
        match name.as_str() {
            "sum" | "max" | "min" | "argmax" | "argmin" => {
                Self::arg_count(args, 1, &name, &format!("t.{name}(axis)"), span)?;
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let Some(shape) = ty.shape.clone() else {
                    bail!(
                        span,
                        "`.{name}(axis)` reduces a tile, but this is a {ty} scalar (for two values use `{name}(a, b)`)"
                    );
                };
                let axis = self.axis(&args[0], shape.len())?;
                if ty.dtype == DType::Bool {
                    bail!(span, "reductions take numbers, not bools: cast first");
                }
                let op = match name.as_str() {
                    "sum" => ReduceOp::Sum,
                    "max" => ReduceOp::Max,
                    "min" => ReduceOp::Min,
                    "argmax" => ReduceOp::ArgMax,
                    _ => ReduceOp::ArgMin,
                };
                let mut rshape = shape;
                rshape[axis] = 1;
                let rd = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
                    DType::I32
                } else {
                    ty.dtype
                };
                Ok(Val::Value(self.push(
                    OpKind::Reduce { op, arg: id, axis },
                    Some(Ty::tile(rd, rshape)),
                    span,
                )))
            }
            "cast" => {
                let Some(to) = self.generic_dtype(generics, "cast", span)? else {
                    bail!(span, "name the target type: `.cast::<f32>()`");
                };
                Self::arg_count(args, 0, "cast", "t.cast::<f32>()", span)?;
                self.cast(rv, to, span)
            }
            "reshape" | "broadcast_to" => {
                Self::arg_count(args, 1, &name, &format!("t.{name}([M, N])"), span)?;
                let id = self.concrete(rv, None, recv.span())?;
                let shape = self.shape(&args[0])?;
                let ty = self.ty(id).clone();
                if name == "broadcast_to" {
                    return Ok(Val::Value(self.broadcast_to(id, &shape, span)?));
                }
                let Some(from) = ty.shape else {
                    bail!(
                        span,
                        "`.reshape` takes a tile; make one from a scalar with `full(shape, x)`"
                    );
                };
                let (a, b): (usize, usize) = (from.iter().product(), shape.iter().product());
                if a != b {
                    bail!(
                        span,
                        "can't reshape {from:?} ({a} elements) to {shape:?} ({b} elements): reshape keeps the element count"
                    );
                }
                Ok(Val::Value(self.push(
                    OpKind::Reshape(id),
                    Some(Ty::tile(ty.dtype, shape)),
                    span,
                )))
            }
            "expand_dims" => {
                Self::arg_count(args, 1, &name, "t.expand_dims(axis)", span)?;
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let Some(mut shape) = ty.shape else {
                    bail!(span, "`.expand_dims` takes a tile");
                };
                let a = self.axis(&args[0], shape.len() + 1)?;
                shape.insert(a, 1);
                Ok(Val::Value(self.push(
                    OpKind::Reshape(id),
                    Some(Ty::tile(ty.dtype, shape)),
                    span,
                )))
            }
            "transpose" | "permute" => {
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let Some(shape) = ty.shape else {
                    bail!(span, "`.{name}` takes a tile");
                };
                let perm: Vec<usize> = if name == "transpose" {
                    Self::arg_count(args, 0, &name, "t.transpose()", span)?;
                    if shape.len() != 2 {
                        bail!(
                            span,
                            "`.transpose()` swaps the two axes of a 2-D tile; use `.permute([..])` for rank {}",
                            shape.len()
                        );
                    }
                    vec![1, 0]
                } else {
                    Self::arg_count(args, 1, &name, "t.permute([1, 0])", span)?;
                    let Expr::Array(items, _) = &args[0] else {
                        bail!(args[0].span(), "write the axis order as a list: `[1, 0]`");
                    };
                    let mut p = Vec::new();
                    for it in items {
                        p.push(self.axis(it, shape.len())?);
                    }
                    let mut sorted = p.clone();
                    sorted.sort();
                    if sorted != (0..shape.len()).collect::<Vec<_>>() {
                        bail!(
                            args[0].span(),
                            "`permute` takes each axis 0..{} exactly once",
                            shape.len()
                        );
                    }
                    p
                };
                let new_shape = perm.iter().map(|&i| shape[i]).collect();
                Ok(Val::Value(self.push(
                    OpKind::Permute { arg: id, perm },
                    Some(Ty::tile(ty.dtype, new_shape)),
                    span,
                )))
            }
            "load" | "store" | "gather" | "scatter" | "get" | "shape" => bail!(
                recv.span(),
                "`.{name}` is a tensor method, but this is a tile or scalar"
            ),
            _ => bail!(
                method.span(),
                "unknown method `{name}`: tiles have sum, max, min, argmax, argmin, cast, reshape, expand_dims, broadcast_to, transpose and permute"
            ),
        }
    }

    /// A DSL helper that returns several scalars: `group_tiles(block, tiles_m, tiles_n, group)`.
    fn several(&mut self, e: &Expr) -> Result<Vec<ValueId>> {
        let Expr::Call { func, args, span, .. } = e else {
            bail!(
                e.span(),
                "only `group_tiles(..)` returns several values: `let [m, n] = group_tiles(block_id(0), tiles_m, tiles_n, 8);`"
            );
        };
        if func != "group_tiles" {
            bail!(
                func.span(),
                "only `group_tiles(..)` returns several values: bind other results one per `let`"
            );
        }
        Self::arg_count(
            args,
            4,
            "group_tiles",
            "group_tiles(block_id(0), tiles_m, tiles_n, 8)",
            *span,
        )?;
        self.group_tiles(args, *span)
    }

    /// Block `pid` of a 1-D grid as a (row, col) tile: consecutive blocks
    /// cover `group` tile-rows column by column, so a wave of blocks shares
    /// operand tiles in L2 (Triton's grouped ordering).
    fn group_tiles(&mut self, args: &[Expr], span: Span) -> Result<Vec<ValueId>> {
        let mut vals = Vec::new();
        for a in args {
            let v = self.expr(a)?;
            let id = self.concrete(v, Some(DType::I32), a.span())?;
            if *self.ty(id) != Ty::scalar(DType::I32) {
                bail!(
                    a.span(),
                    "`group_tiles` takes i32 scalars (block index, tile counts, group size), found {}",
                    self.ty(id)
                );
            }
            vals.push(Val::Value(id));
        }
        let [pid, tiles_m, tiles_n, group] = [vals[0], vals[1], vals[2], vals[3]];
        let width = self.binary(BinOp::Mul, group, tiles_n, span)?;
        let first_group = self.binary(BinOp::Div, pid, width, span)?;
        let first_m = self.binary(BinOp::Mul, first_group, group, span)?;
        let left = self.binary(BinOp::Sub, tiles_m, first_m, span)?;
        let (Val::Value(left), Val::Value(g)) = (left, group) else {
            unreachable!("typed")
        };
        let rows = Val::Value(self.push(
            OpKind::Binary(BinaryOp::Min, left, g),
            Some(Ty::scalar(DType::I32)),
            span,
        ));
        let within = self.binary(BinOp::Rem, pid, width, span)?;
        let row = self.binary(BinOp::Rem, within, rows, span)?;
        let m = self.binary(BinOp::Add, first_m, row, span)?;
        let n = self.binary(BinOp::Div, within, rows, span)?;
        let (Val::Value(m), Val::Value(n)) = (m, n) else {
            unreachable!("typed")
        };
        Ok(vec![m, n])
    }

    /// `mma(a, b, acc)`: checks operand shapes and types.
    fn mma(&mut self, a: ValueId, b: ValueId, acc: ValueId, spans: [Span; 3], span: Span) -> Result<Val> {
        let (ta, tb, tc) = (self.ty(a).clone(), self.ty(b).clone(), self.ty(acc).clone());
        let (Some(sa), Some(sb), Some(sc)) = (&ta.shape, &tb.shape, &tc.shape) else {
            bail!(
                span,
                "`mma` takes three tiles: a [M, K], b [K, N] and the accumulator [M, N]"
            );
        };
        if sa.len() != 2 || sb.len() != 2 || sc.len() != 2 {
            bail!(
                span,
                "`mma` multiplies 2-D tiles: a [M, K], b [K, N], acc [M, N]; found {sa:?}, {sb:?}, {sc:?}"
            );
        }
        if ta.dtype != tb.dtype {
            bail!(
                spans[1],
                "`mma` operands have one element type: a is {} but b is {}; cast one with `.cast::<{}>()`",
                ta.dtype,
                tb.dtype,
                ta.dtype
            );
        }
        if !matches!(ta.dtype, DType::F16 | DType::BF16 | DType::F32) {
            bail!(
                spans[0],
                "`mma` multiplies f16, bf16 or f32 (as tf32) tiles, not {}",
                ta.dtype
            );
        }
        if tc.dtype != DType::F32 {
            bail!(
                spans[2],
                "the `mma` accumulator is f32 (tensor cores accumulate in f32), found {}: start from `zeros([M, N])` and cast the result after the loop",
                tc.dtype
            );
        }
        if sa[1] != sb[0] {
            bail!(
                span,
                "`mma` inner dimensions differ: a is {sa:?} and b is {sb:?}; a [M, K] times b [K, N] needs the same K (transpose an operand with `.transpose()`)"
            );
        }
        if sc[0] != sa[0] || sc[1] != sb[1] {
            bail!(
                spans[2],
                "the accumulator is {sc:?} but a {sa:?} times b {sb:?} is [{}, {}]",
                sa[0],
                sb[1]
            );
        }
        let min_k = if ta.dtype == DType::F32 { 8 } else { 16 };
        if sa[0] < 16 || sb[1] < 8 || sa[1] < min_k {
            bail!(
                span,
                "`mma` tiles are built from 16x8x{min_k} tensor-core steps: M must be at least 16, N at least 8 and K at least {min_k}; found M={}, N={}, K={}",
                sa[0],
                sb[1],
                sa[1]
            );
        }
        Ok(Val::Value(self.push(OpKind::Mma { a, b, acc }, Some(tc), span)))
    }

    fn tensor_recv(&mut self, recv: &Expr, load: bool) -> Result<usize> {
        let what = if load { "load" } else { "gather" };
        match self.expr(recv)? {
            Val::Tensor(t) => Ok(t),
            _ => bail!(
                recv.span(),
                "`.{what}` is a tensor method: call it on a tensor parameter"
            ),
        }
    }

    /// Index tiles (or scalars) for a gather or scatter, as i32, and their
    /// broadcast shape together with `extra` (a scattered value).
    fn element_indices(&mut self, e: &Expr, extra: Option<ValueId>, what: &str) -> Result<(Vec<ValueId>, Vec<usize>)> {
        let Expr::Array(items, span) = e else {
            bail!(
                e.span(),
                "write the element indices as a list, one integer tile per tensor dimension: `x.{what}([rows, cols])`"
            );
        };
        if items.is_empty() {
            bail!(
                *span,
                "`{what}` takes one index tile per tensor dimension, and tensors have at least one: `x.{what}([rows])`"
            );
        }
        let mut ids = Vec::new();
        for it in items {
            let v = self.expr(it)?;
            let id = self.concrete(v, Some(DType::I32), it.span())?;
            let ty = self.ty(id).clone();
            if !ty.dtype.is_int() {
                bail!(
                    it.span(),
                    "element indices are integer tiles or scalars (i32), found {ty}"
                );
            }
            let id = if ty.dtype == DType::U32 {
                self.push(
                    OpKind::Cast(id),
                    Some(Ty {
                        dtype: DType::I32,
                        shape: ty.shape,
                    }),
                    it.span(),
                )
            } else {
                id
            };
            ids.push(id);
        }
        let mut shape: Option<Vec<usize>> = None;
        for v in ids.iter().copied().chain(extra) {
            if let Some(s) = self.ty(v).shape.clone() {
                shape = Some(match shape {
                    None => s,
                    Some(prev) => Self::broadcast_shapes(&prev, &s, *span)?,
                });
            }
        }
        let Some(shape) = shape else {
            bail!(
                *span,
                "`{what}` needs at least one index tile (for one element use `.get([..])`)"
            );
        };
        let ids = ids
            .into_iter()
            .map(|v| self.broadcast_to(v, &shape, *span))
            .collect::<Result<Vec<_>>>()?;
        Ok((ids, shape))
    }

    /// The value out-of-bounds elements read as: `.pad(v)`'s, or zero.
    fn pad_value(&mut self, dtype: DType, pad: Option<&Expr>, span: Span) -> Result<ValueId> {
        let val = match pad {
            Some(e) => self.expr(e)?,
            None => Val::Weak(Weak::Int(0)),
        };
        let pad_span = pad.map(|e| e.span()).unwrap_or(span);
        let id = self.concrete(val, Some(dtype), pad_span)?;
        let ty = self.ty(id).clone();
        if ty != Ty::scalar(dtype) {
            bail!(
                pad_span,
                "the padding of a {dtype} tensor is a {dtype} scalar, found {ty}"
            );
        }
        Ok(id)
    }

    fn gather(&mut self, t: usize, args: &[Expr], pad: Option<&Expr>, span: Span) -> Result<Val> {
        Self::arg_count(args, 1, "gather", "x.gather([rows, cols])", span)?;
        let (index, shape) = self.element_indices(&args[0], None, "gather")?;
        self.use_rank(t, index.len(), span)?;
        let (_, dtype, _) = self.tensor_param(t);
        let pad_id = self.pad_value(dtype, pad, span)?;
        Ok(Val::Value(self.push(
            OpKind::Gather {
                tensor: t,
                index,
                pad: pad_id,
            },
            Some(Ty::tile(dtype, shape)),
            span,
        )))
    }

    fn scatter(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "scatter", "y.scatter([rows, cols], values)", span)?;
        let (p, dtype, mutable) = self.tensor_param(t);
        if !mutable {
            bail!(
                span,
                "`{0}` is read-only (`&Tensor<{dtype}>`): declare it `{0}: &mut Tensor<{dtype}>` to scatter into it",
                p.name
            );
        }
        let v = self.expr(&args[1])?;
        let value = self.concrete(v, Some(dtype), args[1].span())?;
        if self.ty(value).dtype != dtype {
            bail!(
                args[1].span(),
                "the values are {} but `{}` holds {dtype}: cast first, `v.cast::<{dtype}>()`",
                self.ty(value).dtype,
                p.name
            );
        }
        let (index, shape) = self.element_indices(&args[0], Some(value), "scatter")?;
        self.use_rank(t, index.len(), span)?;
        let value = self.broadcast_to(value, &shape, span)?;
        self.push(
            OpKind::Scatter {
                tensor: t,
                index,
                value,
            },
            None,
            span,
        );
        Ok(Val::Unit)
    }

    fn load(&mut self, t: usize, args: &[Expr], pad: Option<&Expr>, span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "load", "x.load([i, j], [BM, BN])", span)?;
        let index = self.index(&args[0])?;
        let shape = self.shape(&args[1])?;
        if index.len() != shape.len() {
            bail!(
                span,
                "the index has {} but the tile shape has {}: a load names one tile-grid coordinate per tensor dimension",
                count(index.len(), "coordinate"),
                count(shape.len(), "dimension")
            );
        }
        self.use_rank(t, index.len(), span)?;
        let (_, dtype, _) = self.tensor_param(t);
        let pad_id = self.pad_value(dtype, pad, span)?;
        Ok(Val::Value(self.push(
            OpKind::Load {
                tensor: t,
                index,
                pad: pad_id,
            },
            Some(Ty::tile(dtype, shape)),
            span,
        )))
    }

    fn store(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "store", "y.store([i, j], tile)", span)?;
        let (p, dtype, mutable) = self.tensor_param(t);
        if !mutable {
            bail!(
                span,
                "`{0}` is read-only (`&Tensor<{dtype}>`): declare it `{0}: &mut Tensor<{dtype}>` to store into it",
                p.name
            );
        }
        let index = self.index(&args[0])?;
        self.use_rank(t, index.len(), span)?;
        let v = self.expr(&args[1])?;
        let id = self.concrete(v, Some(dtype), args[1].span())?;
        let ty = self.ty(id).clone();
        let Some(shape) = &ty.shape else {
            bail!(
                args[1].span(),
                "`store` writes a tile; make one from a scalar with `full([1], x)`"
            );
        };
        if ty.dtype != dtype {
            bail!(
                args[1].span(),
                "the tile is {} but `{}` holds {dtype}: cast before storing, `t.cast::<{dtype}>()`",
                ty.dtype,
                p.name
            );
        }
        if shape.len() != index.len() {
            bail!(
                args[1].span(),
                "the tile has rank {} but the index has {}: a stored tile has the tensor's rank (reshape it with `.reshape([..])`)",
                shape.len(),
                count(index.len(), "coordinate")
            );
        }
        self.push(
            OpKind::Store {
                tensor: t,
                index,
                value: id,
            },
            None,
            span,
        );
        Ok(Val::Unit)
    }
}
