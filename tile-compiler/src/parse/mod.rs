//! Front end: reads the attribute and the `fn` item with `syn` and builds the
//! spanned [`ast`](crate::ast). Rust that the DSL does not accept is rejected
//! here with a message that names the rule and what to write instead.

use crate::ast::*;
use crate::dtype::DType;
use crate::error::{Error, Result, bail};
use proc_macro2::{Ident, TokenStream};
use syn::Expr as SynExpr;
use syn::spanned::Spanned;

mod attr;
mod shape;
use attr::{Attr, HostNames, host_size, parse_attr, resolve_config};

/// Parses `#[tile::kernel(ATTR)]` and its `fn` item into a [`Kernel`].
pub fn parse_kernel(attr: TokenStream, item: TokenStream) -> Result<Kernel> {
    let func: syn::ItemFn =
        syn::parse2(item).map_err(|e| Error::new(e.span(), format!("#[tile::kernel] goes on a `fn` item: {e}")))?;
    let Attr {
        lists,
        num_warps,
        num_stages,
        configs: raw_configs,
        key,
        grid,
    } = parse_attr(attr)?;
    let sig = &func.sig;
    if let Some(a) = &sig.asyncness {
        bail!(a.span(), "a tile kernel can't be `async`");
    }
    if let Some(u) = &sig.unsafety {
        bail!(
            u.span(),
            "a tile kernel can't be `unsafe`: the compiler checks every memory access"
        );
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        bail!(
            ty.span(),
            "a tile kernel returns nothing: write results into a `&mut Tensor` with `.store(..)`"
        );
    }
    if let Some(w) = &sig.generics.where_clause {
        bail!(w.span(), "a tile kernel takes no `where` clause");
    }

    let mut consts = Vec::new();
    let mut types = Vec::new();
    for gp in &sig.generics.params {
        match gp {
            syn::GenericParam::Const(c) => {
                let ty_ok = matches!(&c.ty, syn::Type::Path(p) if p.path.is_ident("usize"));
                if !ty_ok {
                    bail!(
                        c.ty.span(),
                        "const parameters of a kernel are `usize`: write `const {}: usize`",
                        c.ident
                    );
                }
                let listed = lists.iter().find(|(n, _)| *n == c.ident);
                if !raw_configs.is_empty() {
                    if let Some((name, _)) = listed {
                        bail!(
                            name.span(),
                            "`{name}` takes its values from `configs`: list them there, not here"
                        );
                    }
                    consts.push(ConstParam {
                        name: c.ident.clone(),
                        values: Vec::new(),
                    });
                    continue;
                }
                let Some((_, items)) = listed else {
                    bail!(
                        c.ident.span(),
                        "const parameter `{0}` has no specialization list: list the values to build in the attribute, e.g. #[tile::kernel({0} = [64, 128])], or give `configs = [({0} = 64, ..), ..]`",
                        c.ident
                    );
                };
                let mut values = Vec::new();
                for e in items {
                    let v = int_lit(e).map_err(|_| {
                        Error::new(
                            e.span(),
                            format!(
                                "`{}` is a const parameter: list integers, e.g. `{} = [64, 128]`",
                                c.ident, c.ident
                            ),
                        )
                    })?;
                    if v < 0 {
                        bail!(e.span(), "`{}` is a usize: {v} is not a valid value", c.ident);
                    }
                    values.push(v);
                }
                consts.push(ConstParam {
                    name: c.ident.clone(),
                    values,
                });
            }
            syn::GenericParam::Type(t) => {
                if let Some(d) = &t.default {
                    bail!(
                        d.span(),
                        "type parameters of a kernel take no default: list their types in the attribute"
                    );
                }
                let Some((_, items)) = lists.iter().find(|(n, _)| *n == t.ident) else {
                    bail!(
                        t.ident.span(),
                        "type parameter `{0}` has no specialization list: list the element types to build in the attribute, e.g. #[tile::kernel({0} = [f32, bf16])]",
                        t.ident
                    );
                };
                let mut dtypes = Vec::new();
                for e in items {
                    let d = match e {
                        SynExpr::Path(p) => p.path.get_ident().and_then(|i| DType::from_name(&i.to_string())),
                        _ => None,
                    };
                    match d {
                        Some(d) if d != DType::Bool => dtypes.push(d),
                        _ => bail!(
                            e.span(),
                            "`{}` is a type parameter: list element types (f32, f16, bf16, i32, u32)",
                            t.ident
                        ),
                    }
                }
                types.push(TypeParam {
                    name: t.ident.clone(),
                    dtypes,
                });
            }
            syn::GenericParam::Lifetime(l) => bail!(l.span(), "a tile kernel takes no lifetime parameters"),
        }
    }
    for (name, _) in &lists {
        if !consts.iter().any(|c| c.name == *name) && !types.iter().any(|t| t.name == *name) {
            bail!(
                name.span(),
                "`{name}` is not a generic parameter of this kernel: add `const {name}: usize` (or a type parameter `{name}`) to its generics"
            );
        }
    }

    let configs = configs(&raw_configs, &types, &mut consts)?;

    let mut params = Vec::new();
    for input in &sig.inputs {
        let syn::FnArg::Typed(pt) = input else {
            bail!(input.span(), "a tile kernel is a free function: it takes no `self`");
        };
        let syn::Pat::Ident(pi) = &*pt.pat else {
            bail!(pt.pat.span(), "kernel parameters are plain names (`x: &Tensor<f32>`)");
        };
        if let Some(m) = &pi.mutability {
            bail!(
                m.span(),
                "kernel parameters can't be `mut`: rebind with `let mut` in the body"
            );
        }
        let kind = param_kind(&pt.ty, &types)?;
        if params.iter().any(|p: &Param| p.name == pi.ident) {
            bail!(pi.ident.span(), "parameter `{}` is declared twice", pi.ident);
        }
        params.push(Param {
            name: pi.ident.clone(),
            kind,
        });
    }

    shape::check_names(&params, &consts)?;

    let const_names: Vec<Ident> = consts.iter().map(|c| c.name.clone()).collect();
    let tuning = match (grid, key) {
        (None, None) => None,
        (None, Some(key)) => bail!(
            key.first().map_or(sig.ident.span(), |k| k.span()),
            "a tuning `key` goes with the `grid` the generated `run` launches: add `grid = ..`"
        ),
        (Some(grid), key) => Some(tuning(&grid, &key.unwrap_or_default(), &const_names, &params)?),
    };
    let body = parse_block(&func.block)?;
    Ok(Kernel {
        name: sig.ident.clone(),
        vis: func.vis.clone(),
        attrs: func.attrs.clone(),
        types,
        consts,
        params,
        body,
        num_warps,
        num_stages,
        configs,
        tuning,
    })
}

/// The tuning of `grid = ..` and `key = [..]`: one size per grid axis (at
/// most three) and per key entry.
fn tuning(grid: &SynExpr, key: &[SynExpr], consts: &[Ident], params: &[Param]) -> Result<Tuning> {
    let axes: Vec<&SynExpr> = match grid {
        SynExpr::Tuple(t) => t.elems.iter().collect(),
        other => vec![other],
    };
    if axes.len() > 3 {
        bail!(grid.span(), "a grid has at most three axes: `grid = (x, y, z)`");
    }
    let mut dims = Vec::new();
    let mut sizes = |exprs: Vec<&SynExpr>, names: HostNames| -> Result<Vec<tile_spec::Size>> {
        exprs
            .into_iter()
            .map(|e| {
                let mut ops = Vec::new();
                host_size(e, &names, &mut ops, &mut dims)?;
                Ok(tile_spec::Size(ops.into()))
            })
            .collect()
    };
    let grid = sizes(
        axes,
        HostNames {
            consts,
            key: false,
            params,
        },
    )?;
    let key = sizes(
        key.iter().collect(),
        HostNames {
            consts,
            key: true,
            params,
        },
    )?;
    Ok(Tuning {
        sizes: tile_spec::Tuning {
            key: key.into(),
            grid: grid.into(),
        },
        dims,
    })
}

/// The configurations, resolved: each names every const parameter, and
/// each listed element type is built with at least one. Fills the const
/// parameters' values (each distinct value, in order of appearance).
fn configs(raw: &[attr::RawConfig], types: &[TypeParam], consts: &mut [ConstParam]) -> Result<Vec<Config>> {
    let names: Vec<Ident> = consts.iter().map(|c| c.name.clone()).collect();
    let mut out: Vec<Config> = Vec::new();
    for r in raw {
        let config = resolve_config(r, types, &names)?;
        let same = |c: &Config| c.consts == config.consts && c.types == config.types;
        if out.iter().any(same) {
            bail!(r.0, "this configuration is given twice");
        }
        out.push(config);
    }
    for config in &out {
        for (c, &v) in consts.iter_mut().zip(&config.consts) {
            if !c.values.contains(&v) {
                c.values.push(v);
            }
        }
    }
    for (i, t) in types.iter().enumerate() {
        if let Some(d) = t
            .dtypes
            .iter()
            .find(|d| !out.is_empty() && !out.iter().any(|c| c.types[i].is_empty() || c.types[i].contains(d)))
        {
            bail!(
                t.name.span(),
                "no configuration builds `{} = {d}`: name it in one, or drop it from the list",
                t.name
            );
        }
    }
    Ok(out)
}

pub(super) fn int_lit(e: &SynExpr) -> Result<i64> {
    if let SynExpr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(i), ..
    }) = e
    {
        return i.base10_parse::<i64>().map_err(Error::from);
    }
    bail!(e.span(), "expected an integer literal")
}

fn param_kind(ty: &syn::Type, types: &[TypeParam]) -> Result<ParamKind> {
    match ty {
        syn::Type::Reference(r) => {
            if let Some(l) = &r.lifetime {
                bail!(l.span(), "kernel parameters take no lifetimes");
            }
            let syn::Type::Path(p) = &*r.elem else {
                bail!(r.elem.span(), "expected `Tensor<T>` behind the reference");
            };
            let last = p.path.segments.last().expect("a path has a segment");
            if last.ident != "Tensor" {
                bail!(
                    last.ident.span(),
                    "references in a kernel signature are tensors: write `&Tensor<f32>` (read) or `&mut Tensor<f32>` (written)"
                );
            }
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                bail!(last.span(), "name the element type: `Tensor<f32>`");
            };
            let (elem, shape) = match args.args.iter().collect::<Vec<_>>()[..] {
                [syn::GenericArgument::Type(elem)] => (elem, None),
                [syn::GenericArgument::Type(elem), syn::GenericArgument::Const(shape)] => {
                    (elem, Some(shape::declared(shape, types)?))
                }
                _ => bail!(
                    args.span(),
                    "`Tensor` takes an element type and optionally its shape: `Tensor<f32>`, `Tensor<T, {{ [M, N] }}>`"
                ),
            };
            let generic = match elem {
                syn::Type::Path(p) => p
                    .path
                    .get_ident()
                    .filter(|i| types.iter().any(|t| t.name == **i))
                    .map(|i| i.to_string()),
                _ => None,
            };
            let elem = match generic {
                Some(name) => Elem::Param(name),
                None => {
                    let dtype = type_dtype(elem)?;
                    if dtype == DType::Bool {
                        bail!(elem.span(), "tensors hold f32, f16, bf16, i32 or u32, not bool");
                    }
                    Elem::Fixed(dtype)
                }
            };
            Ok(ParamKind::Tensor {
                elem,
                mutable: r.mutability.is_some(),
                shape,
            })
        }
        syn::Type::Path(_) => match type_dtype(ty) {
            Ok(d @ (DType::F32 | DType::I32 | DType::U32)) => Ok(ParamKind::Scalar(d)),
            _ => bail!(ty.span(), "scalar parameters are f32, i32 or u32"),
        },
        _ => bail!(
            ty.span(),
            "a kernel parameter is a tensor (`&Tensor<f32>`, `&mut Tensor<f32>`) or a scalar (f32, i32, u32)"
        ),
    }
}

/// The element type named by a Rust type (`f32`, `half::bf16`, ...).
pub fn type_dtype(ty: &syn::Type) -> Result<DType> {
    if let syn::Type::Path(p) = ty
        && p.qself.is_none()
        && let Some(last) = p.path.segments.last()
        && let Some(d) = DType::from_name(&last.ident.to_string())
    {
        return Ok(d);
    }
    bail!(ty.span(), "unknown element type: expected f32, f16, bf16, i32 or u32")
}

fn parse_block(block: &syn::Block) -> Result<Vec<Stmt>> {
    let mut out = Vec::new();
    for s in &block.stmts {
        parse_stmt(s, &mut out)?;
    }
    Ok(out)
}

fn parse_stmt(s: &syn::Stmt, out: &mut Vec<Stmt>) -> Result<()> {
    match s {
        syn::Stmt::Local(local) => {
            if let syn::Pat::Slice(ps) = &local.pat {
                let names = ps
                    .elems
                    .iter()
                    .map(|p| match p {
                        syn::Pat::Ident(pi) if pi.mutability.is_none() && pi.by_ref.is_none() => Ok(pi.ident.clone()),
                        other => bail!(other.span(), "destructure into plain names: `let [m, n] = ..`"),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let Some(init) = &local.init else {
                    bail!(local.span(), "a `let` needs a value");
                };
                out.push(Stmt::LetArray {
                    names,
                    init: parse_expr(&init.expr)?,
                });
                return Ok(());
            }
            let (name, mutable, ann) = match &local.pat {
                syn::Pat::Ident(pi) => (pi.ident.clone(), pi.mutability.is_some(), None),
                syn::Pat::Type(pt) => {
                    let syn::Pat::Ident(pi) = &*pt.pat else {
                        bail!(pt.pat.span(), "bind one name per `let`");
                    };
                    (pi.ident.clone(), pi.mutability.is_some(), Some((*pt.ty).clone()))
                }
                syn::Pat::Tuple(t) => bail!(
                    t.span(),
                    "tuples are not part of the DSL: bind one name per `let` (helpers that return several scalars destructure as `let [m, n] = ..`)"
                ),
                p => bail!(p.span(), "bind one name per `let`"),
            };
            if let Some(pi) = match &local.pat {
                syn::Pat::Ident(pi) => Some(pi),
                _ => None,
            } && let Some(r) = &pi.by_ref
            {
                bail!(
                    r.span(),
                    "references into tiles don't exist: tiles are values; bind them by name"
                );
            }
            let Some(init) = &local.init else {
                bail!(
                    local.span(),
                    "a `let` needs a value: tiles are immutable values, so declare them where they are computed"
                );
            };
            if let Some((else_tok, _)) = &init.diverge {
                bail!(else_tok.span(), "`let .. else` is not part of the DSL");
            }
            out.push(Stmt::Let {
                name,
                mutable,
                ann,
                init: parse_expr(&init.expr)?,
            });
            Ok(())
        }
        syn::Stmt::Item(item) => bail!(
            item.span(),
            "items (fn, struct, static, use ...) can't be declared inside a kernel: put them outside; a kernel body holds statements only"
        ),
        syn::Stmt::Macro(m) => bail!(
            m.span(),
            "macros can't be used inside a kernel: the kernel body is read by #[tile::kernel], not compiled as Rust"
        ),
        syn::Stmt::Expr(e, _) => parse_expr_stmt(e, out),
    }
}

fn parse_expr_stmt(e: &SynExpr, out: &mut Vec<Stmt>) -> Result<()> {
    match e {
        SynExpr::Assign(a) => {
            let name = assign_target(&a.left)?;
            out.push(Stmt::Assign {
                name,
                value: parse_expr(&a.right)?,
                span: a.span(),
            });
        }
        SynExpr::Binary(b) if compound_op(&b.op).is_some() => {
            let name = assign_target(&b.left)?;
            let op = compound_op(&b.op).expect("checked");
            let value = Expr::Binary(
                op,
                Box::new(Expr::Var(name.clone())),
                Box::new(parse_expr(&b.right)?),
                b.span(),
            );
            out.push(Stmt::Assign {
                name,
                value,
                span: b.span(),
            });
        }
        SynExpr::ForLoop(f) => {
            if let Some(l) = &f.label {
                bail!(l.span(), "loop labels are not part of the DSL");
            }
            let var = match &*f.pat {
                syn::Pat::Ident(pi) if pi.mutability.is_none() => Some(pi.ident.clone()),
                syn::Pat::Wild(_) => None,
                p => bail!(p.span(), "the loop variable is a plain name: `for i in lo..hi`"),
            };
            let SynExpr::Range(r) = &*f.expr else {
                bail!(
                    f.expr.span(),
                    "`for` loops run over a range of block-uniform integers: `for i in lo..hi`"
                );
            };
            if matches!(r.limits, syn::RangeLimits::Closed(_)) {
                bail!(
                    r.span(),
                    "write the range half-open: `lo..hi` (use `lo..hi + 1` for an inclusive end)"
                );
            }
            let (Some(lo), Some(hi)) = (&r.start, &r.end) else {
                bail!(r.span(), "a loop range needs both ends: `lo..hi`");
            };
            out.push(Stmt::For {
                var,
                lo: parse_expr(lo)?,
                hi: parse_expr(hi)?,
                body: parse_block(&f.body)?,
                span: f.for_token.span(),
            });
        }
        SynExpr::If(i) => out.push(parse_if(i)?),
        SynExpr::While(w) => bail!(
            w.while_token.span(),
            "`while` loops are not part of the DSL: loop over a range whose bound is computed first (`for i in 0..n`)"
        ),
        SynExpr::Loop(l) => bail!(
            l.loop_token.span(),
            "`loop` is not part of the DSL: loop over a range (`for i in 0..n`)"
        ),
        SynExpr::Block(b) => {
            // A nested block: flatten it; its names are scoped like Rust's by `check`.
            bail!(
                b.span(),
                "nested blocks are not part of the DSL: write the statements directly"
            )
        }
        other => out.push(Stmt::Expr(parse_expr(other)?)),
    }
    Ok(())
}

fn parse_if(i: &syn::ExprIf) -> Result<Stmt> {
    if let SynExpr::Let(l) = &*i.cond {
        bail!(
            l.span(),
            "`if let` is not part of the DSL: conditions are block-uniform booleans"
        );
    }
    let cond = parse_expr(&i.cond)?;
    let then = parse_block(&i.then_branch)?;
    let els = match &i.else_branch {
        None => Vec::new(),
        Some((_, e)) => match &**e {
            SynExpr::Block(b) => parse_block(&b.block)?,
            SynExpr::If(inner) => vec![parse_if(inner)?],
            other => bail!(other.span(), "expected a block after `else`"),
        },
    };
    Ok(Stmt::If {
        cond,
        then,
        els,
        span: i.if_token.span(),
    })
}

fn assign_target(e: &SynExpr) -> Result<proc_macro2::Ident> {
    match e {
        SynExpr::Path(p) if p.path.get_ident().is_some() && p.qself.is_none() => {
            Ok(p.path.get_ident().expect("checked").clone())
        }
        SynExpr::Index(ix) => bail!(
            ix.span(),
            "tiles are immutable values: elements can't be assigned; build a new tile (e.g. with `select(mask, new, old)`)"
        ),
        other => bail!(other.span(), "only a `let mut` name can be assigned"),
    }
}

fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::AddAssign(_) => BinOp::Add,
        syn::BinOp::SubAssign(_) => BinOp::Sub,
        syn::BinOp::MulAssign(_) => BinOp::Mul,
        syn::BinOp::DivAssign(_) => BinOp::Div,
        syn::BinOp::RemAssign(_) => BinOp::Rem,
        syn::BinOp::BitAndAssign(_) => BinOp::BitAnd,
        syn::BinOp::BitOrAssign(_) => BinOp::BitOr,
        syn::BinOp::BitXorAssign(_) => BinOp::BitXor,
        syn::BinOp::ShlAssign(_) => BinOp::Shl,
        syn::BinOp::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}

fn bin_op(op: &syn::BinOp) -> Result<BinOp> {
    Ok(match op {
        syn::BinOp::Add(_) => BinOp::Add,
        syn::BinOp::Sub(_) => BinOp::Sub,
        syn::BinOp::Mul(_) => BinOp::Mul,
        syn::BinOp::Div(_) => BinOp::Div,
        syn::BinOp::Rem(_) => BinOp::Rem,
        syn::BinOp::And(_) => BinOp::And,
        syn::BinOp::Or(_) => BinOp::Or,
        syn::BinOp::BitAnd(_) => BinOp::BitAnd,
        syn::BinOp::BitOr(_) => BinOp::BitOr,
        syn::BinOp::BitXor(_) => BinOp::BitXor,
        syn::BinOp::Shl(_) => BinOp::Shl,
        syn::BinOp::Shr(_) => BinOp::Shr,
        syn::BinOp::Eq(_) => BinOp::Eq,
        syn::BinOp::Ne(_) => BinOp::Ne,
        syn::BinOp::Lt(_) => BinOp::Lt,
        syn::BinOp::Le(_) => BinOp::Le,
        syn::BinOp::Gt(_) => BinOp::Gt,
        syn::BinOp::Ge(_) => BinOp::Ge,
        other => bail!(
            other.span(),
            "compound assignment is a statement: write `x += y;` on its own line"
        ),
    })
}

fn generic_args(args: Option<&syn::AngleBracketedGenericArguments>) -> Vec<syn::GenericArgument> {
    args.map(|a| a.args.iter().cloned().collect()).unwrap_or_default()
}

fn parse_expr(e: &SynExpr) -> Result<Expr> {
    let span = e.span();
    Ok(match e {
        SynExpr::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => {
                let suffix = i.suffix();
                let dtype = if suffix.is_empty() {
                    None
                } else {
                    match DType::from_name(suffix) {
                        Some(d @ (DType::I32 | DType::U32)) => Some(d),
                        Some(DType::F32) => {
                            return Ok(Expr::Float(i.base10_parse::<i64>()? as f64, Some(DType::F32), span));
                        }
                        _ => bail!(
                            span,
                            "integer literals in a kernel are i32 or u32 (suffix `{suffix}` is not supported)"
                        ),
                    }
                };
                let v: i64 = i.base10_parse()?;
                Expr::Int(v, dtype, span)
            }
            syn::Lit::Float(f) => {
                let suffix = f.suffix();
                let dtype = match suffix {
                    "" => None,
                    "f32" => Some(DType::F32),
                    _ => bail!(
                        span,
                        "float literals in a kernel are f32 (cast tiles to f16/bf16 with `.cast::<bf16>()`)"
                    ),
                };
                Expr::Float(f.base10_parse()?, dtype, span)
            }
            syn::Lit::Bool(b) => Expr::Bool(b.value, span),
            other => bail!(other.span(), "only number and bool literals are part of the DSL"),
        },
        SynExpr::Path(p) => {
            if p.qself.is_some() {
                bail!(span, "qualified paths are not part of the DSL");
            }
            let segs: Vec<_> = p.path.segments.iter().map(|s| s.ident.clone()).collect();
            if segs.len() == 1 {
                Expr::Var(segs[0].clone())
            } else {
                Expr::Path(segs, span)
            }
        }
        SynExpr::Binary(b) => {
            if compound_op(&b.op).is_some() {
                bail!(
                    span,
                    "compound assignment is a statement: write `x += y;` on its own line"
                );
            }
            Expr::Binary(
                bin_op(&b.op)?,
                Box::new(parse_expr(&b.left)?),
                Box::new(parse_expr(&b.right)?),
                b.op.span(),
            )
        }
        SynExpr::Unary(u) => {
            let op = match u.op {
                syn::UnOp::Neg(_) => UnOp::Neg,
                syn::UnOp::Not(_) => UnOp::Not,
                syn::UnOp::Deref(_) => bail!(
                    span,
                    "dereferencing is not part of the DSL: tiles and scalars are values"
                ),
                _ => bail!(span, "unsupported unary operator"),
            };
            Expr::Unary(op, Box::new(parse_expr(&u.expr)?), span)
        }
        SynExpr::Paren(p) => parse_expr(&p.expr)?,
        SynExpr::Group(g) => parse_expr(&g.expr)?,
        SynExpr::Call(c) => {
            let SynExpr::Path(p) = &*c.func else {
                bail!(c.func.span(), "call a DSL function by name, e.g. `exp(x)`");
            };
            let Some(last) = p.path.segments.last() else {
                bail!(span, "call a DSL function by name");
            };
            if p.path.segments.len() > 1 {
                bail!(
                    p.span(),
                    "call DSL functions by their bare name (`exp(x)`, not a path): kernels can't call other Rust functions"
                );
            }
            let generics = match &last.arguments {
                syn::PathArguments::AngleBracketed(a) => generic_args(Some(a)),
                syn::PathArguments::None => Vec::new(),
                syn::PathArguments::Parenthesized(_) => bail!(span, "unexpected parenthesized arguments"),
            };
            Expr::Call {
                func: last.ident.clone(),
                generics,
                args: c.args.iter().map(parse_expr).collect::<Result<_>>()?,
                span: last.ident.span(),
            }
        }
        SynExpr::MethodCall(m) => Expr::Method {
            recv: Box::new(parse_expr(&m.receiver)?),
            method: m.method.clone(),
            generics: generic_args(m.turbofish.as_ref()),
            args: m.args.iter().map(parse_expr).collect::<Result<_>>()?,
            span: m.method.span(),
        },
        SynExpr::Array(a) => Expr::Array(a.elems.iter().map(parse_expr).collect::<Result<_>>()?, span),
        SynExpr::Cast(c) => Expr::Cast(Box::new(parse_expr(&c.expr)?), (*c.ty).clone(), c.as_token.span()),
        SynExpr::Closure(c) => bail!(
            c.or1_token.span(),
            "closures are not part of the DSL: write the computation inline; it is compiled for the whole tile"
        ),
        SynExpr::Reference(r) => bail!(
            r.and_token.span(),
            "references into tiles don't exist: tiles are values; pass them by name"
        ),
        SynExpr::Index(ix) => bail!(
            ix.bracket_token.span.join(),
            "tiles can't be indexed element by element, and tensors are read with `.load(..)` (tiles) or `.get(..)` (one element)"
        ),
        SynExpr::Unsafe(u) => bail!(
            u.unsafe_token.span(),
            "`unsafe` is not part of the DSL: every memory access is generated and bounds-checked by the compiler"
        ),
        SynExpr::Match(m) => bail!(
            m.match_token.span(),
            "`match` is not part of the DSL: branch on a scalar with `if`, or pick per element with `select(cond, a, b)`"
        ),
        SynExpr::If(i) => bail!(
            i.if_token.span(),
            "`if` is a statement in the DSL, not a value: use `select(cond, a, b)`, or assign a `let mut` name in both branches"
        ),
        SynExpr::Macro(m) => bail!(
            m.span(),
            "macros can't be used inside a kernel: the kernel body is read by #[tile::kernel], not compiled as Rust"
        ),
        SynExpr::Return(r) => bail!(
            r.span(),
            "a tile kernel returns nothing: write results with `.store(..)`"
        ),
        SynExpr::Break(b) => bail!(b.span(), "`break` is not part of the DSL: loops run their whole range"),
        SynExpr::Continue(c) => bail!(
            c.span(),
            "`continue` is not part of the DSL: guard the body with `if` instead"
        ),
        SynExpr::Field(f) => bail!(
            f.span(),
            "fields are not part of the DSL: tensors and tiles expose methods, e.g. `x.shape(0)`"
        ),
        SynExpr::Tuple(t) => bail!(
            t.span(),
            "tuples are not part of the DSL: use one `let` per value; indices and shapes are written `[a, b]`"
        ),
        SynExpr::Range(r) => bail!(r.span(), "ranges appear only in `for i in lo..hi`"),
        SynExpr::Block(b) => bail!(b.span(), "block expressions are not part of the DSL"),
        SynExpr::Struct(s) => bail!(s.span(), "struct literals are not part of the DSL"),
        SynExpr::Repeat(r) => bail!(
            r.span(),
            "array repeat expressions are not part of the DSL: use `full(shape, value)`"
        ),
        SynExpr::Async(a) => bail!(a.span(), "`async` is not part of the DSL"),
        SynExpr::Await(a) => bail!(a.span(), "`.await` is not part of the DSL"),
        SynExpr::Try(t) => bail!(t.span(), "`?` is not part of the DSL"),
        SynExpr::Assign(a) => bail!(
            a.span(),
            "assignment is a statement: write `x = value;` on its own line"
        ),
        other => bail!(other.span(), "this Rust expression is not part of the tile DSL"),
    })
}
