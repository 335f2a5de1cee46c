//! The launch grid: how many blocks run the kernel along each axis.

/// Blocks along x, y and z; `block_id(0)` runs over `0..x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// Blocks along x: `num_blocks(0)` in the kernel.
    pub x: u32,
    /// Blocks along y: `num_blocks(1)` in the kernel.
    pub y: u32,
    /// Blocks along z: `num_blocks(2)` in the kernel.
    pub z: u32,
    /// Whether the launch takes a variant whose blocks run in 2-CTA clusters that
    /// share operand tiles, where the kernel has one ([`Grid::in_clusters`]).
    pub clusters: bool,
}

impl Grid {
    /// Whether an axis has no blocks: such a launch runs nothing (a
    /// zero-sized problem), after its arguments are checked.
    pub fn is_empty(self) -> bool {
        self.x == 0 || self.y == 0 || self.z == 0
    }

    /// The same grid, its blocks run in 2-CTA clusters (clusters of two) that share
    /// the operand tiles both load, where the kernel has such a variant:
    /// the sm_90a `wgmma` variants with f32 (tf32) operands. Whether that
    /// is faster depends on the problem (`tile_kernels::matmul` lets
    /// `tile::autotune` decide); elsewhere it changes nothing.
    pub fn in_clusters(self) -> Grid {
        Grid { clusters: true, ..self }
    }
}

impl From<u32> for Grid {
    fn from(x: u32) -> Grid {
        Grid {
            x,
            y: 1,
            z: 1,
            clusters: false,
        }
    }
}

impl From<(u32, u32)> for Grid {
    fn from((x, y): (u32, u32)) -> Grid {
        Grid {
            x,
            y,
            z: 1,
            clusters: false,
        }
    }
}

impl From<(u32, u32, u32)> for Grid {
    fn from((x, y, z): (u32, u32, u32)) -> Grid {
        Grid {
            x,
            y,
            z,
            clusters: false,
        }
    }
}

impl From<[u32; 3]> for Grid {
    fn from([x, y, z]: [u32; 3]) -> Grid {
        Grid {
            x,
            y,
            z,
            clusters: false,
        }
    }
}
