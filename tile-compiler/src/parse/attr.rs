//! The attribute of `#[tile::kernel(..)]`: the values each generic
//! parameter is built for (`T = [f32, bf16]`, `BLOCK = [256, 1024]`), the
//! const parameters' configurations (`configs = [(BM = 64, BN = 128), ..]`),
//! the tuning (`grid = ..`, `key = [..]`), `num_warps` and `num_stages`.

use super::int_lit;
use crate::ast::*;
use crate::dtype::DType;
use crate::error::{Error, Result, bail};
use proc_macro2::{Ident, Span, TokenStream};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr as SynExpr, Token};
use tile_spec::SizeOp;

/// `NAME = [values..]` lists, unresolved.
pub(super) type Lists = Vec<(Ident, Vec<SynExpr>)>;

/// One configuration's `NAME = value` pairs, unresolved, and its span.
pub(super) type RawConfig = (Span, Vec<(Ident, SynExpr)>);

/// What `#[tile::kernel(..)]` says.
pub(super) struct Attr {
    pub(super) lists: Lists,
    pub(super) num_warps: Option<u32>,
    pub(super) num_stages: Option<u32>,
    pub(super) configs: Vec<RawConfig>,
    /// `key = [..]` and `grid = ..`, unresolved.
    pub(super) key: Option<Vec<SynExpr>>,
    pub(super) grid: Option<SynExpr>,
}

const EXPECTED: &str = "expected `NAME = [values..]`, `configs = [(NAME = value, ..), ..]`, `grid = ..`, `key = [..]`, `num_warps = N` or `num_stages = N` in #[tile::kernel(..)]";

/// Reads the attribute's `NAME = value` items.
pub(super) fn parse_attr(attr: TokenStream) -> Result<Attr> {
    let metas = syn::punctuated::Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated
        .parse2(attr)
        .map_err(|e| Error::new(e.span(), format!("{EXPECTED}: {e}")))?;
    let mut out = Attr {
        lists: Vec::new(),
        num_warps: None,
        num_stages: None,
        configs: Vec::new(),
        key: None,
        grid: None,
    };
    for m in metas {
        let Some(name) = m.path.get_ident() else {
            bail!(m.path.span(), "expected a name such as `BLOCK` or `num_warps`");
        };
        let once = |seen: bool| -> Result<()> {
            if seen {
                bail!(name.span(), "`{name}` is given twice");
            }
            Ok(())
        };
        match name.to_string().as_str() {
            "num_warps" => {
                once(out.num_warps.is_some())?;
                out.num_warps = Some(bounded_int(
                    &m.value,
                    |n| (1..=32).contains(&n) && (n as u64).count_ones() == 1,
                    "num_warps must be a power of two from 1 to 32 (a block has at most 1024 threads)",
                )?);
            }
            "num_stages" => {
                once(out.num_stages.is_some())?;
                out.num_stages = Some(bounded_int(
                    &m.value,
                    |n| (2..=8).contains(&n),
                    "num_stages is the depth of the pipelines that feed `mma`: 2 to 8 shared-memory stages",
                )?);
            }
            "configs" => {
                once(!out.configs.is_empty())?;
                out.configs = parse_configs(&m.value)?;
            }
            "key" => {
                once(out.key.is_some())?;
                let SynExpr::Array(arr) = &m.value else {
                    bail!(
                        m.value.span(),
                        "list the tuning key's sizes in brackets: `key = [a.shape(0), b.shape(1)]`"
                    );
                };
                out.key = Some(arr.elems.iter().cloned().collect());
            }
            "grid" => {
                once(out.grid.is_some())?;
                out.grid = Some(m.value.clone());
            }
            _ => {
                once(out.lists.iter().any(|(n, _)| n == name))?;
                out.lists.push((name.clone(), parse_list(name, &m.value)?));
            }
        }
    }
    Ok(out)
}

/// `[v, ..]`: one or more distinct values.
fn parse_list(name: &Ident, value: &SynExpr) -> Result<Vec<SynExpr>> {
    let SynExpr::Array(arr) = value else {
        bail!(
            value.span(),
            "list the values of `{name}` in brackets: `{name} = [64, 128]`"
        );
    };
    if arr.elems.is_empty() {
        bail!(arr.span(), "`{name}` needs at least one value");
    }
    let items: Vec<SynExpr> = arr.elems.iter().cloned().collect();
    for (i, e) in items.iter().enumerate() {
        if items[..i]
            .iter()
            .any(|p| quote::quote!(#p).to_string() == quote::quote!(#e).to_string())
        {
            bail!(e.span(), "this value of `{name}` is listed twice");
        }
    }
    Ok(items)
}

const CONFIGS: &str = "list the configurations as tuples naming every const parameter: `configs = [(BM = 64, BN = 128), (T = f32, BM = 64, BN = 64)]`";

/// `[(BM = 64, BN = 128), (T = f32, BM = 64, BN = 64)]`, unresolved.
fn parse_configs(value: &SynExpr) -> Result<Vec<RawConfig>> {
    let SynExpr::Array(arr) = value else {
        bail!(value.span(), "{CONFIGS}");
    };
    if arr.elems.is_empty() {
        bail!(arr.span(), "`configs` needs at least one configuration");
    }
    arr.elems
        .iter()
        .map(|e| {
            let items: Vec<&SynExpr> = match e {
                SynExpr::Tuple(t) => t.elems.iter().collect(),
                SynExpr::Paren(p) => vec![&*p.expr],
                _ => bail!(e.span(), "{CONFIGS}"),
            };
            let pairs = items
                .into_iter()
                .map(|item| match item {
                    SynExpr::Assign(a) => match &*a.left {
                        SynExpr::Path(p) if p.path.get_ident().is_some() => {
                            Ok((p.path.get_ident().expect("checked").clone(), (*a.right).clone()))
                        }
                        other => bail!(other.span(), "{CONFIGS}"),
                    },
                    other => bail!(other.span(), "{CONFIGS}"),
                })
                .collect::<Result<_>>()?;
            Ok((e.span(), pairs))
        })
        .collect()
}

/// A configuration's pairs as element types per type parameter (a type or
/// `[types..]`, among the listed ones; none: all) and a value for every
/// const parameter.
pub(super) fn resolve_config((span, pairs): &RawConfig, types: &[TypeParam], consts: &[Ident]) -> Result<Config> {
    let mut config = Config {
        types: vec![Vec::new(); types.len()],
        consts: Vec::new(),
    };
    let mut values: Vec<Option<i64>> = vec![None; consts.len()];
    for (name, value) in pairs {
        if let Some(i) = types.iter().position(|t| t.name == *name) {
            if !config.types[i].is_empty() {
                bail!(name.span(), "`{name}` is named twice in this configuration");
            }
            let listed: Vec<&str> = types[i].dtypes.iter().map(|d| d.name()).collect();
            let named: Vec<&SynExpr> = match value {
                SynExpr::Array(a) => a.elems.iter().collect(),
                other => vec![other],
            };
            for e in named {
                let d = match e {
                    SynExpr::Path(p) => p.path.get_ident().and_then(|i| DType::from_name(&i.to_string())),
                    _ => None,
                };
                match d {
                    Some(d) if types[i].dtypes.contains(&d) => config.types[i].push(d),
                    _ => bail!(
                        e.span(),
                        "a configuration names listed element types of `{name}`: one of {listed:?}, or a list of them"
                    ),
                }
            }
        } else if let Some(i) = consts.iter().position(|c| c == name) {
            if values[i].is_some() {
                bail!(name.span(), "`{name}` is named twice in this configuration");
            }
            match int_lit(value) {
                Ok(v) if v >= 0 => values[i] = Some(v),
                _ => bail!(
                    value.span(),
                    "`{name}` is a usize: give it an integer, e.g. `{name} = 64`"
                ),
            }
        } else {
            bail!(
                name.span(),
                "`{name}` in a configuration is not a generic parameter of this kernel"
            );
        }
    }
    for (c, v) in consts.iter().zip(&values) {
        match v {
            Some(v) => config.consts.push(*v),
            None => bail!(
                *span,
                "this configuration gives `{c}` no value: every configuration names every const parameter"
            ),
        }
    }
    Ok(config)
}

const HOST: &str = "the tuning's `grid` and `key` are sizes the host computes: integers, const parameters, integer scalar parameters, `t.shape(d)`, declared shape symbols, `cdiv(a, b)`, `max(a, b)`, `min(a, b)` and `+ - * /`";

/// What a `grid = ..` or `key = [..]` expression may read.
pub(super) struct HostNames<'a> {
    /// The const parameters, by index.
    pub(super) consts: &'a [Ident],
    /// Whether this is the key, which names the problem, not a
    /// configuration: no const parameters.
    pub(super) key: bool,
    pub(super) params: &'a [Param],
}

/// A `grid = ..` or `key = [..]` expression as a postfix program
/// (appended to `out`), each `t.shape(d)` also in `dims` with its span.
pub(super) fn host_size(
    e: &SynExpr,
    names: &HostNames,
    out: &mut Vec<SizeOp>,
    dims: &mut Vec<(usize, usize, Span)>,
) -> Result<()> {
    let mut operation = |op: SizeOp, a: &SynExpr, b: &SynExpr, out: &mut Vec<SizeOp>| -> Result<()> {
        host_size(a, names, out, dims)?;
        host_size(b, names, out, dims)?;
        out.push(op);
        Ok(())
    };
    match e {
        SynExpr::Lit(_) => match u64::try_from(int_lit(e)?) {
            Ok(n) => out.push(SizeOp::Int(n)),
            Err(_) => bail!(e.span(), "sizes are not negative"),
        },
        SynExpr::Paren(p) => return host_size(&p.expr, names, out, dims),
        SynExpr::Path(p) => {
            let Some(name) = p.path.get_ident() else {
                bail!(e.span(), "{HOST}");
            };
            if let Some(i) = names.consts.iter().position(|c| c == name) {
                if names.key {
                    bail!(
                        e.span(),
                        "the tuning key names sizes of the problem (`t.shape(d)`, shape symbols, integer scalars), not of a configuration: `{name}` is what the tuner chooses"
                    );
                }
                out.push(SizeOp::Const(i));
                return Ok(());
            }
            if let Some((param, axis)) = shape_symbol(names.params, name) {
                out.push(SizeOp::Dim { param, axis });
                return Ok(());
            }
            match names.params.iter().position(|q| q.name == *name) {
                Some(i) if matches!(names.params[i].kind, ParamKind::Scalar(DType::I32 | DType::U32)) => {
                    out.push(SizeOp::Scalar(i))
                }
                Some(_) => bail!(
                    e.span(),
                    "`{name}` is not an integer scalar: a tensor's sizes are `{name}.shape(d)`"
                ),
                None => bail!(e.span(), "`{name}` is not a parameter of this kernel: {HOST}"),
            }
        }
        SynExpr::Binary(b) => {
            let op = match b.op {
                syn::BinOp::Add(_) => SizeOp::Add,
                syn::BinOp::Sub(_) => SizeOp::Sub,
                syn::BinOp::Mul(_) => SizeOp::Mul,
                syn::BinOp::Div(_) => SizeOp::Div,
                _ => bail!(b.op.span(), "{HOST}"),
            };
            operation(op, &b.left, &b.right, out)?;
        }
        SynExpr::Call(c) => {
            let name = match &*c.func {
                SynExpr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                _ => None,
            };
            let op = match name.as_deref() {
                Some("cdiv") => SizeOp::Cdiv,
                Some("max") => SizeOp::Max,
                Some("min") => SizeOp::Min,
                _ => bail!(c.func.span(), "{HOST}"),
            };
            let [a, b] = c.args.iter().collect::<Vec<_>>()[..] else {
                bail!(c.span(), "`{}` takes two sizes", name.unwrap_or_default());
            };
            operation(op, a, b, out)?;
        }
        SynExpr::MethodCall(m) if m.method == "shape" => {
            let tensor = match &*m.receiver {
                SynExpr::Path(p) => p.path.get_ident().and_then(|n| {
                    (names.params.iter()).position(|q| q.name == *n && matches!(q.kind, ParamKind::Tensor { .. }))
                }),
                _ => None,
            };
            let Some(param) = tensor else {
                bail!(m.receiver.span(), "`.shape(d)` is read from a tensor parameter");
            };
            let [axis] = m.args.iter().collect::<Vec<_>>()[..] else {
                bail!(m.span(), "`.shape(d)` takes one axis, an integer");
            };
            let axis = int_lit(axis)
                .ok()
                .and_then(|a| usize::try_from(a).ok())
                .ok_or_else(|| Error::new(axis.span(), "`.shape(d)` takes an integer axis"))?;
            out.push(SizeOp::Dim { param, axis });
            dims.push((param, axis, m.span()));
        }
        _ => bail!(e.span(), "{HOST}"),
    }
    Ok(())
}

/// An integer literal that `ok` accepts; otherwise `message` at it.
fn bounded_int(e: &SynExpr, ok: impl Fn(i64) -> bool, message: &str) -> Result<u32> {
    let n = int_lit(e)?;
    if !ok(n) {
        bail!(e.span(), "{message}");
    }
    Ok(n as u32)
}
