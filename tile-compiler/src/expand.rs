//! What `#[tile::kernel]` expands to: a module named after the kernel with
//! the PTX of every specialization, a typed GPU launcher, the CPU reference
//! function, and a registration in the kernel registry.

use crate::ast::ParamKind;
use crate::cpu::{self, rust_type};
use crate::dtype::DType;
use crate::{CompiledKernel, Variant};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

fn runtime_dtype(d: DType) -> TokenStream {
    match d {
        DType::F32 => quote!(::tile::DType::F32),
        DType::F16 => quote!(::tile::DType::F16),
        DType::BF16 => quote!(::tile::DType::BF16),
        DType::I32 => quote!(::tile::DType::I32),
        DType::U32 => quote!(::tile::DType::U32),
        DType::Bool => unreachable!("no bool tensors or parameters"),
    }
}

fn variant_spec(v: &Variant) -> TokenStream {
    let consts = &v.consts;
    let Variant {
        vectorized,
        entry,
        ptx,
        threads,
        shared_bytes,
        ..
    } = v;
    quote! {
        ::tile::VariantSpec {
            consts: &[#(#consts),*],
            vectorized: #vectorized,
            entry: #entry,
            threads: #threads,
            shared_bytes: #shared_bytes,
            ptx: #ptx,
        }
    }
}

pub fn expand(k: &CompiledKernel) -> TokenStream {
    let ast = &k.kernel;
    let name = &ast.name;
    let name_str = name.to_string();
    let vis = &ast.vis;
    let attrs = ast.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let const_names: Vec<String> = ast.consts.iter().map(|c| c.name.to_string()).collect();
    let const_idents: Vec<_> = ast.consts.iter().map(|c| c.name.clone()).collect();
    let first = &k.funcs[0].1;

    let param_specs = ast.params.iter().enumerate().map(|(i, p)| {
        let pname = p.name.to_string();
        match p.kind {
            ParamKind::Tensor { dtype, mutable } => {
                let rank = match &first.params[i] {
                    crate::ir::Param::Tensor(t) => t.rank,
                    _ => unreachable!(),
                };
                let d = runtime_dtype(dtype);
                quote!(::tile::ParamSpec::Tensor { name: #pname, dtype: #d, rank: #rank, mutable: #mutable })
            }
            ParamKind::Scalar(dtype) => {
                let d = runtime_dtype(dtype);
                quote!(::tile::ParamSpec::Scalar { name: #pname, dtype: #d })
            }
        }
    });
    let variants = k.variants.iter().map(variant_spec);

    // Typed signatures.
    let pnames: Vec<_> = ast.params.iter().map(|p| p.name.clone()).collect();
    let gpu_params = ast.params.iter().map(|p| {
        let n = &p.name;
        match p.kind {
            ParamKind::Tensor { dtype, mutable: false } => {
                let t = rust_type(dtype);
                quote!(#n: &::tile::Tensor<#t>)
            }
            ParamKind::Tensor { dtype, mutable: true } => {
                let t = rust_type(dtype);
                quote!(#n: &mut ::tile::Tensor<#t>)
            }
            ParamKind::Scalar(dtype) => {
                let t = rust_type(dtype);
                quote!(#n: #t)
            }
        }
    });
    let cpu_params: Vec<TokenStream> = ast
        .params
        .iter()
        .map(|p| {
            let n = &p.name;
            match p.kind {
                ParamKind::Tensor { dtype, mutable: false } => {
                    let t = rust_type(dtype);
                    quote!(#n: &::tile::HostTensor<#t>)
                }
                ParamKind::Tensor { dtype, mutable: true } => {
                    let t = rust_type(dtype);
                    quote!(#n: &mut ::tile::HostTensor<#t>)
                }
                ParamKind::Scalar(dtype) => {
                    let t = rust_type(dtype);
                    quote!(#n: #t)
                }
            }
        })
        .collect();
    let args = ast.params.iter().map(|p| {
        let n = &p.name;
        match p.kind {
            ParamKind::Tensor { mutable: false, .. } => quote!(::tile::Arg::tensor(#n)),
            ParamKind::Tensor { mutable: true, .. } => quote!(::tile::Arg::tensor_mut(#n)),
            ParamKind::Scalar(DType::F32) => quote!(::tile::Arg::F32(#n)),
            ParamKind::Scalar(DType::U32) => quote!(::tile::Arg::U32(#n)),
            ParamKind::Scalar(_) => quote!(::tile::Arg::I32(#n)),
        }
    });
    let cpu_shapes = ast.params.iter().map(|p| {
        let n = &p.name;
        match p.kind {
            ParamKind::Tensor { .. } => quote!(::core::option::Option::Some(#n.shape())),
            ParamKind::Scalar(_) => quote!(::core::option::Option::None),
        }
    });

    // The specialization check: a compile error where the values are known.
    let generics = if const_idents.is_empty() {
        quote!()
    } else {
        quote!(<#(const #const_idents: usize),*>)
    };
    let listed = ast.consts.iter().map(|c| {
        let id = &c.name;
        let vals = &c.values;
        let msg = format!(
            "`{}` is not built for this value of `{}`: use one of {:?}, or add the value to #[tile::kernel({} = [..])]",
            name_str, id, vals, id
        );
        quote!(::core::assert!(#(#id == #vals)||*, #msg);)
    });
    let listed: Vec<_> = listed.collect();
    let const_check = if listed.is_empty() {
        quote!()
    } else {
        quote!(const { #(#listed)* };)
    };
    let const_values = quote!(&[#(#const_idents as i64),*]);

    // One CPU function per specialization, chosen by the const values.
    let cpu_fns = k.funcs.iter().enumerate().map(|(i, (_, f))| {
        let fname = format_ident!("cpu_specialization_{}", i);
        let body = cpu::body(f);
        quote! {
            #[allow(unused_variables, unused_mut, unused_parens, non_snake_case, clippy::all)]
            fn #fname(block: [i32; 3], nblocks: [i32; 3], #(#cpu_params),*) {
                #body
            }
        }
    });
    let cpu_arms = k.funcs.iter().enumerate().map(|(i, (consts, _))| {
        let fname = format_ident!("cpu_specialization_{}", i);
        quote! {
            [#(#consts),*] => #fname(block, nblocks, #(#pnames),*),
        }
    });

    let doc_launch = format!(
        "Launches `{name_str}` on `stream` over `grid` blocks. Checks ranks, sizes and alignment first and returns a typed error instead of launching with bad arguments."
    );
    let doc_cpu = format!(
        "Runs `{name_str}` on the CPU, block after block: the reference the GPU version is tested against."
    );
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
                #const_check
                ::tile::__private::launch(&KERNEL, #const_values, stream, grid.into(), &[#(#args),*])
            }

            #[doc = #doc_cpu]
            #[allow(clippy::too_many_arguments)]
            pub fn cpu #generics (
                grid: impl ::core::convert::Into<::tile::Grid>,
                #(#cpu_params),*
            ) -> ::core::result::Result<(), ::tile::Error> {
                #const_check
                let grid: ::tile::Grid = grid.into();
                ::tile::__private::check_cpu_args(&KERNEL, &[#(#cpu_shapes),*], grid)?;
                let consts: &[i64] = #const_values;
                let nblocks = [grid.x as i32, grid.y as i32, grid.z as i32];
                for z in 0..grid.z {
                    for y in 0..grid.y {
                        for x in 0..grid.x {
                            let block = [x as i32, y as i32, z as i32];
                            match consts {
                                #(#cpu_arms)*
                                _ => ::core::unreachable!("the const check admits only listed values"),
                            }
                        }
                    }
                }
                ::core::result::Result::Ok(())
            }

            #(#cpu_fns)*
        }
    }
}
