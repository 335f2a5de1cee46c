//! A kernel's compilation, specialization by specialization: check and
//! simplify the IR, choose the warps ([`crate::warps`]), list the
//! variants with their plans ([`crate::variants`]) and lower each once
//! ([`crate::lower`]).

use crate::error::{Error, Result};
use crate::{ast, check, dtype, ir, lower, parse, simplify, variants, warps};
use proc_macro2::TokenStream;
use tile_spec::{Ptx, Variant};

/// One assignment of a kernel's type and const parameters, and its IR.
pub struct Specialization {
    pub types: Vec<dtype::DType>,
    pub consts: Vec<i64>,
    /// Checked and simplified, before layouts: the CPU backend's input.
    pub func: ir::Func,
}

/// Everything the compiler produced for one kernel.
pub struct CompiledKernel {
    pub kernel: ast::Kernel,
    /// Per const assignment, the checked and simplified IR (no layouts): the
    /// CPU backend's input.
    pub funcs: Vec<Specialization>,
    pub variants: Vec<Variant>,
}

/// Every combination of listed values: each list contributes one choice.
fn combinations<T: Clone>(lists: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new()];
    for list in lists {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                list.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push(v.clone());
                    p
                })
            })
            .collect();
    }
    out
}

fn describe(kernel: &ast::Kernel, types: &[dtype::DType], values: &[i64]) -> String {
    let t = kernel.types.iter().zip(types).map(|(p, d)| format!("{} = {d}", p.name));
    let c = kernel
        .consts
        .iter()
        .zip(values)
        .map(|(p, v)| format!("{} = {v}", p.name));
    t.chain(c).collect::<Vec<_>>().join(", ")
}

/// The type and const values of every specialization to build, in order:
/// every combination of the listed element types with every listed value
/// of each const parameter, or with each configuration that allows it.
fn specializations(kernel: &ast::Kernel) -> Vec<(Vec<dtype::DType>, Vec<i64>)> {
    let type_lists: Vec<Vec<dtype::DType>> = kernel.types.iter().map(|t| t.dtypes.clone()).collect();
    let const_lists: Vec<Vec<i64>> = kernel.consts.iter().map(|c| c.values.clone()).collect();
    let mut out = Vec::new();
    for types in combinations(&type_lists) {
        if kernel.configs.is_empty() {
            out.extend(combinations(&const_lists).into_iter().map(|v| (types.clone(), v)));
        } else {
            out.extend(
                (kernel.configs.iter())
                    .filter(|c| c.allows(&types))
                    .map(|c| (types.clone(), c.consts.clone())),
            );
        }
    }
    out
}

/// Compiles a kernel: every specialization, every variant.
pub fn compile(attr: TokenStream, item: TokenStream) -> Result<CompiledKernel> {
    let kernel = parse::parse_kernel(attr, item)?;
    let mut funcs = Vec::new();
    let mut variants = Vec::new();
    for (types, values) in specializations(&kernel) {
        let generic = !kernel.consts.is_empty() || !kernel.types.is_empty();
        let in_variant = |e: Error| {
            if generic {
                Error::new(
                    e.span,
                    format!("{} (building {})", e.message, describe(&kernel, &types, &values)),
                )
            } else {
                e
            }
        };
        let type_names: Vec<(String, dtype::DType)> = kernel
            .types
            .iter()
            .zip(&types)
            .map(|(t, d)| (t.name.to_string(), *d))
            .collect();
        let names: Vec<(String, i64)> = kernel
            .consts
            .iter()
            .zip(&values)
            .map(|(c, v)| (c.name.to_string(), *v))
            .collect();
        let mut func = check::check(&kernel, &type_names, &names).map_err(in_variant)?;
        simplify::simplify(&mut func);
        func.num_warps = warps::choose_warps(&func, kernel.num_warps);
        warps::check_registers(&kernel, &func).map_err(in_variant)?;
        let suffix: String = types
            .iter()
            .map(|d| format!("_{d}"))
            .chain(values.iter().map(|v| format!("_{v}")))
            .collect();
        for planned in variants::variants(&func, &kernel).map_err(in_variant)? {
            let entry = format!("{}{suffix}_{}", kernel.name, planned.kind);
            let lowered = lower::lower(&planned.laid_out.context(), &planned.plan, &entry);
            variants.push(Variant {
                types: types.clone().into(),
                consts: values.clone().into(),
                vectorized: planned.laid_out.vectorized.clone().into(),
                entry: entry.into(),
                ptx: Ptx::Text(lowered.text.into()),
                threads: lowered.threads,
                shared_bytes: lowered.shared_bytes,
                dynamic_shared_bytes: lowered.dynamic_shared_bytes,
                target: planned.target,
                tensor_maps: lowered.tensor_maps.into(),
                persistent: lowered.persistent,
                cluster: lowered.cluster,
                gathers: planned.laid_out.func.cluster_blocks() > 1,
                tma_only: lowered.tma_only.into(),
            });
        }
        funcs.push(Specialization {
            types,
            consts: values,
            func,
        });
    }
    let ranks: Vec<Vec<usize>> = funcs
        .iter()
        .map(|s| {
            s.func
                .params
                .iter()
                .map(|p| match p {
                    ir::Param::Tensor(t) => t.rank,
                    ir::Param::Scalar { .. } => 0,
                })
                .collect()
        })
        .collect();
    if ranks.windows(2).any(|w| w[0] != w[1]) {
        return Err(Error::new(
            kernel.name.span(),
            "a tensor's rank differs between specializations: every specialization must index each tensor with the same number of coordinates",
        ));
    }
    if let Some(tuning) = &kernel.tuning {
        for &(param, axis, span) in &tuning.dims {
            let rank = ranks[0][param];
            if axis >= rank {
                return Err(Error::new(
                    span,
                    format!(
                        "`{}` has rank {rank}: its axes are 0 to {}",
                        kernel.params[param].name,
                        rank.saturating_sub(1)
                    ),
                ));
            }
        }
    }
    Ok(CompiledKernel {
        kernel,
        funcs,
        variants,
    })
}
