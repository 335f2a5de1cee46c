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

mod calls;
mod exprs;
mod memory;
mod methods;
mod stmts;

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
        cluster: None,
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
    cx.declared_shapes()?;
    cx.scopes.push(HashMap::new());
    cx.stmts(&kernel.body)?;

    for &(t, axis, span) in &cx.dim_uses {
        if let Some(rank) = cx.ranks[t]
            && axis >= rank
        {
            bail!(
                span,
                "axis {axis} is out of range for tensor `{}` of rank {rank}: axes count from 0 to {}",
                kernel.params[t].name,
                rank - 1
            );
        }
    }
    let mut params = Vec::new();
    for (i, p) in kernel.params.iter().enumerate() {
        params.push(match &p.kind {
            ast::ParamKind::Tensor { elem, mutable, .. } => {
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
    /// The cluster's blocks the first `cluster_gather` names: every
    /// gather of a kernel names the same.
    cluster: Option<usize>,
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

    pub(super) fn push(&mut self, kind: OpKind, ty: Option<Ty>, span: Span) -> ValueId {
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

    pub(super) fn new_value(&mut self, ty: Ty) -> ValueId {
        self.values.push(ty);
        self.values.len() - 1
    }

    pub(super) fn ty(&self, v: ValueId) -> &Ty {
        &self.values[v]
    }

    pub(super) fn bind(&mut self, name: &str, val: Val, mutable: bool) {
        self.scopes
            .last_mut()
            .expect("scope")
            .insert(name.to_string(), Binding { val, mutable });
    }

    pub(super) fn lookup(&self, name: &str) -> Option<Binding> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    pub(super) fn assign(&mut self, name: &str, val: Val) {
        for s in self.scopes.iter_mut().rev() {
            if let Some(b) = s.get_mut(name) {
                b.val = val;
                return;
            }
        }
    }

    pub(super) fn tensor_param(&self, i: usize) -> (&'k ast::Param, DType, bool) {
        let p = &self.kernel.params[i];
        match &p.kind {
            ast::ParamKind::Tensor { elem, mutable, .. } => (p, self.elem(elem), *mutable),
            ast::ParamKind::Scalar(_) => unreachable!("tensor index names a scalar"),
        }
    }

    pub(super) fn elem(&self, e: &ast::Elem) -> DType {
        match e {
            ast::Elem::Fixed(d) => *d,
            ast::Elem::Param(name) => self.types[name],
        }
    }

    /// The element type a Rust type names here: a type parameter's current
    /// type, or a fixed one.
    pub(super) fn resolve(&self, ty: &syn::Type) -> Result<DType> {
        if let syn::Type::Path(p) = ty
            && let Some(d) = p.path.get_ident().and_then(|i| self.types.get(&i.to_string()))
        {
            return Ok(*d);
        }
        crate::parse::type_dtype(ty)
    }

    /// Records or checks the rank a tensor is used with.
    pub(super) fn use_rank(&mut self, t: usize, rank: usize, span: Span) -> Result<()> {
        match self.ranks[t] {
            None => self.ranks[t] = Some(rank),
            Some(r) if r != rank => {
                let p = &self.kernel.params[t];
                let name = &p.name;
                let plural = if r == 1 { "" } else { "s" };
                if let ast::ParamKind::Tensor { shape: Some(_), .. } = p.kind {
                    bail!(
                        span,
                        "tensor `{name}` is declared with {r} dimension{plural} but used here with {rank}: index it with {r} coordinate{plural}, or declare its shape with {rank}"
                    )
                }
                bail!(
                    span,
                    "tensor `{name}` is used here with rank {rank} but elsewhere with rank {r}: a tensor has one rank; index it with {r} coordinate{plural}"
                )
            }
            _ => {}
        }
        Ok(())
    }

    /// The value of `name` if it is a const parameter (in this specialization).
    pub(super) fn const_value(&self, name: &proc_macro2::Ident) -> Option<usize> {
        match self.scopes[0].get(&name.to_string())?.val {
            Val::Weak(Weak::Int(v)) => usize::try_from(v).ok(),
            _ => None,
        }
    }

    /// The tensors' declared shapes (`&Tensor<T, { [M, N] }>`): each fixes
    /// its tensor's rank, and each symbol that names nothing else (a const
    /// parameter) is bound to the size of the first dimension declared
    /// with it (a launch checks that the others agree).
    fn declared_shapes(&mut self) -> Result<()> {
        for (t, p) in self.kernel.params.iter().enumerate() {
            let ast::ParamKind::Tensor { shape: Some(dims), .. } = &p.kind else {
                continue;
            };
            self.use_rank(t, dims.len(), p.name.span())?;
            for (axis, d) in dims.iter().enumerate() {
                let ast::Dim::Name(n) = d else { continue };
                let name = n.to_string();
                if self.lookup(&name).is_none() {
                    let dim = self.push(
                        OpKind::TensorDim { tensor: t, axis },
                        Some(Ty::scalar(DType::I32)),
                        n.span(),
                    );
                    self.bind(&name, Val::Value(dim), false);
                }
            }
        }
        Ok(())
    }

    // ---- values ----------------------------------------------------------

    pub(super) fn constant(&mut self, w: Weak, dtype: DType, span: Span) -> Result<ValueId> {
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
    pub(super) fn concrete(&mut self, v: Val, want: Option<DType>, span: Span) -> Result<ValueId> {
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

    pub(super) fn val_ty(&self, v: Val) -> Option<Ty> {
        match v {
            Val::Value(id) => Some(self.ty(id).clone()),
            _ => None,
        }
    }

    /// A compile-time integer (literal, const parameter, or arithmetic of them).
    pub(super) fn const_int(&mut self, e: &Expr, what: &str) -> Result<i64> {
        match self.expr(e)? {
            Val::Weak(Weak::Int(i)) => Ok(i),
            _ => bail!(
                e.span(),
                "{what} must be a compile-time integer: a literal or a const generic parameter (listed in #[tile::kernel(..)])"
            ),
        }
    }

    /// A list of compile-time tile dimensions, each a power of two.
    pub(super) fn shape(&mut self, e: &Expr) -> Result<Vec<usize>> {
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

    pub(super) fn check_size(&self, dims: &[usize], span: Span) -> Result<()> {
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
    pub(super) fn index(&mut self, e: &Expr) -> Result<Vec<ValueId>> {
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

    pub(super) fn axis(&mut self, e: &Expr, rank: usize) -> Result<usize> {
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
    pub(super) fn broadcast_shapes(a: &[usize], b: &[usize], span: Span) -> Result<Vec<usize>> {
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
    pub(super) fn broadcast_to(&mut self, v: ValueId, shape: &[usize], span: Span) -> Result<ValueId> {
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
}
