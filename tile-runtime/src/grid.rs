//! The launch grid: how many blocks run the kernel along each axis.

/// Blocks along x, y and z; `block_id(0)` runs over `0..x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl From<u32> for Grid {
    fn from(x: u32) -> Grid {
        Grid { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Grid {
    fn from((x, y): (u32, u32)) -> Grid {
        Grid { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Grid {
    fn from((x, y, z): (u32, u32, u32)) -> Grid {
        Grid { x, y, z }
    }
}

impl From<[u32; 3]> for Grid {
    fn from([x, y, z]: [u32; 3]) -> Grid {
        Grid { x, y, z }
    }
}
