//! `#[tile::kernel]`: compiles a DSL function to PTX while `cargo build`
//! runs. All the work happens in `tile-compiler`; this crate only hands it
//! the tokens.

use proc_macro::TokenStream;

/// Compiles the function to PTX for every listed specialization and replaces
/// it with a module holding `launch_with` and `launch` (on a GPU stream or
/// `tile::Cpu`), `KERNEL` (the PTX and the CPU reference version), and a
/// registration in the kernel registry. See the `tile` crate docs.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    tile_compiler::expand(attr.into(), item.into()).into()
}
