//! Tensor access: `load` and `store` of tiles at tile-grid indices, `gather`
//! and `scatter` by index tiles, flagged tiles between GPUs
//! (`store_flagged`, `load_flagged`), and the element type and rank rules.

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

    /// `y.scatter(index, values)`.
    pub(super) fn scatter(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "scatter", "y.scatter([rows, cols], values)", span)?;
        let (p, dtype) = self.writable(t, "scatter", span)?;
        let value = self.element_value(&args[1], dtype, &p.name)?;
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

    /// `y.atomic_add(index, values)` and the other tile atomics, with
    /// `atomic_cas`'s expected tile before the values and an optional
    /// `Ordering::..` last: the elements' old values, a tile.
    pub(super) fn atomic(&mut self, t: usize, args: &[Expr], op: AtomicOp, span: Span) -> Result<Val> {
        let (name, operands) = match op {
            AtomicOp::Add => ("atomic_add", 2),
            AtomicOp::Max => ("atomic_max", 2),
            AtomicOp::Min => ("atomic_min", 2),
            AtomicOp::Exch => ("atomic_exch", 2),
            AtomicOp::Cas => ("atomic_cas", 3),
        };
        let usage = if op == AtomicOp::Cas {
            format!("y.{name}([rows, cols], expected, values)")
        } else {
            format!("y.{name}([rows, cols], values)")
        };
        let order = match args.len() {
            n if n == operands => MemOrder::Relaxed,
            n if n == operands + 1 => Self::ordering(&args[operands])?,
            _ => bail!(
                span,
                "`{name}` takes {operands} arguments, and a memory ordering after them if asked, found {}: write `{usage}` or `{}, Ordering::Release)`",
                args.len(),
                usage.trim_end_matches(')')
            ),
        };
        let (p, dtype) = self.writable(t, name, span)?;
        let allowed = match op {
            AtomicOp::Add => dtype != DType::Bool,
            AtomicOp::Max | AtomicOp::Min => dtype.is_int(),
            AtomicOp::Exch | AtomicOp::Cas => dtype.bytes() == 4,
        };
        if !allowed {
            let rule = match op {
                AtomicOp::Add => "adds f32, f16, bf16, i32 or u32 elements",
                AtomicOp::Max | AtomicOp::Min => "takes i32 or u32 tensors: the GPU has no atomic max or min of floats",
                AtomicOp::Exch | AtomicOp::Cas => "swaps 32-bit elements (f32, i32, u32): the GPU has no 16-bit form",
            };
            bail!(span, "`{name}` {rule} (`{}` holds {dtype})", p.name);
        }
        let mut value = self.element_value(&args[operands - 1], dtype, &p.name)?;
        let compare = if op == AtomicOp::Cas {
            let c = self.element_value(&args[1], dtype, &p.name)?;
            if let (Some(a), Some(b)) = (self.ty(c).shape.clone(), self.ty(value).shape.clone()) {
                let joint = Self::broadcast_shapes(&a, &b, span)?;
                value = self.broadcast_to(value, &joint, span)?;
            } else if let Some(a) = self.ty(c).shape.clone() {
                value = self.broadcast_to(value, &a, span)?;
            }
            Some(c)
        } else {
            None
        };
        let (index, shape) = self.element_indices(&args[0], Some(value), name)?;
        self.use_rank(t, index.len(), span)?;
        let value = self.broadcast_to(value, &shape, span)?;
        let compare = compare.map(|c| self.broadcast_to(c, &shape, span)).transpose()?;
        Ok(Val::Value(self.push(
            OpKind::Atomic {
                tensor: t,
                index,
                value,
                compare,
                op,
                order,
            },
            Some(Ty::tile(dtype, shape)),
            span,
        )))
    }

    /// The tile or scalar a scatter or an atomic writes into a tensor of
    /// `dtype` named `name`.
    fn element_value(&mut self, e: &Expr, dtype: DType, name: &proc_macro2::Ident) -> Result<ValueId> {
        let v = self.expr(e)?;
        let value = self.concrete(v, Some(dtype), e.span())?;
        if self.ty(value).dtype != dtype {
            bail!(
                e.span(),
                "the values are {} but `{name}` holds {dtype}: cast first, `v.cast::<{dtype}>()`",
                self.ty(value).dtype
            );
        }
        Ok(value)
    }

    /// A memory ordering, written as Rust's: `Ordering::Relaxed`,
    /// `Acquire`, `Release` or `AcqRel`.
    fn ordering(e: &Expr) -> Result<MemOrder> {
        let rule = "a tile atomic's memory ordering is `Ordering::Relaxed` (the default), `Ordering::Acquire`, `Ordering::Release` or `Ordering::AcqRel`";
        let Expr::Path(segs, span) = e else {
            bail!(e.span(), "{rule}");
        };
        let names: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
        if names.len() < 2 || names[names.len() - 2] != "Ordering" {
            bail!(*span, "{rule}");
        }
        Ok(match names[names.len() - 1].as_str() {
            "Relaxed" => MemOrder::Relaxed,
            "Acquire" => MemOrder::Acquire,
            "Release" => MemOrder::Release,
            "AcqRel" => MemOrder::AcqRel,
            "SeqCst" => bail!(
                *span,
                "`SeqCst` is not offered: a tile atomic orders the block's accesses around it with `Ordering::Acquire`, `Release` or `AcqRel`"
            ),
            _ => bail!(*span, "{rule}"),
        })
    }

    /// `n.fetch_add([i, j], v)`: the block adds the scalar `v` to one
    /// element of an integer tensor, once, and gets the element's value
    /// before, a block-uniform scalar.
    pub(super) fn fetch_add(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 2, "fetch_add", "n.fetch_add([i], 1)", span)?;
        let (p, dtype) = self.writable(t, "fetch_add", span)?;
        let name = p.name.to_string();
        let rules = ScalarRules {
            what: "fetch_add",
            works: "counts in i32 or u32 tensors",
            int_fix: "to add float tiles, use `atomic_add(indices, values)`",
            takes: "adds",
            scalar_fix: "to add each element of a tile, use `atomic_add(indices, values)`",
        };
        let (index, value) = self.element_scalar(t, (&name, dtype), args, &rules, span)?;
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

    /// `flags.signal([i], v)` (`signal`) or `flags.wait([i], v)`. A
    /// signal: the block, once, sets one element of an integer tensor to
    /// the scalar `v`, after everything it stored before (a release at
    /// system scope: other GPUs and the host see those stores first). A
    /// wait: the block waits until the element has reached `v`, then sees
    /// what the block or GPU that signalled it stored before (an acquire
    /// at system scope).
    pub(super) fn flag(&mut self, t: usize, args: &[Expr], signal: bool, span: Span) -> Result<Val> {
        let what = if signal { "signal" } else { "wait" };
        Self::arg_count(args, 2, what, &format!("flags.{what}([i], v)"), span)?;
        let (p, dtype) = match signal {
            true => self.writable(t, what, span)?,
            false => {
                let (p, dtype, _) = self.tensor_param(t);
                (p, dtype)
            }
        };
        let name = p.name.to_string();
        let (index, value) = self.element_scalar(t, (&name, dtype), args, &flag_rules(what), span)?;
        let tensor = t;
        let op = match signal {
            true => OpKind::Signal { tensor, index, value },
            false => OpKind::Wait { tensor, index, value },
        };
        self.push(op, None, span);
        Ok(Val::Unit)
    }

    /// The element index and the block-uniform scalar of a one-element
    /// operation (`fetch_add`, `signal`, `wait`) on tensor `t` (`name` of
    /// `dtype`): an i32 or u32 tensor and a scalar of its type, or the
    /// error `rules` word.
    fn element_scalar(
        &mut self,
        t: usize,
        (name, dtype): (&str, DType),
        args: &[Expr],
        rules: &ScalarRules,
        span: Span,
    ) -> Result<(Vec<ValueId>, ValueId)> {
        let ScalarRules {
            what,
            works,
            int_fix,
            takes,
            scalar_fix,
        } = rules;
        if !dtype.is_int() {
            bail!(span, "`{what}` {works}, and `{name}` holds {dtype}: {int_fix}");
        }
        let index = self.index(&args[0])?;
        self.use_rank(t, index.len(), span)?;
        let v = self.expr(&args[1])?;
        let value = self.concrete(v, Some(dtype), args[1].span())?;
        let ty = self.ty(value).clone();
        if ty.shape.is_some() {
            bail!(
                args[1].span(),
                "`{what}` {takes} one block-uniform scalar, not a {ty}: {scalar_fix}"
            );
        }
        if ty.dtype != dtype {
            bail!(
                args[1].span(),
                "the value is {} but `{name}` holds {dtype}: cast first, `v.cast::<{dtype}>()`",
                ty.dtype
            );
        }
        Ok((index, value))
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
        let (id, shape) = self.stored_tile(&args[1], (&p.name, dtype), index.len(), "store")?;
        if let ast::ParamKind::Tensor { shape: Some(dims), .. } = &p.kind {
            for (axis, (d, &extent)) in dims.iter().zip(&shape).enumerate() {
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

    /// The tile `e` that `what` (`store`, `store_flagged`) writes into
    /// tensor `name` of `dtype` at an index of `rank` coordinates, and its
    /// shape: a tile of that dtype and rank.
    fn stored_tile(
        &mut self,
        e: &Expr,
        (name, dtype): (&proc_macro2::Ident, DType),
        rank: usize,
        what: &str,
    ) -> Result<(ValueId, Vec<usize>)> {
        let v = self.expr(e)?;
        let id = self.concrete(v, Some(dtype), e.span())?;
        let ty = self.ty(id).clone();
        let Some(shape) = ty.shape else {
            bail!(
                e.span(),
                "`{what}` writes a tile; make one from a scalar with `full([1], x)`"
            );
        };
        if ty.dtype != dtype {
            bail!(
                e.span(),
                "the tile is {} but `{name}` holds {dtype}: cast before storing, `t.cast::<{dtype}>()`",
                ty.dtype
            );
        }
        if shape.len() != rank {
            bail!(
                e.span(),
                "the tile has rank {} but the index has {}: a stored tile has the tensor's rank (reshape it with `.reshape([..])`)",
                shape.len(),
                count(rank, "coordinate")
            );
        }
        Ok((id, shape))
    }

    /// `peer.store_flagged([i, j], tile, flag)`: the tile into a flagged
    /// tensor, each 4 bytes of it beside the u32 `flag` (NCCL's
    /// low-latency protocol), for a reader polling with `load_flagged`.
    pub(super) fn store_flagged(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        Self::arg_count(args, 3, "store_flagged", "y.store_flagged([i, j], tile, flag)", span)?;
        let (p, dtype) = self.writable(t, "store_flagged", span)?;
        let index = self.index(&args[0])?;
        self.use_rank(t, index.len(), span)?;
        let (value, shape) = self.stored_tile(&args[1], (&p.name, dtype), index.len(), "store_flagged")?;
        Self::flagged_words(dtype, &shape, args[1].span())?;
        let flag = self.flag_value(&args[2])?;
        self.push(
            OpKind::StoreFlagged {
                tensor: t,
                index,
                value,
                flag,
            },
            None,
            span,
        );
        Ok(Val::Unit)
    }

    /// `inbox.load_flagged([i, j], [BM, BN], flag)`: the tile a
    /// `store_flagged` of `flag` wrote, polled for until it has arrived.
    pub(super) fn load_flagged(&mut self, t: usize, args: &[Expr], span: Span) -> Result<Val> {
        let example = "x.load_flagged([i, j], [BM, BN], flag)";
        Self::arg_count(args, 3, "load_flagged", example, span)?;
        let (index, shape) = self.tile_at(t, &args[..2], ("load_flagged", example), span)?;
        let (_, dtype, _) = self.tensor_param(t);
        Self::flagged_words(dtype, &shape, args[1].span())?;
        let flag = self.flag_value(&args[2])?;
        Ok(Val::Value(self.push(
            OpKind::LoadFlagged { tensor: t, index, flag },
            Some(Ty::tile(dtype, shape)),
            span,
        )))
    }

    /// A flagged tensor's data sits in 4-byte words beside the flags: a
    /// tile's rows hold at least a word.
    fn flagged_words(dtype: DType, shape: &[usize], span: Span) -> Result<()> {
        let extent = shape.last().copied().unwrap_or(1);
        if extent * dtype.bytes() < 4 {
            bail!(
                span,
                "a flagged tile's rows are whole 4-byte words, each beside its flag: {} along the last axis is {} bytes; take at least {} there",
                count(extent, &format!("{dtype} element")),
                extent * dtype.bytes(),
                4 / dtype.bytes()
            );
        }
        Ok(())
    }

    /// The flag of `store_flagged` or `load_flagged`: a block-uniform u32.
    fn flag_value(&mut self, e: &Expr) -> Result<ValueId> {
        let v = self.expr(e)?;
        let flag = self.concrete(v, Some(DType::U32), e.span())?;
        let ty = self.ty(flag).clone();
        if ty.shape.is_some() {
            bail!(
                e.span(),
                "the flag is one block-uniform u32 scalar (a round that counts up), not a {ty}: every element of a flagged tile carries the same flag"
            );
        }
        if ty.dtype != DType::U32 {
            bail!(
                e.span(),
                "the flag is a u32 (a round that counts up), not {}: cast first, `round.cast::<u32>()`",
                ty.dtype
            );
        }
        Ok(flag)
    }
}

/// How the errors of a one-element operation (`Checker::element_scalar`)
/// word its rules: "`{what}` {works}, and `x` holds f32: {int_fix}", and
/// "`{what}` {takes} one block-uniform scalar, not a tile ..: {scalar_fix}".
struct ScalarRules {
    what: &'static str,
    works: &'static str,
    int_fix: &'static str,
    takes: &'static str,
    scalar_fix: &'static str,
}

/// The rules of `signal` and `wait`.
fn flag_rules(what: &'static str) -> ScalarRules {
    ScalarRules {
        what,
        works: "works on u32 or i32 flags",
        int_fix: "declare the flags `&mut Tensor<u32, { [F] }>`",
        takes: "takes",
        scalar_fix: "a block signals or waits for one flag at a time",
    }
}
