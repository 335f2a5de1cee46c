//! A variant's `.entry` text: as the compiler writes it, or as a program
//! stores it, packed.
//!
//! A program that links a kernel library would otherwise carry the text of
//! every variant, most of which it never loads. `#[tile::kernel]` packs the
//! entries of each kernel (its variants differ in a few places) into one
//! compressed stream; the runtime inflates a stream when it loads
//! one of its variants (`tile_runtime::ptx`), the only reader of [`Packed`].

use std::borrow::Cow;
use std::ops::Range;

/// The `.entry` text of a variant, without the module header (see
/// [`Target::header`](crate::Target::header)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ptx {
    /// The text itself: what the compiler makes.
    Text(Cow<'static, str>),
    /// The text packed with its kernel's other entries: what
    /// `#[tile::kernel]` writes into a program.
    Packed(Packed),
}

impl Ptx {
    /// The text, if it is not packed (the compiler's output is not).
    pub fn text(&self) -> Option<&str> {
        match self {
            Ptx::Text(text) => Some(text),
            Ptx::Packed(_) => None,
        }
    }
}

/// Where a packed entry is: `range` of the text that `stream` inflates to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed {
    /// A Brotli stream of the entries of one kernel, one after
    /// another, shared by its variants.
    pub stream: &'static [u8],
    /// The entry's bytes within the inflated text.
    pub range: Range<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packed entry as the expansion writes it: its stream in a `static`.
    static STREAM: [u8; 3] = [1, 2, 3];
    static PACKED: Ptx = Ptx::Packed(Packed {
        stream: &STREAM,
        range: 4..9,
    });

    #[test]
    fn only_unpacked_text_reads_as_text() {
        assert_eq!(Ptx::Text(Cow::Borrowed(".entry k")).text(), Some(".entry k"));
        assert_eq!(PACKED.text(), None);
    }
}
