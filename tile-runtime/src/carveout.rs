//! The split of each SM's on-chip memory between L1 and shared memory that
//! a kernel asks for (its preferred carveout).
//!
//! An SM changes its split only while it runs no block, so a kernel whose
//! split differs from the previous kernel's cannot start blocks beside that
//! kernel's last ones: each such boundary drains the SM and takes from
//! dependent launch the overlap it exists for. Left to choose, the driver
//! gives each kernel the least shared memory its own occupancy needs, which
//! in a decode step differs from one kernel to the next. So every kernel
//! whose block fits in [`SHARED_SPLIT`] asks for that one split, leaving
//! the rest of the SM to L1, which holds the loads a few-row linear layer
//! keeps in flight; a kernel that needs more for one block asks for all of
//! the SM's shared memory, as its tiles are sized for. Blocks of more than
//! half the split then run one an SM (few-row split-K tiles); the tuner
//! times every variant under this rule, so it weighs that.

/// Shared memory of the split that the kernels of a step share.
pub(crate) const SHARED_SPLIT: usize = 64 * 1024;

/// The carveout (percent of the SM's shared memory, as
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` takes it) for a
/// kernel whose block needs `block_bytes` of shared memory, static and
/// dynamic, on an SM of `sm_bytes` that reserves `reserved` a block. The
/// driver rounds a carveout up to the next split the SM has (sm_90: 0, 8,
/// 16, 32, 64, 100, 132, 164, 196 or 228 KiB), so it is rounded down here.
pub(crate) fn carveout(block_bytes: usize, sm_bytes: usize, reserved: usize) -> i32 {
    if sm_bytes == 0 || block_bytes + reserved > SHARED_SPLIT.min(sm_bytes) {
        return 100;
    }
    (SHARED_SPLIT * 100 / sm_bytes).min(100) as i32
}

#[cfg(test)]
mod tests {
    use super::carveout;

    /// sm_90's SM: 228 KiB of shared memory at most, 1 KiB reserved a block.
    const SM90: (usize, usize) = (228 * 1024, 1024);

    #[test]
    fn small_blocks_share_one_split() {
        let (sm, reserved) = SM90;
        let split = carveout(0, sm, reserved);
        assert_eq!(split, 28, "63.8 of sm_90's 228 KiB, which the driver takes as 64");
        for block in [8, 4096, 40 * 1024, 63 * 1024] {
            assert_eq!(carveout(block, sm, reserved), split, "a {block}-byte block");
        }
    }

    #[test]
    fn blocks_past_the_split_take_all_shared_memory() {
        let (sm, reserved) = SM90;
        assert_eq!(carveout(63 * 1024 + 1, sm, reserved), 100);
        assert_eq!(carveout(230_400, sm, reserved), 100);
        // sm_120: 100 KiB an SM, the same 64 KiB split.
        assert_eq!(carveout(1024, 100 * 1024, reserved), 64);
        assert_eq!(carveout(0, 0, 0), 100, "an SM that reports no shared memory");
    }
}
