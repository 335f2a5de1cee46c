//! Tensor access: `load` and `store` of tiles at tile-grid indices, `gather`
//! and `scatter` by index tiles, and the element type and rank rules.

use super::*;

impl<'k> Checker<'k> {
    pub(super) fn tensor_recv(&mut self, recv: &Expr, load: bool) -> Result<usize> {
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
    pub(super) fn element_indices(
        &mut self,
        e: &Expr,
        extra: Option<ValueId>,
        what: &str,
    ) -> Result<(Vec<ValueId>, Vec<usize>)> {
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
    pub(super) fn pad_value(&mut self, dtype: DType, pad: Option<&Expr>, span: Span) -> Result<ValueId> {
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

    pub(super) fn gather(&mut self, t: usize, args: &[Expr], pad: Option<&Expr>, span: Span) -> Result<Val> {
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

    /// Tensor parameter `t` and its element type, when `&mut`: `what`
    /// (store, scatter, ..) writes into it.
    fn writable(&self, t: usize, what: &str, span: Span) -> Result<(&'k ast::Param, DType)> {
        let (p, dtype, mutable) = self.tensor_param(t);
        if !mutable {
            bail!(
                span,
                "`{0}` is read-only (`&Tensor<{dtype}>`): declare it `{0}: &mut Tensor<{dtype}>` to {what} into it",
                p.name
            );
        }
        Ok((p, dtype))
    }

    /// `y.scatter(index, values)`, or with `atomic` `y.atomic_add(..)`,
    /// `atomic_max`, `atomic_min`.
    pub(super) fn scatter(&mut self, t: usize, args: &[Expr], atomic: Option<AtomicOp>, span: Span) -> Result<Val> {
        let name = match atomic {
            None => "scatter",
            Some(AtomicOp::Add) => "atomic_add",
            Some(AtomicOp::Max) => "atomic_max",
            Some(AtomicOp::Min) => "atomic_min",
        };
        Self::arg_count(args, 2, name, &format!("y.{name}([rows, cols], values)"), span)?;
        let (p, dtype) = self.writable(t, name, span)?;
        match atomic {
            Some(AtomicOp::Max | AtomicOp::Min) if !dtype.is_int() => bail!(
                span,
                "`{name}` takes i32 or u32 tensors: the GPU has no atomic {} of floats (`{}` holds {dtype})",
                &name[7..],
                p.name
            ),
            _ => {}
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
        let (index, shape) = self.element_indices(&args[0], Some(value), name)?;
        self.use_rank(t, index.len(), span)?;
        let value = self.broadcast_to(value, &shape, span)?;
        self.push(
            OpKind::Scatter {
                tensor: t,
                index,
                value,
                atomic,
            },
            None,
            span,
        );
        Ok(Val::Unit)
    }

    /// `n.fetch_add([i, j], v)`: the block adds the scalar `v` to one
    /// element of an integer tensor, once, and gets the element's value
    /// before, a block-uniform scalar.
    pub(super) fn fetch_add(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "fetch_add", "n.fetch_add([i], 1)", span)?;
        let (p, dtype) = self.writable(t, "fetch_add", span)?;
        if !dtype.is_int() {
            bail!(
                span,
                "`fetch_add` counts in i32 or u32 tensors, and `{}` holds {dtype}: to add float tiles, use `atomic_add(indices, values)`",
                p.name
            );
        }
        let index = self.index(&args[0])?;
        self.use_rank(t, index.len(), span)?;
        let v = self.expr(&args[1])?;
        let value = self.concrete(v, Some(dtype), args[1].span())?;
        let ty = self.ty(value).clone();
        if ty.shape.is_some() {
            bail!(
                args[1].span(),
                "`fetch_add` adds one block-uniform scalar, not a {ty}: to add each element of a tile, use `atomic_add(indices, values)`"
            );
        }
        if ty.dtype != dtype {
            bail!(
                args[1].span(),
                "the value is {} but `{}` holds {dtype}: cast first, `v.cast::<{dtype}>()`",
                ty.dtype,
                p.name
            );
        }
        Ok(Val::Value(self.push(
            OpKind::FetchAdd {
                tensor: t,
                index,
                value,
            },
            Some(Ty::scalar(dtype)),
            span,
        )))
    }

    /// The tile-grid index and the tile shape of `x.load(index, shape)`
    /// or `x.prefetch(index, shape)`: one coordinate per dimension.
    fn tile_at(
        &mut self,
        t: usize,
        args: &[Expr],
        (what, example): (&str, &str),
        span: Span,
    ) -> Result<(Vec<ValueId>, Vec<usize>)> {
        Self::arg_count(args, 2, what, example, span)?;
        let index = self.index(&args[0])?;
        let shape = self.shape(&args[1])?;
        if index.len() != shape.len() {
            bail!(
                span,
                "the index has {} but the tile shape has {}: a {what} names one tile-grid coordinate per tensor dimension",
                count(index.len(), "coordinate"),
                count(shape.len(), "dimension")
            );
        }
        self.use_rank(t, index.len(), span)?;
        Ok((index, shape))
    }

    pub(super) fn load(&mut self, t: usize, args: &[Expr], pad: Option<&Expr>, span: Span) -> Result<Val> {
        let (index, shape) = self.tile_at(t, args, ("load", "x.load([i, j], [BM, BN])"), span)?;
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

    /// `w.prefetch([i, j], [BN, BK])`: the tile `load` would read, asked of
    /// L2 ahead of its loads.
    pub(super) fn prefetch(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        let (index, shape) = self.tile_at(t, args, ("prefetch", "w.prefetch([i, j], [BN, BK])"), span)?;
        self.push(
            OpKind::Prefetch {
                tensor: t,
                index,
                shape,
            },
            None,
            span,
        );
        Ok(Val::Unit)
    }

    pub(super) fn store(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "store", "y.store([i, j], tile)", span)?;
        let (p, dtype) = self.writable(t, "store", span)?;
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
        if let ast::ParamKind::Tensor { shape: Some(dims), .. } = &p.kind {
            for (axis, (d, &extent)) in dims.iter().zip(shape).enumerate() {
                let size = match d {
                    ast::Dim::Fixed(n) => Some(*n),
                    ast::Dim::Name(n) => self.const_value(n),
                    ast::Dim::Multiple(k, n) => self.const_value(n).map(|v| k * v),
                    ast::Dim::Any => None,
                };
                if let Some(size) = size.filter(|&n| extent > n) {
                    bail!(
                        args[1].span(),
                        "this tile is {extent} along axis {axis}, and `{}` is declared {size} there: all but {size} of them would fall outside it. A reduction's `[R, 1]` is a column; for a row, `.reshape([1, R])`",
                        p.name
                    );
                }
            }
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
