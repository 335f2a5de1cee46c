//! How a tile lies in shared memory: rows in 128-byte panels, 16-byte
//! chunks XORed with the row's phase (the hardware's swizzle modes).

/// Where 16-byte chunk `chunk` of row `row` of a `rows x row_bytes` tile
/// lives in shared memory: rows longer than 128 bytes are cut into panels
/// of 128-byte columns stored one after another, and within a panel the
/// chunk index is XORed with the row's 128-byte line, so that eight
/// consecutive rows at one chunk (what `ldmatrix` reads) and eight
/// consecutive chunks (what a quarter-warp stores) fall in distinct banks.
/// This is exactly the hardware's 128/64/32-byte swizzle (CUTLASS's
/// `Swizzle<3|2|1, 4, 3>`) on a 1024-byte-aligned tile, which `wgmma`
/// descriptors and TMA name by mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swizzle {
    pub rows: usize,
    pub row_bytes: usize,
}

impl Swizzle {
    /// Bytes of one row within a panel.
    pub fn line_bytes(&self) -> usize {
        self.row_bytes.min(128)
    }

    pub fn rows_per_line(&self) -> usize {
        128 / self.line_bytes()
    }

    pub fn phases(&self) -> usize {
        self.line_bytes() / 16
    }

    /// The bytes a set bit `bit` of an element's row (`row`) or column
    /// index (elements of `eb` bytes) adds to its address whatever the
    /// other bits are, or `None` for the bits the XOR pattern mixes: the
    /// rows' phase and the columns' chunk within a line.
    pub fn bit_offset(&self, row: bool, bit: u32, eb: usize) -> Option<usize> {
        let (per_line, phases) = (self.rows_per_line().trailing_zeros(), self.phases().trailing_zeros());
        if row {
            return (!(per_line..per_line + phases).contains(&bit)).then(|| (1 << bit) * self.line_bytes());
        }
        let byte_bit = bit + eb.trailing_zeros();
        match byte_bit.checked_sub(4) {
            None => Some((1 << bit) * eb),
            Some(chunk_bit) if chunk_bit < phases => None,
            // Past a 128-byte line: the panel.
            Some(chunk_bit) => Some((1 << (chunk_bit - 3)) * self.rows * 128),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Swizzle;

    /// The address of element (`row`, `col`) as `Swizzle::swizzled` computes it.
    fn address(sw: &Swizzle, row: usize, col: usize, eb: usize) -> usize {
        let byte = col * eb;
        let (chunk, within) = (byte / 16, byte % 16);
        let phase = (row / sw.rows_per_line()) % sw.phases();
        let c = chunk ^ phase;
        let at = if sw.row_bytes > 128 {
            ((c >> 3) * sw.rows * 8 + row * 8 + (c & 7)) * 16
        } else {
            c * 16 + row * sw.row_bytes
        };
        at + within
    }

    #[test]
    fn bits_the_swizzle_leaves_alone_add_constant_offsets() {
        for (rows, cols, eb) in [(32, 128, 4), (32, 32, 4), (16, 16, 4), (64, 64, 2), (8, 256, 4)] {
            let sw = Swizzle {
                rows,
                row_bytes: cols * eb,
            };
            for (row, dim_bits) in [(true, rows.trailing_zeros()), (false, cols.trailing_zeros())] {
                for bit in 0..dim_bits {
                    let Some(offset) = sw.bit_offset(row, bit, eb) else {
                        continue;
                    };
                    for r in (0..rows).filter(|r| !row || r >> bit & 1 == 0) {
                        for c in (0..cols).filter(|c| row || c >> bit & 1 == 0) {
                            let (r2, c2) = if row { (r | 1 << bit, c) } else { (r, c | 1 << bit) };
                            assert_eq!(
                                address(&sw, r2, c2, eb),
                                address(&sw, r, c, eb) + offset,
                                "{rows}x{cols} ({eb} B): {} bit {bit}",
                                if row { "row" } else { "column" }
                            );
                        }
                    }
                }
            }
        }
    }
}
