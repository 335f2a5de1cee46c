//! Packs the PTX entries of a kernel into one compressed stream: how
//! `#[tile::kernel]` stores PTX in a program (`tile_spec::Packed`), which
//! the runtime inflates, as far as the entry it loads, when it loads one.
//!
//! A kernel's entries differ from each other in a few places (tile sizes,
//! element types, access widths, targets), so one stream for all of them
//! compresses several times better than one per specialization; inflating
//! runs at hundreds of megabytes a second, a small part of a module load.
//! Brotli at quality 9: quality 11 packs a third smaller at twenty times
//! the encoding time, more than the rest of the macro.

use std::io::Write;
use std::ops::Range;

/// The encoder's effort (Brotli quality, `0..=11`).
const QUALITY: u32 = 9;
/// The encoder's window, as a power of two: Brotli's largest, spanning the
/// entries of most kernels, so that an entry may refer back to the others.
const WINDOW_BITS: u32 = 24;
/// The encoder's input buffer.
const BUFFER_BYTES: usize = 1 << 16;

/// `entries` one after another as one Brotli stream, and the range of each
/// in the inflated text.
pub fn pack(entries: &[&str]) -> (Vec<u8>, Vec<Range<usize>>) {
    let mut ranges = Vec::with_capacity(entries.len());
    let mut writer = brotli::CompressorWriter::new(Vec::new(), BUFFER_BYTES, QUALITY, WINDOW_BITS);
    let mut end = 0;
    for entry in entries {
        writer.write_all(entry.as_bytes()).expect("compressing into memory");
        ranges.push(end..end + entry.len());
        end += entry.len();
    }
    (writer.into_inner(), ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_packed_stream_inflates_to_the_entries_in_their_ranges() {
        let entries = [".entry a()\n{\n\tret;\n}\n", "", ".entry b()\n{\n\tret;\n}\n"];
        let (stream, ranges) = pack(&entries);
        let mut text = String::new();
        brotli::Decompressor::new(&stream[..], BUFFER_BYTES)
            .read_to_string(&mut text)
            .unwrap();
        let unpacked: Vec<&str> = ranges.into_iter().map(|r| &text[r]).collect();
        assert_eq!(unpacked, entries);
    }
}
