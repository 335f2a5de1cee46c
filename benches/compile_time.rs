//! What `#[tile::kernel]` adds to `cargo build`: the compiler's time for each
//! kernel of the library (all its specializations and their variants),
//! measured by compiling their source the way the macro does.
//!
//! `cargo bench --bench compile_time`

use std::time::Instant;

const SOURCES: [(&str, &str); 7] = [
    ("matmul.rs", include_str!("../tile-kernels/src/matmul.rs")),
    ("attention.rs", include_str!("../tile-kernels/src/attention.rs")),
    ("linear.rs", include_str!("../tile-kernels/src/linear.rs")),
    ("elementwise.rs", include_str!("../tile-kernels/src/elementwise.rs")),
    ("softmax.rs", include_str!("../tile-kernels/src/softmax.rs")),
    ("norm.rs", include_str!("../tile-kernels/src/norm.rs")),
    ("embedding.rs", include_str!("../tile-kernels/src/embedding.rs")),
];

fn main() {
    println!(
        "{:<16} {:>9} {:>12} {:>14}",
        "kernel", "variants", "total ms", "ms / variant"
    );
    for (file, src) in SOURCES {
        let parsed = syn::parse_file(src).unwrap_or_else(|e| panic!("{file}: {e}"));
        for item in parsed.items {
            let syn::Item::Fn(mut f) = item else { continue };
            let Some(pos) = f
                .attrs
                .iter()
                .position(|a| a.path().segments.last().is_some_and(|s| s.ident == "kernel"))
            else {
                continue;
            };
            let attr = f.attrs.remove(pos);
            let args = match &attr.meta {
                syn::Meta::List(l) => l.tokens.clone(),
                _ => Default::default(),
            };
            let item = quote::quote!(#f);
            // Warm up, then take the best of 5 (the macro runs once per build).
            let mut best = f64::INFINITY;
            let mut variants = 0;
            for _ in 0..6 {
                let t = Instant::now();
                let k = tile_compiler::compile(args.clone(), item.clone()).expect("library kernels compile");
                let _tokens = tile_compiler::expand::expand(&k);
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
                variants = k.variants.len();
            }
            println!(
                "{:<16} {:>9} {:>12.2} {:>14.3}",
                f.sig.ident.to_string(),
                variants,
                best,
                best / variants as f64
            );
        }
    }
}
