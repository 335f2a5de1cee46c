//! A program stores its kernels' PTX packed (see `tile::Ptx`); what the
//! runtime hands the driver must still be the compiler's PTX, byte for
//! byte. For every kernel of the library, every variant and every target it
//! runs on, the module `tile::ptx::module` makes is the target's header
//! and the entry that `tile_compiler::compile` makes from the same source,
//! and the rest of the variant is the compiler's too.

use quote::ToTokens;
use std::path::Path;
use tile::{Ptx, Target};
// Links the library, so that its kernels are in the registry.
use tile_kernels as _;

/// A `#[tile::kernel(..)]` function of the library's sources, as the macro
/// receives it.
struct Source {
    /// The kernel's `KernelSpec::module_path`.
    module_path: String,
    /// What goes inside the attribute's parentheses.
    attr: String,
    /// The function without the attribute.
    item: String,
}

/// Every kernel of the library's sources: each file's functions that carry
/// the attribute, in inline modules too.
fn sources() -> Vec<Source> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let stem = path.file_stem().unwrap().to_str().unwrap();
            let module = match stem {
                "lib" => "tile_kernels".to_string(),
                _ => format!("tile_kernels::{stem}"),
            };
            collect(&file.items, &module, &mut out);
        }
    }
    out
}

fn collect(items: &[syn::Item], module: &str, out: &mut Vec<Source>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => {
                let is_kernel = |a: &syn::Attribute| a.path().to_token_stream().to_string() == "tile :: kernel";
                let Some(attr) = f.attrs.iter().find(|a| is_kernel(a)) else {
                    continue;
                };
                let attr = match &attr.meta {
                    syn::Meta::List(list) => list.tokens.to_string(),
                    _ => String::new(),
                };
                let mut f = f.clone();
                f.attrs.retain(|a| !is_kernel(a));
                out.push(Source {
                    module_path: format!("{module}::{}", f.sig.ident),
                    attr,
                    item: f.to_token_stream().to_string(),
                });
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    collect(inner, &format!("{module}::{}", m.ident), out);
                }
            }
            _ => {}
        }
    }
}

#[test]
fn every_variant_loads_the_compilers_ptx_on_every_target() {
    let sources = sources();
    let mut kernels = tile::registered_kernels();
    kernels.retain(|k| k.module_path.starts_with("tile_kernels::"));
    assert_eq!(
        kernels.len(),
        sources.len(),
        "a kernel of the sources is not registered"
    );
    let mut modules = 0;
    for k in kernels {
        let source = (sources.iter())
            .find(|s| s.module_path == k.module_path)
            .unwrap_or_else(|| panic!("no source for {}", k.module_path));
        let compiled = tile_compiler::compile_str(&source.attr, &source.item)
            .unwrap_or_else(|e| panic!("{}: {}", k.name, e.message));
        assert_eq!(k.variants.len(), compiled.variants.len(), "{}", k.name);
        for (stored, made) in k.variants.iter().zip(&compiled.variants) {
            assert!(
                matches!(stored.ptx, Ptx::Packed(_)),
                "{} is stored unpacked",
                stored.entry
            );
            let text = made.ptx.text().expect("the compiler's PTX is text");
            assert_eq!(tile::ptx::entry(stored), text, "{}", stored.entry);
            let with_compiled_ptx = tile::Variant {
                ptx: made.ptx.clone(),
                ..stored.clone()
            };
            assert_eq!(&with_compiled_ptx, made);
            for target in Target::ALL
                .into_iter()
                .filter(|t| stored.target.is_none_or(|only| only == *t))
            {
                let module = tile::ptx::module(target, stored);
                assert!(
                    module == target.header() + text,
                    "{} on {}",
                    stored.entry,
                    target.name()
                );
                modules += 1;
            }
        }
    }
    println!("{modules} variant x target modules are the compiler's PTX");
}
