//! Methods on tiles: reductions, `cast`, `reshape`, `transpose`, `permute`,
//! `broadcast_to`, `expand_dims`, `get`, `shape`, ..

use super::*;

impl Checker<'_> {
    pub(super) fn method(
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
                "atomic_add" => self.atomic(t, args, AtomicOp::Add, span),
                "atomic_max" => self.atomic(t, args, AtomicOp::Max, span),
                "atomic_min" => self.atomic(t, args, AtomicOp::Min, span),
                "atomic_exch" => self.atomic(t, args, AtomicOp::Exch, span),
                "atomic_cas" => self.atomic(t, args, AtomicOp::Cas, span),
                "fetch_add" => self.fetch_add(t, args, span),
                "signal" => self.flag(t, args, true, span),
                "wait" => self.flag(t, args, false, span),
                "store" => self.store(t, args, span),
                "store_flagged" => self.store_flagged(t, args, span),
                "load_flagged" => self.load_flagged(t, args, span),
                "prefetch" => self.prefetch(t, args, span),
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
                    "unknown tensor method `{name}`: tensors have load, store, prefetch, gather, scatter, atomic_add, atomic_max, atomic_min, atomic_exch, atomic_cas, fetch_add, signal, wait, store_flagged, load_flagged, get and shape"
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
            "cumsum" | "cumprod" | "cummax" | "cummin" | "cumsum_rev" | "cumprod_rev" | "cummax_rev" | "cummin_rev" => {
                Self::arg_count(args, 1, &name, &format!("t.{name}(axis)"), span)?;
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let Some(shape) = ty.shape.clone() else {
                    bail!(span, "`.{name}(axis)` scans a tile, but this is a {ty} scalar");
                };
                let axis = self.axis(&args[0], shape.len())?;
                let (base, reverse) = match name.strip_suffix("_rev") {
                    Some(base) => (base, true),
                    None => (name.as_str(), false),
                };
                let op = match base {
                    "cumsum" => ScanOp::Sum,
                    "cumprod" => ScanOp::Prod,
                    "cummax" => ScanOp::Max,
                    _ => ScanOp::Min,
                };
                if ty.dtype == DType::Bool {
                    bail!(span, "scans take numbers, not bools: cast first");
                }
                if op == ScanOp::Prod && !ty.dtype.is_float() {
                    bail!(
                        span,
                        "`cumprod` takes floats: integer products overflow after a few steps; cast to f32 first"
                    );
                }
                Ok(Val::Value(self.push(
                    OpKind::Scan {
                        op,
                        arg: id,
                        axis,
                        reverse,
                    },
                    Some(ty),
                    span,
                )))
            }
            "sort" | "sort_desc" | "argsort" | "argsort_desc" | "topk" | "argtopk" => {
                let top = name.ends_with("topk");
                if top {
                    Self::arg_count(args, 2, &name, &format!("t.{name}(axis, k)"), span)?;
                } else {
                    Self::arg_count(args, 1, &name, &format!("t.{name}(axis)"), span)?;
                }
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let Some(shape) = ty.shape.clone() else {
                    bail!(span, "`.{name}` sorts a tile, but this is a {ty} scalar");
                };
                let axis = self.axis(&args[0], shape.len())?;
                if ty.dtype == DType::Bool {
                    bail!(span, "sorts take numbers, not bools: cast first");
                }
                let keep = if top {
                    let k = self.const_int(&args[1], "`k`, how many elements `topk` keeps")?;
                    let n = shape[axis];
                    if k < 1 || k as usize > n || !(k as usize).is_power_of_two() {
                        bail!(
                            args[1].span(),
                            "`{name}` keeps a power of two from 1 to the axis's {n} elements, not {k}: for another count, take the next power of two and mask the rest (`arange(K) < k`)"
                        );
                    }
                    k as usize
                } else {
                    shape[axis]
                };
                let indices = name.starts_with("arg");
                let mut rshape = shape;
                rshape[axis] = keep;
                let rty = Ty::tile(if indices { DType::I32 } else { ty.dtype }, rshape);
                Ok(Val::Value(self.push(
                    OpKind::Sort {
                        arg: id,
                        axis,
                        descending: top || name.ends_with("_desc"),
                        indices,
                        keep,
                    },
                    Some(rty),
                    span,
                )))
            }
            "cluster_gather" => {
                Self::arg_count(args, 1, &name, "t.cluster_gather(BLOCKS)", span)?;
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let Some(shape) = ty.shape.clone() else {
                    bail!(span, "`.cluster_gather` gathers a tile, but this is a {ty} scalar");
                };
                if ty.dtype == DType::Bool {
                    bail!(span, "`.cluster_gather` takes numbers, not bools: cast to i32 first");
                }
                let blocks = self.const_int(&args[0], "`cluster_gather`'s block count")?;
                if !(1..=MAX_CLUSTER_BLOCKS as i64).contains(&blocks) || !(blocks as usize).is_power_of_two() {
                    bail!(
                        args[0].span(),
                        "a cluster is 1, 2, 4 or {MAX_CLUSTER_BLOCKS} blocks (as many as every GPU from sm_90 runs together), not {blocks}"
                    );
                }
                let blocks = blocks as usize;
                if self.blocks.len() > 1 {
                    bail!(
                        span,
                        "`.cluster_gather` meets the cluster's other blocks, so every block must reach it exactly once: call it at the top level of the kernel, not inside `for` or `if`"
                    );
                }
                match self.cluster {
                    Some(first) if first != blocks => bail!(
                        args[0].span(),
                        "every `cluster_gather` of a kernel names the same cluster: an earlier one names {first} blocks, this one {blocks}"
                    ),
                    _ => self.cluster = Some(blocks),
                }
                if blocks == 1 {
                    return Ok(Val::Value(id));
                }
                let mut rshape = shape;
                rshape[0] *= blocks;
                Ok(Val::Value(self.push(
                    OpKind::ClusterGather { arg: id, blocks },
                    Some(Ty::tile(ty.dtype, rshape)),
                    span,
                )))
            }
            "bitcast" => {
                let Some(to) = self.generic_dtype(generics, "bitcast", span)? else {
                    bail!(span, "name the target type: `.bitcast::<u32>()`");
                };
                Self::arg_count(args, 0, "bitcast", "t.bitcast::<u32>()", span)?;
                let id = self.concrete(rv, None, recv.span())?;
                let ty = self.ty(id).clone();
                let word = [DType::F32, DType::I32, DType::U32];
                if !(word.contains(&ty.dtype) && word.contains(&to)) {
                    bail!(
                        span,
                        "`.bitcast::<{to}>()` reads {ty}'s bits as {to}: it converts among f32, i32 and u32, 32 bits each (cast a half type to f32 first)"
                    );
                }
                if ty.dtype == to {
                    return Ok(Val::Value(id));
                }
                let rty = Ty {
                    dtype: to,
                    shape: ty.shape,
                };
                Ok(Val::Value(self.push(
                    OpKind::Unary(UnaryOp::Bitcast, id),
                    Some(rty),
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
            "load" | "store" | "prefetch" | "gather" | "scatter" | "atomic_add" | "atomic_max" | "atomic_min"
            | "atomic_exch" | "atomic_cas" | "fetch_add" | "signal" | "wait" | "get" | "shape" => {
                bail!(
                    recv.span(),
                    "`.{name}` is a tensor method, but this is a tile or scalar"
                )
            }
            _ => bail!(
                method.span(),
                "unknown method `{name}`: tiles have sum, max, min, argmax, argmin, cumsum, cumprod, cummax, cummin (and their `_rev` forms), sort, argsort (and their `_desc` forms), topk, argtopk, cast, bitcast, reshape, expand_dims, broadcast_to, transpose and permute"
            ),
        }
    }
}
