//! Declared tensor shapes, `&Tensor<T, { [M, N] }>`: the dimensions'
//! grammar, and the rules on the names they use.

use crate::ast::*;
use crate::error::{Result, bail};
use proc_macro2::Ident;
use syn::Expr as SynExpr;
use syn::spanned::Spanned;

/// A tensor's declared shape, `{ [M, 64, 3 * C, _] }`: per dimension a
/// name (a symbol or a const parameter), a positive literal, a multiple of
/// a name, or `_` for any size.
pub(super) fn declared(e: &SynExpr, types: &[TypeParam]) -> Result<Vec<Dim>> {
    const FORM: &str = "a tensor's shape is an array in braces: `Tensor<T, { [M, N] }>`, each dimension a name, a positive integer, a multiple of a name (`3 * C`) or `_`";
    let SynExpr::Block(b) = e else {
        bail!(e.span(), "{FORM}")
    };
    let [syn::Stmt::Expr(SynExpr::Array(a), None)] = &b.block.stmts[..] else {
        bail!(e.span(), "{FORM}")
    };
    if a.elems.is_empty() {
        bail!(a.span(), "a tensor has at least one dimension: `Tensor<T, {{ [N] }}>`");
    }
    let size = |e: &SynExpr| match e {
        SynExpr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i), ..
        }) => match i.base10_parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => bail!(i.span(), "a declared size is a positive integer"),
        },
        _ => Ok(None),
    };
    let name = |e: &SynExpr| -> Result<Option<Ident>> {
        let SynExpr::Path(p) = e else { return Ok(None) };
        let Some(name) = p.path.get_ident() else {
            return Ok(None);
        };
        if types.iter().any(|t| t.name == *name) {
            bail!(
                name.span(),
                "`{name}` is the kernel's element type; name the dimension with another symbol"
            );
        }
        Ok(Some(name.clone()))
    };
    a.elems
        .iter()
        .map(|d| {
            if let SynExpr::Infer(_) = d {
                return Ok(Dim::Any);
            }
            if let Some(n) = size(d)? {
                return Ok(Dim::Fixed(n));
            }
            if let Some(n) = name(d)? {
                return Ok(Dim::Name(n));
            }
            if let SynExpr::Binary(syn::ExprBinary {
                left,
                op: syn::BinOp::Mul(_),
                right,
                ..
            }) = d
            {
                match (size(left)?, name(right)?, name(left)?, size(right)?) {
                    (Some(k), Some(n), ..) | (.., Some(n), Some(k)) => return Ok(Dim::Multiple(k, n)),
                    _ => {}
                }
            }
            bail!(d.span(), "{FORM}")
        })
        .collect()
}

/// A shape's names are not the kernel's parameters, and a name used in a
/// multiple (`3 * C`) is declared alone somewhere (a const parameter is).
pub(super) fn check_names(params: &[Param], consts: &[ConstParam]) -> Result<()> {
    for p in params {
        let ParamKind::Tensor { shape: Some(dims), .. } = &p.kind else {
            continue;
        };
        for d in dims {
            let (Dim::Name(n) | Dim::Multiple(_, n)) = d else {
                continue;
            };
            if params.iter().any(|q| q.name == *n) {
                bail!(
                    n.span(),
                    "`{n}` is a parameter of this kernel; name the dimension with another symbol"
                );
            }
            if matches!(d, Dim::Multiple(..))
                && shape_symbol(params, n).is_none()
                && !consts.iter().any(|c| c.name == *n)
            {
                bail!(
                    n.span(),
                    "`{n}` appears only in a multiple: declare it alone in some tensor's shape (`out: &mut Tensor<T, {{ [M, {n}] }}>`), which gives its size"
                );
            }
        }
    }
    Ok(())
}
