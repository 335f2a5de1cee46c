//! The compiler behind `#[tile::kernel]`.
//!
//! Pipeline, one module per stage: [`parse`] (syn to a spanned AST) →
//! [`check`] (types, shapes, broadcasting; builds the SSA [`ir`]) →
//! [`simplify`] (constant folding, CSE, dead code) → [`layout`] (a thread
//! mapping for every tile, conversions inserted) → [`lower`] (per-thread PTX
//! instructions) → [`ptx`] (text per target); and from the same IR, [`cpu`]
//! (the reference backend as Rust). [`mod@expand`] assembles the macro
//! output, with the PTX [`pack`]ed.
//!
//! Kept out of the proc-macro crate so that it can be tested directly and
//! reused by tools.

pub mod ast;
pub mod check;
pub mod compile;
pub mod cpu;
pub mod dtype;
pub mod error;
pub mod expand;
pub mod ir;
pub mod layout;
pub mod lower;
pub mod pack;
pub mod parse;
pub mod plan;
pub mod ptx;
pub mod simplify;
pub mod variants;
pub mod warps;

pub use compile::{CompiledKernel, Specialization, compile};
pub use error::{Error, Result};
pub use tile_spec::{Ptx, Target, Variant};

use proc_macro2::TokenStream;

/// The macro's entry point: the expansion, or a `compile_error!` at the mistake.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match compile(attr, item) {
        Ok(k) => expand::expand(&k),
        Err(e) => e.to_compile_error(),
    }
}

/// Compiles kernel source text (`attr` is what goes inside `#[tile::kernel(..)]`).
pub fn compile_str(attr: &str, item: &str) -> Result<CompiledKernel> {
    let attr: TokenStream = attr
        .parse()
        .map_err(|e| Error::new(proc_macro2::Span::call_site(), format!("attribute: {e}")))?;
    let item: TokenStream = item
        .parse()
        .map_err(|e| Error::new(proc_macro2::Span::call_site(), format!("kernel source: {e}")))?;
    compile(attr, item)
}
