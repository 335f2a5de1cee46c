//! The DSL's functions: math (`exp`, `max`, ..), tile constructors (`zeros`,
//! `full`, `arange`), `block_id`, `cdiv`, `group_tiles` and `mma`.

use super::*;

impl Checker<'_> {
    pub(super) fn call(
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
            "gelu" => Some(UnaryOp::Gelu),
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
                if let Some(w) = want
                    && w != ty.dtype
                {
                    bail!(span, "the fill value is {} but the tile is {w}", ty.dtype);
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
                if let Val::Value(id) = q
                    && !self.ty(id).dtype.is_int()
                {
                    bail!(span, "`cdiv` divides integers");
                }
                Ok(q)
            }
            n if THREAD_LEVEL.contains(&n) => bail!(
                func.span(),
                "`{n}` is a thread-level construct, and tile kernels never name threads, lanes, warps, barriers or shared memory: write block-level tile operations (load, arithmetic, sum, store) and the compiler maps them onto threads and inserts the synchronization"
            ),
            n if n.starts_with("atomic") => bail!(
                func.span(),
                "atomics are tensor methods: `y.atomic_add([rows, cols], values)` adds a tile's elements where the index tiles say, `n.fetch_add([i], v)` adds one scalar for the block and gives the value before"
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
                "unknown DSL function `{name}`: a kernel can call only DSL operations (block_id, num_blocks, arange, full, zeros, exp, exp2, log, log2, sqrt, rsqrt, tanh, erf, gelu, abs, max, min, select, cdiv, mma) and methods on tensors and tiles"
            ),
        }
    }

    /// A DSL helper that returns several scalars: `group_tiles(block, tiles_m, tiles_n, group)`.
    pub(super) fn several(&mut self, e: &Expr) -> Result<Vec<ValueId>> {
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
    pub(super) fn group_tiles(&mut self, args: &[Expr], span: Span) -> Result<Vec<ValueId>> {
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
    pub(super) fn mma(&mut self, a: ValueId, b: ValueId, acc: ValueId, spans: [Span; 3], span: Span) -> Result<Val> {
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
}
