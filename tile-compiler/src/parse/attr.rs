//! The attribute of `#[tile::kernel(..)]`: the values each generic
//! parameter is built for, `num_warps`, `num_stages`, and the combinations
//! not to build.

use super::int_lit;
use crate::ast::*;
use crate::dtype::DType;
use crate::error::{Error, Result, bail};
use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr as SynExpr, Token};

/// A skip's `NAME = value` pairs as parameter indices and listed values.
pub(super) fn resolve_skip(
    pairs: &[(proc_macro2::Ident, SynExpr)],
    types: &[TypeParam],
    consts: &[ConstParam],
) -> Result<Skip> {
    let mut skip = Skip {
        types: Vec::new(),
        consts: Vec::new(),
    };
    for (name, value) in pairs {
        if let Some(i) = types.iter().position(|t| t.name == *name) {
            let d = match value {
                SynExpr::Path(p) => p.path.get_ident().and_then(|i| DType::from_name(&i.to_string())),
                _ => None,
            };
            match d {
                Some(d) if types[i].dtypes.contains(&d) => skip.types.push((i, d)),
                _ => bail!(
                    value.span(),
                    "skip names a listed element type of `{name}`: one of {:?}",
                    types[i].dtypes.iter().map(|d| d.name()).collect::<Vec<_>>()
                ),
            }
        } else if let Some(i) = consts.iter().position(|c| c.name == *name) {
            match int_lit(value) {
                Ok(v) if consts[i].values.contains(&v) => skip.consts.push((i, v)),
                _ => bail!(
                    value.span(),
                    "skip names a listed value of `{name}`: one of {:?}",
                    consts[i].values
                ),
            }
        } else {
            bail!(
                name.span(),
                "`{name}` in skip is not a generic parameter of this kernel"
            );
        }
    }
    Ok(skip)
}

pub(super) type Lists = Vec<(proc_macro2::Ident, Vec<SynExpr>)>;

/// The `NAME = value` pairs of each skipped combination, unresolved.
pub(super) type RawSkips = Vec<Vec<(proc_macro2::Ident, SynExpr)>>;

/// What `#[tile::kernel(..)]` says.
pub(super) struct Attr {
    pub(super) lists: Lists,
    pub(super) num_warps: Option<u32>,
    pub(super) num_stages: Option<u32>,
    pub(super) skips: RawSkips,
}

/// `NAME = [v, ..], num_warps = N, num_stages = N, skip = [(NAME = v, ..), ..]`.
pub(super) fn parse_attr(attr: TokenStream) -> Result<Attr> {
    let metas = syn::punctuated::Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated
        .parse2(attr)
        .map_err(|e| {
            Error::new(
                e.span(),
                format!(
                    "expected `NAME = [values..]`, `num_warps = N`, `num_stages = N` or `skip = [(NAME = value, ..)]` in #[tile::kernel(..)]: {e}"
                ),
            )
        })?;
    let mut lists: Lists = Vec::new();
    let mut num_warps = None;
    let mut num_stages = None;
    let mut skips = RawSkips::new();
    for m in metas {
        let Some(name) = m.path.get_ident() else {
            bail!(m.path.span(), "expected a name such as `BLOCK` or `num_warps`");
        };
        if name == "num_warps" {
            num_warps = Some(bounded_int(
                &m.value,
                |n| (1..=32).contains(&n) && (n as u64).count_ones() == 1,
                "num_warps must be a power of two from 1 to 32 (a block has at most 1024 threads)",
            )?);
            continue;
        }
        if name == "num_stages" {
            num_stages = Some(bounded_int(
                &m.value,
                |n| (2..=8).contains(&n),
                "num_stages is the depth of the pipelines that feed `mma`: 2 to 8 shared-memory stages",
            )?);
            continue;
        }
        if name == "skip" {
            skips.extend(parse_skips(&m.value)?);
            continue;
        }
        if lists.iter().any(|(n, _)| n == name) {
            bail!(name.span(), "`{name}` is listed twice");
        }
        let SynExpr::Array(arr) = &m.value else {
            bail!(
                m.value.span(),
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
        lists.push((name.clone(), items));
    }
    Ok(Attr {
        lists,
        num_warps,
        num_stages,
        skips,
    })
}

/// `[(T = f32, BN = 256), (BM = 64,)]`: the combinations not to build.
pub(super) fn parse_skips(value: &SynExpr) -> Result<RawSkips> {
    const SHAPE: &str = "list the combinations not to build as tuples of listed values: `skip = [(T = f32, BN = 256)]`";
    let SynExpr::Array(arr) = value else {
        bail!(value.span(), "{SHAPE}");
    };
    arr.elems
        .iter()
        .map(|e| {
            let items: Vec<&SynExpr> = match e {
                SynExpr::Tuple(t) => t.elems.iter().collect(),
                SynExpr::Paren(p) => vec![&*p.expr],
                _ => bail!(e.span(), "{SHAPE}"),
            };
            items
                .into_iter()
                .map(|item| match item {
                    SynExpr::Assign(a) => match &*a.left {
                        SynExpr::Path(p) if p.path.get_ident().is_some() => {
                            Ok((p.path.get_ident().expect("checked").clone(), (*a.right).clone()))
                        }
                        other => bail!(other.span(), "{SHAPE}"),
                    },
                    other => bail!(other.span(), "{SHAPE}"),
                })
                .collect()
        })
        .collect()
}

/// An integer literal that `ok` accepts; otherwise `message` at it.
pub(super) fn bounded_int(e: &SynExpr, ok: impl Fn(i64) -> bool, message: &str) -> Result<u32> {
    let n = int_lit(e)?;
    if !ok(n) {
        bail!(e.span(), "{message}");
    }
    Ok(n as u32)
}
