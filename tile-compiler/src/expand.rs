//! What `#[tile::kernel]` expands to: a module named after the kernel with
//! the PTX of every specialization, a typed GPU launcher, the CPU reference
//! function, and a registration in the kernel registry.

use crate::ast::{Elem, ParamKind};
use crate::cpu::{self, rust_type};
use crate::dtype::DType;
use crate::{CompiledKernel, Variant};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// `d` as the expansion writes it: `::tile::DType::F32`.
fn runtime_dtype(d: DType) -> TokenStream {
    let name = format_ident!("{d:?}");
    quote!(::tile::DType::#name)
}

/// `Cow::Borrowed(&[..])` of `items`: a slice in `static` data.
fn borrowed_slice(items: impl Iterator<Item = TokenStream>) -> TokenStream {
    quote!(::std::borrow::Cow::Borrowed(&[#(#items),*]))
}

/// A variant as a `static` `::tile::Variant` (see `tile_spec::Variant`).
fn variant_spec(v: &Variant) -> TokenStream {
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
        ptx,
    } = v;
    let (entry, ptx) = (entry.as_ref(), ptx.as_ref());
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
            ptx: ::std::borrow::Cow::Borrowed(#ptx),
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
            ParamKind::Tensor { elem, mutable } => {
                let rank = match &first.params[i] {
                    crate::ir::Param::Tensor(t) => t.rank,
                    _ => unreachable!(),
                };
                let elem = match elem {
                    Elem::Fixed(d) => d.name().to_string(),
                    Elem::Param(n) => n.clone(),
                };
                quote!(::tile::ParamSpec::Tensor { name: #pname, elem: #elem, rank: #rank, mutable: #mutable })
            }
            ParamKind::Scalar(dtype) => {
                let d = runtime_dtype(*dtype);
                quote!(::tile::ParamSpec::Scalar { name: #pname, dtype: #d })
            }
        }
    });
    let variants = k.variants.iter().map(variant_spec);

    let signature = |host: bool| -> Vec<TokenStream> {
        ast.params
            .iter()
            .map(|p| {
                let n = &p.name;
                let tensor = if host {
                    quote!(::tile::HostTensor)
                } else {
                    quote!(::tile::Tensor)
                };
                match &p.kind {
                    ParamKind::Tensor { elem, mutable: false } => {
                        let t = elem_type(elem);
                        quote!(#n: &#tensor<#t>)
                    }
                    ParamKind::Tensor { elem, mutable: true } => {
                        let t = elem_type(elem);
                        quote!(#n: &mut #tensor<#t>)
                    }
                    ParamKind::Scalar(dtype) => {
                        let t = rust_type(*dtype);
                        quote!(#n: #t)
                    }
                }
            })
            .collect()
    };
    let gpu_params = signature(false);
    let cpu_params = signature(true);
    let args: Vec<TokenStream> = ast
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match p.kind {
                ParamKind::Tensor { mutable: false, .. } => quote!(::tile::Arg::tensor(#n)),
                ParamKind::Tensor { mutable: true, .. } => quote!(::tile::Arg::tensor_mut(#n)),
                ParamKind::Scalar(DType::F32) => quote!(::tile::Arg::F32(#n)),
                ParamKind::Scalar(DType::U32) => quote!(::tile::Arg::U32(#n)),
                ParamKind::Scalar(_) => quote!(::tile::Arg::I32(#n)),
            }
        })
        .collect();
    let cpu_shapes = ast.params.iter().map(|p| {
        let n = &p.name;
        match p.kind {
            ParamKind::Tensor { .. } => quote!(::core::option::Option::Some(#n.shape())),
            ParamKind::Scalar(_) => quote!(::core::option::Option::None),
        }
    });

    // Generic parameters of the generated functions, and the check that the
    // chosen values were built: a compile error where they are known.
    let generics = if type_idents.is_empty() && const_idents.is_empty() {
        quote!()
    } else {
        quote!(<#(#type_idents: ::tile::Element,)* #(const #const_idents: usize),*>)
    };
    let type_checks = ast.types.iter().map(|t| {
        let id = &t.name;
        let pats = t.dtypes.iter().map(|d| runtime_dtype(*d));
        let names: Vec<&str> = t.dtypes.iter().map(|d| d.name()).collect();
        let msg = format!(
            "`{name_str}` is not built for this element type `{id}`: use one of {names:?}, or add it to #[tile::kernel({id} = [..])]"
        );
        quote!(::core::assert!(::core::matches!(<#id as ::tile::Element>::DTYPE, #(#pats)|*), #msg);)
    });
    let const_checks = ast.consts.iter().map(|c| {
        let id = &c.name;
        let vals: Vec<usize> = c.values.iter().map(|&v| v as usize).collect();
        let msg = format!(
            "`{name_str}` is not built for this value of `{id}`: use one of {vals:?}, or add the value to #[tile::kernel({id} = [..])]"
        );
        quote!(::core::assert!(#(#id == #vals)||*, #msg);)
    });
    let type_checks: Vec<TokenStream> = type_checks.collect();
    let checks: Vec<TokenStream> = type_checks.iter().cloned().chain(const_checks).collect();
    let build_check = if checks.is_empty() {
        quote!()
    } else {
        quote!(const { #(#checks)* };)
    };
    let type_values = quote!(&[#(<#type_idents as ::tile::Element>::DTYPE),*]);
    let const_values = quote!(&[#(#const_idents as i64),*]);

    // One CPU function per specialization, chosen at run time by the
    // generic arguments; tensors are re-typed to the specialization's types.
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
            fn #fname(block: [i32; 3], nblocks: [i32; 3], #(#concrete),*) {
                #body
            }
        }
    });
    let cpu_arms = k.funcs.iter().enumerate().map(|(i, s)| {
        let fname = format_ident!("cpu_specialization_{}", i);
        let types = s.types.iter().map(|d| runtime_dtype(*d));
        let consts = &s.consts;
        let call_args = ast.params.iter().map(|p| {
            let n = &p.name;
            match p.kind {
                ParamKind::Tensor { mutable: false, .. } => quote!(::tile::__private::retype(#n)),
                ParamKind::Tensor { mutable: true, .. } => quote!(::tile::__private::retype_mut(#n)),
                ParamKind::Scalar(_) => quote!(#n),
            }
        });
        quote! {
            if types == [#(#types),*] && consts == [#(#consts),*] {
                #fname(block, nblocks, #(#call_args),*);
                continue;
            }
        }
    });

    // With const parameters: `launch_with`, their values given at run time
    // (an autotuner's candidates), the element types still generic.
    let launch_with = if const_idents.is_empty() {
        quote!()
    } else {
        let type_check = if type_checks.is_empty() {
            quote!()
        } else {
            quote!(const { #(#type_checks)* };)
        };
        let const_names = const_idents
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let doc = format!(
            "Launches the specialization of `{name_str}` whose const parameters ({const_names}) take `consts`, chosen at run time: a combination not built is an `Error::NotBuilt`. `KERNEL.specializations(..)` lists the built ones. Otherwise as `launch`."
        );
        quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            pub fn launch_with<#(#type_idents: ::tile::Element),*>(
                stream: &::tile::Stream,
                consts: &[usize],
                grid: impl ::core::convert::Into<::tile::Grid>,
                #(#gpu_params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #type_check
                let consts: ::std::vec::Vec<i64> = consts.iter().map(|&c| c as i64).collect();
                ::tile::__private::launch(&KERNEL, #type_values, &consts, stream, grid.into(), &mut [#(#args),*])
            }
        }
    };

    let doc_launch = format!(
        "Launches `{name_str}` on `stream` over `grid` blocks. Checks ranks, sizes and alignment first and returns a typed error instead of launching with bad arguments."
    );
    let doc_cpu =
        format!("Runs `{name_str}` on the CPU, block after block: the reference the GPU version is tested against.");
    quote! {
        #(#attrs)*
        #[allow(non_snake_case)]
        #vis mod #name {
            /// Everything the compiler produced for this kernel: one PTX entry
            /// per specialization, with and without 16-byte vector accesses.
            pub static KERNEL: ::tile::KernelSpec = ::tile::KernelSpec {
                name: #name_str,
                module_path: ::core::module_path!(),
                params: &[#(#param_specs),*],
                types: &[#(#type_names),*],
                consts: &[#(#const_names),*],
                variants: &[#(#variants),*],
            };

            ::tile::__private::inventory::submit! { ::tile::KernelRef(&KERNEL) }

            #[doc = #doc_launch]
            #[allow(clippy::too_many_arguments)]
            pub fn launch #generics (
                stream: &::tile::Stream,
                grid: impl ::core::convert::Into<::tile::Grid>,
                #(#gpu_params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #build_check
                ::tile::__private::launch(&KERNEL, #type_values, #const_values, stream, grid.into(), &mut [#(#args),*])
            }

            #launch_with

            #[doc = #doc_cpu]
            #[allow(clippy::too_many_arguments)]
            pub fn cpu #generics (
                grid: impl ::core::convert::Into<::tile::Grid>,
                #(#cpu_params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #build_check
                let grid: ::tile::Grid = grid.into();
                ::tile::__private::check_cpu_args(&KERNEL, &[#(#cpu_shapes),*], grid)?;
                let types: &[::tile::DType] = #type_values;
                let consts: &[i64] = #const_values;
                let nblocks = [grid.x as i32, grid.y as i32, grid.z as i32];
                for block_z in 0..grid.z {
                    for block_y in 0..grid.y {
                        for block_x in 0..grid.x {
                            let block = [block_x as i32, block_y as i32, block_z as i32];
                            #(#cpu_arms)*
                            // Listed values, but a combination the attribute skips.
                            return ::core::result::Result::Err(::tile::Error::NotBuilt {
                                kernel: #name_str,
                                consts: consts.to_vec(),
                            });
                        }
                    }
                }
                ::core::result::Result::Ok(())
            }

            #(#cpu_fns)*
        }
    }
}
