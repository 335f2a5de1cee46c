//! What `#[tile::kernel]` expands to: a module named after the kernel with
//! `KERNEL` (the PTX of every specialization, packed, and the CPU reference
//! version dispatching to one function per specialization), `launch_with`
//! and `launch` (generic over the backend, `tile::Backend`: a GPU stream or
//! the CPU), and a registration in the kernel registry.

use crate::ast::{Dim, Elem, ParamKind};
use crate::cpu::{self, rust_type};
use crate::dtype::DType;
use crate::pack::pack;
use crate::{CompiledKernel, Variant};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tile_spec::SizeOp;

/// `d` as the expansion writes it: `::tile::DType::F32`.
fn runtime_dtype(d: DType) -> TokenStream {
    let name = format_ident!("{d:?}");
    quote!(::tile::DType::#name)
}

/// `Cow::Borrowed(&[..])` of `items`: a slice in `static` data.
fn borrowed_slice(items: impl Iterator<Item = TokenStream>) -> TokenStream {
    quote!(::std::borrow::Cow::Borrowed(&[#(#items),*]))
}

/// A tuning as a `static` `::tile::Tuning`: each size's program.
fn tuning_spec(t: &tile_spec::Tuning) -> TokenStream {
    let size = |s: &tile_spec::Size| {
        let ops = s.0.iter().map(|op| {
            let op = match *op {
                SizeOp::Int(n) => quote!(Int(#n)),
                SizeOp::Const(i) => quote!(Const(#i)),
                SizeOp::Scalar(i) => quote!(Scalar(#i)),
                SizeOp::Dim { param, axis } => quote!(Dim { param: #param, axis: #axis }),
                other => {
                    let name = format_ident!("{other:?}");
                    quote!(#name)
                }
            };
            quote!(::tile::SizeOp::#op)
        });
        let ops = borrowed_slice(ops);
        quote!(::tile::Size(#ops))
    };
    let key = borrowed_slice(t.key.iter().map(size));
    let grid = borrowed_slice(t.grid.iter().map(size));
    quote!(::core::option::Option::Some(::tile::Tuning { key: #key, grid: #grid }))
}

/// The variants as `static` `::tile::Variant`s, and the `static` holding
/// their PTX: every entry of the kernel packed into one stream.
fn variant_specs(variants: &[Variant]) -> (Vec<TokenStream>, TokenStream) {
    let texts: Vec<&str> = (variants.iter())
        .map(|v| v.ptx.text().expect("the compiler's PTX is text"))
        .collect();
    let (stream, ranges) = pack(&texts);
    let len = stream.len();
    let bytes = proc_macro2::Literal::byte_string(&stream);
    let specs = variants.iter().zip(ranges).map(|(v, range)| {
        let (start, end) = (range.start, range.end);
        variant_spec(
            v,
            quote!(::tile::Ptx::Packed(::tile::Packed { stream: &PACKED_PTX, range: #start..#end })),
        )
    });
    (specs.collect(), quote!(static PACKED_PTX: [u8; #len] = *#bytes;))
}

/// A variant as a `static` `::tile::Variant` (see `tile_spec::Variant`),
/// its PTX written as `ptx`.
fn variant_spec(v: &Variant, ptx: TokenStream) -> TokenStream {
    let Variant {
        types,
        consts,
        vectorized,
        entry,
        threads,
        shared_bytes,
        dynamic_shared_bytes,
        target,
        tensor_maps,
        tma_only,
        persistent,
        cluster,
        gathers,
        ptx: _,
    } = v;
    let entry = entry.as_ref();
    let types = borrowed_slice(types.iter().map(|d| runtime_dtype(*d)));
    let consts = borrowed_slice(consts.iter().map(|c| quote!(#c)));
    let vectorized = borrowed_slice(vectorized.iter().map(|p| quote!(#p)));
    let tma_only = borrowed_slice(tma_only.iter().map(|p| quote!(#p)));
    let target = match target {
        None => quote!(::core::option::Option::None),
        Some(t) => {
            let name = format_ident!("{t:?}");
            quote!(::core::option::Option::Some(::tile::Target::#name))
        }
    };
    let tensor_maps = borrowed_slice(tensor_maps.iter().map(|m| {
        let (param, swizzle, interleaved, tf32) = (m.param, m.swizzle_bytes, m.interleaved_rows, m.tf32);
        let box_dims = borrowed_slice(m.box_dims.iter().map(|d| quote!(#d)));
        quote!(::tile::TensorMap {
            param: #param,
            box_dims: #box_dims,
            swizzle_bytes: #swizzle,
            interleaved_rows: #interleaved,
            tf32: #tf32,
        })
    }));
    quote! {
        ::tile::Variant {
            types: #types,
            consts: #consts,
            vectorized: #vectorized,
            entry: ::std::borrow::Cow::Borrowed(#entry),
            threads: #threads,
            shared_bytes: #shared_bytes,
            dynamic_shared_bytes: #dynamic_shared_bytes,
            target: #target,
            tensor_maps: #tensor_maps,
            tma_only: #tma_only,
            persistent: #persistent,
            cluster: #cluster,
            gathers: #gathers,
            ptx: #ptx,
        }
    }
}

/// The host-side element type of a tensor: a Rust type or the kernel's type parameter.
fn elem_type(e: &Elem) -> TokenStream {
    match e {
        Elem::Fixed(d) => rust_type(*d),
        Elem::Param(name) => {
            let id = format_ident!("{}", name);
            quote!(#id)
        }
    }
}

/// A declared dimension as the runtime checks it: a name (or a multiple
/// of one) is a const parameter's, by index, or else a symbol's.
fn shape_dim(d: &Dim, const_names: &[String]) -> TokenStream {
    let (times, n) = match d {
        Dim::Any => return quote!(::tile::ShapeDim::Any),
        Dim::Fixed(n) => return quote!(::tile::ShapeDim::Fixed(#n)),
        Dim::Name(n) => (1usize, n),
        Dim::Multiple(k, n) => (*k, n),
    };
    let name = n.to_string();
    match const_names.iter().position(|c| *c == name) {
        Some(index) => quote!(::tile::ShapeDim::Const { index: #index, times: #times }),
        None => quote!(::tile::ShapeDim::Symbol { name: #name, times: #times }),
    }
}

pub fn expand(k: &CompiledKernel) -> TokenStream {
    let ast = &k.kernel;
    let name = &ast.name;
    let name_str = name.to_string();
    let vis = &ast.vis;
    let attrs = ast.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let type_names: Vec<String> = ast.types.iter().map(|t| t.name.to_string()).collect();
    let type_idents: Vec<_> = ast.types.iter().map(|t| t.name.clone()).collect();
    let const_names: Vec<String> = ast.consts.iter().map(|c| c.name.to_string()).collect();
    let const_idents: Vec<_> = ast.consts.iter().map(|c| c.name.clone()).collect();
    let first = &k.funcs[0].func;

    let param_specs = ast.params.iter().enumerate().map(|(i, p)| {
        let pname = p.name.to_string();
        match &p.kind {
            ParamKind::Tensor { elem, mutable, shape } => {
                let rank = match &first.params[i] {
                    crate::ir::Param::Tensor(t) => t.rank,
                    _ => unreachable!(),
                };
                let elem = match elem {
                    Elem::Fixed(d) => d.name().to_string(),
                    Elem::Param(n) => n.clone(),
                };
                let shape = match shape {
                    Some(dims) => {
                        let dims = dims.iter().map(|d| shape_dim(d, &const_names));
                        quote!(::core::option::Option::Some(&[#(#dims),*]))
                    }
                    None => quote!(::core::option::Option::None),
                };
                quote!(::tile::ParamSpec::Tensor { name: #pname, elem: #elem, rank: #rank, mutable: #mutable, shape: #shape })
            }
            ParamKind::Scalar(dtype) => {
                let d = runtime_dtype(*dtype);
                quote!(::tile::ParamSpec::Scalar { name: #pname, dtype: #d })
            }
        }
    });
    let (variants, packed_ptx) = variant_specs(&k.variants);

    // The backend's generic parameter: `B`, unless the kernel has one of that name.
    let taken = |n: &str| type_names.iter().chain(&const_names).any(|t| t == n);
    let backend = format_ident!("{}", if taken("B") { "TileBackend" } else { "B" });
    let params: Vec<TokenStream> = ast
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match &p.kind {
                ParamKind::Tensor { elem, mutable, .. } => {
                    let t = elem_type(elem);
                    let m = mutable.then(|| quote!(mut));
                    quote!(#n: &#m <#backend as ::tile::Backend>::Tensor<#t>)
                }
                ParamKind::Scalar(dtype) => {
                    let t = rust_type(*dtype);
                    quote!(#n: #t)
                }
            }
        })
        .collect();
    let param_names: Vec<_> = ast.params.iter().map(|p| &p.name).collect();
    let args: Vec<TokenStream> = ast
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match p.kind {
                ParamKind::Tensor { mutable: false, .. } => {
                    quote!(::tile::Arg::Tensor(<#backend as ::tile::Backend>::operand(#n)))
                }
                ParamKind::Tensor { mutable: true, .. } => {
                    quote!(::tile::Arg::TensorMut(<#backend as ::tile::Backend>::operand_mut(#n)))
                }
                ParamKind::Scalar(DType::F32) => quote!(::tile::Arg::F32(#n)),
                ParamKind::Scalar(DType::U32) => quote!(::tile::Arg::U32(#n)),
                ParamKind::Scalar(_) => quote!(::tile::Arg::I32(#n)),
            }
        })
        .collect();

    // The check that the chosen values were built: a compile error where
    // they are known (the generic arguments of `launch`; the element types
    // of `launch_with`).
    let type_checks: Vec<TokenStream> = ast
        .types
        .iter()
        .map(|t| {
            let id = &t.name;
            let pats = t.dtypes.iter().map(|d| runtime_dtype(*d));
            let names: Vec<&str> = t.dtypes.iter().map(|d| d.name()).collect();
            let msg = format!(
                "`{name_str}` is not built for this element type `{id}`: use one of {names:?}, or add it to #[tile::kernel({id} = [..])]"
            );
            quote!(::core::assert!(::core::matches!(<#id as ::tile::Element>::DTYPE, #(#pats)|*), #msg);)
        })
        .collect();
    let const_checks = ast.consts.iter().map(|c| {
        let id = &c.name;
        let vals: Vec<usize> = c.values.iter().map(|&v| v as usize).collect();
        let msg = format!(
            "`{name_str}` is not built for this value of `{id}`: use one of {vals:?}, or add the value to #[tile::kernel({id} = [..])]"
        );
        quote!(::core::assert!(#(#id == #vals)||*, #msg);)
    });
    let compile_check = |checks: Vec<TokenStream>| {
        if checks.is_empty() {
            quote!()
        } else {
            quote!(const { #(#checks)* };)
        }
    };
    // With configurations, the combination too: each value may be built
    // with some types and values of the others only.
    let combination_check = (!ast.configs.is_empty()).then(|| {
        let names: Vec<String> = type_names.iter().chain(&const_names).cloned().collect();
        let built = k.funcs.iter().map(|s| {
            let types = s.types.iter().map(|d| runtime_dtype(*d));
            let consts = s.consts.iter().map(|&v| v as usize);
            quote!((#(#types,)* #(#consts,)*))
        });
        let msg = format!(
            "`{name_str}` is not built for this combination of ({}): its attribute's `configs` list the built ones",
            names.join(", ")
        );
        quote!(::core::assert!(::core::matches!((#(<#type_idents as ::tile::Element>::DTYPE,)* #(#const_idents,)*), #(#built)|*), #msg);)
    });
    let launch_check = compile_check(
        type_checks
            .iter()
            .cloned()
            .chain(const_checks)
            .chain(combination_check)
            .collect(),
    );
    let launch_with_check = compile_check(type_checks);
    let type_params = quote!(#(#type_idents: ::tile::Element,)*);
    let launch_generics = quote!(<#type_params #(const #const_idents: usize,)* #backend: ::tile::Backend>);
    let launch_with_generics = quote!(<#type_params #backend: ::tile::Backend>);

    // One CPU function per specialization, chosen at run time by the
    // types and const values; each takes its concrete host tensors.
    let cpu_fns = k.funcs.iter().enumerate().map(|(i, s)| {
        let fname = format_ident!("cpu_specialization_{}", i);
        let body = cpu::body(&s.func);
        let concrete: Vec<TokenStream> = ast
            .params
            .iter()
            .zip(&s.func.params)
            .map(|(p, ip)| {
                let n = &p.name;
                match ip {
                    crate::ir::Param::Tensor(t) => {
                        let ty = rust_type(t.dtype);
                        if t.mutable {
                            quote!(#n: &mut ::tile::HostTensor<#ty>)
                        } else {
                            quote!(#n: &::tile::HostTensor<#ty>)
                        }
                    }
                    crate::ir::Param::Scalar { dtype, .. } => {
                        let ty = rust_type(*dtype);
                        quote!(#n: #ty)
                    }
                }
            })
            .collect();
        quote! {
            #[allow(unused_variables, unused_mut, unused_parens, non_snake_case, clippy::all)]
            fn #fname(block: [i32; 3], nblocks: [i32; 3], cluster: &mut ::tile::__private::cpu::Cluster, #(#concrete),*) -> ::tile::Result<()> {
                #body
            }
        }
    });
    let arg_idents: Vec<_> = (0..ast.params.len()).map(|i| format_ident!("arg_{}", i)).collect();
    let count = ast.params.len();
    let cpu_arms = k.funcs.iter().enumerate().map(|(i, s)| {
        let fname = format_ident!("cpu_specialization_{}", i);
        let types = s.types.iter().map(|d| runtime_dtype(*d));
        let consts = &s.consts;
        let typed = s.func.params.iter().enumerate().map(|(p, ip)| {
            let a = &arg_idents[p];
            match ip {
                crate::ir::Param::Tensor(t) => {
                    let ty = rust_type(t.dtype);
                    if t.mutable {
                        quote!(let #a = ::tile::__private::host_tensor_mut::<#ty>(&KERNEL, #p, #a)?;)
                    } else {
                        quote!(let #a = ::tile::__private::host_tensor::<#ty>(&KERNEL, #p, #a)?;)
                    }
                }
                crate::ir::Param::Scalar { dtype, .. } => {
                    let ty = rust_type(*dtype);
                    quote!(let #a = ::tile::__private::host_scalar::<#ty>(&KERNEL, #p, #a)?;)
                }
            }
        });
        let cluster_blocks = s.func.cluster_blocks();
        quote! {
            if types == [#(#types),*] && consts == [#(#consts),*] {
                let [#(#arg_idents),*] = ::tile::__private::host_args::<#count>(&KERNEL, args)?;
                #(#typed)*
                let mut cluster = ::tile::__private::cpu::Cluster::default();
                for block_z in 0..grid.z {
                    for block_y in 0..grid.y {
                        for block_x in ::tile::__private::cpu::cluster_order(grid.x, #cluster_blocks) {
                            let block = [block_x as i32, block_y as i32, block_z as i32];
                            #fname(block, nblocks, &mut cluster, #(#arg_idents),*)?;
                        }
                    }
                }
                return ::core::result::Result::Ok(());
            }
        }
    });

    let const_list = const_idents
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let doc_launch_with = format!(
        "Runs `{name_str}` on `on`, a GPU stream (`&tile::Stream`, tensors `tile::Tensor`) or the CPU (`&tile::Cpu`, the reference version, tensors `tile::HostTensor`), over `grid` blocks, with the const parameters ({const_list}) taking `consts`, chosen at run time: a combination not built is an `Error::NotBuilt` (`KERNEL.specializations(..)` lists the built ones). The element types come from the tensors. Checks ranks, sizes and the grid first and returns a typed error instead of running with bad arguments; on a GPU, queues the kernel and returns, on the CPU, runs every block first."
    );
    let doc_launch = format!(
        "Runs `{name_str}` on `on` (a GPU stream or `&tile::Cpu`) over `grid` blocks, as `launch_with` does, with the element types and const values as generic arguments, the backend last (`launch::<f32, 1024, _>(&stream, ..)`): values the attribute does not list are compile errors."
    );
    let tuning = match &ast.tuning {
        Some(t) => tuning_spec(&t.sizes),
        None => quote!(::core::option::Option::None),
    };
    // With a declared tuning: `run`, every argument but the const values
    // and the grid, which the tuner chooses and computes.
    let run = ast.tuning.as_ref().map(|_| {
        let doc = format!(
            "Runs `{name_str}` on `on` with the configuration of its const parameters ({const_list}) tuned for this problem class, the grid computed from the arguments, and returns that configuration: on a GPU the first problem of each class times the candidates (see `tile::autotune`), later ones reuse the choice; a grid under one wave (always, on the CPU) runs the configuration with the most blocks without timing. Otherwise as `launch_with`."
        );
        let doc_with = format!(
            "Runs `{name_str}` on `on` in the configuration `config` (one of `KERNEL.candidates(..)`, or what `run` returned), the grid computed from the arguments: no tuning. Otherwise as `launch_with`."
        );
        quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            pub fn run #launch_with_generics (
                on: &#backend,
                #(#params),*
            ) -> ::core::result::Result<::tile::Tuned, ::tile::Error> {
                #launch_with_check
                let types = [#(<#type_idents as ::tile::Element>::DTYPE),*];
                ::tile::__private::run_tuned(on, &KERNEL, &types, &mut [#(#args),*])
            }

            #[doc = #doc_with]
            #[allow(clippy::too_many_arguments)]
            pub fn run_with #launch_with_generics (
                on: &#backend,
                config: ::tile::Tuned,
                #(#params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #launch_with_check
                let types = [#(<#type_idents as ::tile::Element>::DTYPE),*];
                ::tile::__private::run_config(on, &KERNEL, &types, config, &mut [#(#args),*])
            }
        }
    });
    quote! {
        #(#attrs)*
        #[allow(non_snake_case)]
        #vis mod #name {
            /// Everything the compiler produced for this kernel: one PTX entry
            /// per specialization, with and without 16-byte vector accesses,
            /// and the CPU version.
            pub static KERNEL: ::tile::KernelSpec = ::tile::KernelSpec {
                name: #name_str,
                module_path: ::core::module_path!(),
                params: &[#(#param_specs),*],
                types: &[#(#type_names),*],
                consts: &[#(#const_names),*],
                variants: &[#(#variants),*],
                cpu: cpu_version,
                tuning: #tuning,
            };

            #packed_ptx

            ::tile::__private::inventory::submit! { ::tile::KernelRef(&KERNEL) }

            #[doc = #doc_launch]
            #[allow(clippy::too_many_arguments)]
            pub fn launch #launch_generics (
                on: &#backend,
                grid: impl ::core::convert::Into<::tile::Grid>,
                #(#params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #launch_check
                dispatch::<#(#type_idents,)* #backend>(on, &[#(#const_idents as i64),*], grid.into(), #(#param_names),*)
            }

            #run

            #[doc = #doc_launch_with]
            #[allow(clippy::too_many_arguments)]
            pub fn launch_with #launch_with_generics (
                on: &#backend,
                consts: &[usize],
                grid: impl ::core::convert::Into<::tile::Grid>,
                #(#params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #launch_with_check
                let Ok(consts) = (consts.iter().map(|&c| i64::try_from(c)))
                    .collect::<::core::result::Result<::std::vec::Vec<i64>, _>>()
                else {
                    return ::core::result::Result::Err(::tile::Error::Argument {
                        kernel: KERNEL.name,
                        reason: ::std::format!("const values {consts:?}: none past i64::MAX is built"),
                    });
                };
                dispatch::<#(#type_idents,)* #backend>(on, &consts, grid.into(), #(#param_names),*)
            }

            /// What `launch` and `launch_with` run once their checks passed:
            /// the backend's launch with the arguments type-erased.
            #[allow(clippy::too_many_arguments)]
            fn dispatch #launch_with_generics (
                on: &#backend,
                consts: &[i64],
                grid: ::tile::Grid,
                #(#params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                let types = [#(<#type_idents as ::tile::Element>::DTYPE),*];
                ::tile::Backend::launch_kernel(on, &KERNEL, &types, consts, grid, &mut [#(#args),*])
            }

            /// The CPU version (`KERNEL.cpu`): the specialization's reference
            /// code on every block, one after another.
            fn cpu_version(
                types: &[::tile::DType],
                consts: &[i64],
                grid: ::tile::Grid,
                args: &mut [::tile::HostArg<'_>],
            ) -> ::core::result::Result<(), ::tile::Error> {
                let nblocks = [grid.x as i32, grid.y as i32, grid.z as i32];
                #(#cpu_arms)*
                ::core::result::Result::Err(::tile::Error::NotBuilt {
                    kernel: #name_str,
                    consts: consts.to_vec(),
                })
            }

            #(#cpu_fns)*
        }
    }
}
