//! The PTX of a variant: its `.entry` text, inflated where the program
//! stores it packed (see [`tile_spec::Packed`]), and the module that holds
//! it for a target. Everything that reads a variant's PTX goes through
//! here: the module cache, which loads each variant once per device, and
//! tools (`tile-ptx`, the ptxas test).

use std::borrow::Cow;
use std::io::Read;
use tile_spec::{Packed, Ptx, Target, Variant};

/// The decompressor's input buffer.
const BUFFER_BYTES: usize = 1 << 16;

/// The `.entry` text of `v`, without the module header: borrowed where it
/// is text, else inflated from its kernel's stream, as far as the
/// entry ends.
pub fn entry(v: &Variant) -> Cow<'_, str> {
    match &v.ptx {
        Ptx::Text(text) => Cow::Borrowed(text),
        Ptx::Packed(packed) => Cow::Owned(inflate(packed, &v.entry)),
    }
}

/// The target whose module the runtime loads `v` in: its own, or sm_90's
/// for portable PTX, which the driver compiles for newer GPUs too.
pub fn load_target(v: &Variant) -> Target {
    v.target.unwrap_or(Target::Sm90)
}

/// A complete PTX module holding `v` for `target`: the target's header,
/// then the entry.
pub fn module(target: Target, v: &Variant) -> String {
    target.header() + &entry(v)
}

/// The text of the packed entry `name`. The stream is what
/// `#[tile::kernel]` wrote into the program, so one that does not inflate
/// to the entry is a bug in the build, not an error to handle.
fn inflate(packed: &Packed, name: &str) -> String {
    let mut bytes = Vec::with_capacity(packed.range.end);
    (brotli_decompressor::Decompressor::new(packed.stream, BUFFER_BYTES))
        .take(packed.range.end as u64)
        .read_to_end(&mut bytes)
        .unwrap_or_else(|e| panic!("the packed PTX of {name} does not inflate: {e}"));
    assert_eq!(bytes.len(), packed.range.end, "the packed PTX of {name} ends early");
    String::from_utf8(bytes.split_off(packed.range.start))
        .unwrap_or_else(|e| panic!("the packed PTX of {name} is not text: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A portable variant named `entry` whose PTX is `ptx`.
    fn variant(entry: &'static str, ptx: Ptx) -> Variant {
        Variant {
            types: Cow::Borrowed(&[]),
            consts: Cow::Borrowed(&[]),
            vectorized: Cow::Borrowed(&[]),
            entry: Cow::Borrowed(entry),
            threads: 32,
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            target: None,
            tensor_maps: Cow::Borrowed(&[]),
            tma_only: Cow::Borrowed(&[]),
            persistent: false,
            cluster: 1,
            gathers: false,
            ptx,
        }
    }

    const ENTRIES: [&str; 3] = [
        ".visible .entry a()\n{\n\tret;\n}\n",
        ".visible .entry b()\n{\n\tbar.sync 0;\n\tret;\n}\n",
        ".visible .entry c()\n{\n\tret;\n}\n",
    ];

    /// The entries packed as the macro packs a kernel's.
    fn packed() -> Vec<Variant> {
        let (stream, ranges) = tile_compiler::pack::pack(&ENTRIES);
        let stream: &'static [u8] = Vec::leak(stream);
        (ranges.into_iter())
            .map(|range| variant("k", Ptx::Packed(Packed { stream, range })))
            .collect()
    }

    #[test]
    fn each_packed_entry_inflates_to_its_own_text() {
        let texts: Vec<String> = packed().iter().map(|v| entry(v).into_owned()).collect();
        assert_eq!(texts, ENTRIES);
    }

    #[test]
    fn text_is_borrowed_not_copied() {
        let v = variant("a", Ptx::Text(Cow::Borrowed(ENTRIES[0])));
        assert!(matches!(entry(&v), Cow::Borrowed(t) if t == ENTRIES[0]));
    }

    #[test]
    fn a_module_is_the_header_then_the_entry() {
        let v = &packed()[1];
        assert_eq!(module(Target::Sm90, v), Target::Sm90.header() + ENTRIES[1]);
        assert!(module(Target::Sm120a, v).contains(".target sm_120a\n.address_size 64\n\n.visible .entry b()"));
    }

    #[test]
    #[should_panic(expected = "the packed PTX of k ends early")]
    fn a_range_past_the_stream_is_a_bug_found_at_load() {
        let mut v = packed().remove(2);
        let Ptx::Packed(p) = &mut v.ptx else { unreachable!() };
        p.range.end += 1;
        entry(&v);
    }
}
