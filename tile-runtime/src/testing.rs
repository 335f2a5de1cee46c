//! Helpers for tests that need a GPU.

use crate::{Device, Error};
use std::sync::Arc;

/// Shared memory an sm_120 GPU gives one block: with
/// [`Device::limit_block_shared_bytes`], a Hopper launches the variants
/// such a GPU would.
pub const SM120_BLOCK_SHARED_BYTES: usize = 99 * 1024;

/// The GPU for a test, or the reason the machine has none to test on
/// ([`Error::NoDriver`] or [`Error::NoDevice`]), for a harness that
/// reports such a test as ignored. With `TILE_REQUIRE_GPU=1` a missing GPU
/// panics instead, so a GPU run can't pass by skipping; any other failure
/// to open the GPU panics too.
pub fn gpu_for_test(test: &str) -> Result<Arc<Device>, Error> {
    match Device::new(0) {
        Ok(d) => Ok(d),
        Err(e @ (Error::NoDriver | Error::NoDevice)) => {
            if std::env::var("TILE_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("{test}: TILE_REQUIRE_GPU=1 but no GPU is usable: {e}");
            }
            Err(e)
        }
        Err(e) => panic!("{test}: the GPU could not be opened: {e}"),
    }
}

/// The GPU for a test, or `None` (after printing one line) when the machine
/// has none; panics as [`gpu_for_test`] does.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Device>> {
    gpu_for_test(test)
        .inspect_err(|e| println!("skipping {test}: no GPU ({e})"))
        .ok()
}
