//! The registry lists every kernel of the library in a program that links
//! it: tools (tile-ptx, the ptxas test) read the library's kernels from
//! `tile::registered_kernels()`.

// Nothing else here names the library: this links it.
use tile_kernels as _;

/// The library's kernels in the registry.
fn library_kernels() -> Vec<&'static tile::KernelSpec> {
    let mut kernels = tile::registered_kernels();
    kernels.retain(|k| k.module_path.starts_with("tile_kernels::"));
    kernels
}

#[test]
fn every_kernel_in_the_sources_is_registered() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut in_sources = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            // The name of the function after each attribute.
            for after in text.split("#[tile::kernel").skip(1) {
                let name = after.split("pub fn ").nth(1).and_then(|s| s.split('<').next()).unwrap();
                in_sources.push(name.to_string());
            }
        }
    }
    in_sources.sort();
    let mut registered: Vec<String> = library_kernels().iter().map(|k| k.name.to_string()).collect();
    registered.sort();
    assert_eq!(registered, in_sources);
}

/// An sm_120 GPU gives a block 99 KiB of shared memory and runs only the
/// portable variants: each of those must fit there, except the persistent
/// two-tile variants, which the runtime launches only where a block may have twice
/// a plain block's memory, and whose plain twin must fit.
#[test]
fn every_portable_variant_but_the_persistent_two_tile_ones_fits_an_sm_120_block() {
    use tile::testing::SM120_BLOCK_SHARED_BYTES;
    let mut persistent = 0;
    for k in library_kernels() {
        for v in k.variants.iter().filter(|v| v.target.is_none()) {
            let Some(plain) = v.entry.strip_suffix("_persistent") else {
                assert!(
                    v.block_shared_bytes() <= SM120_BLOCK_SHARED_BYTES,
                    "{} takes {} bytes of shared memory",
                    k.describe(v),
                    v.block_shared_bytes()
                );
                continue;
            };
            persistent += 1;
            let plain = k.variants.iter().find(|p| p.entry == plain).expect("plain twin");
            assert_eq!(
                v.block_shared_bytes(),
                2 * plain.block_shared_bytes().next_multiple_of(1024)
            );
            assert_eq!((v.threads, v.persistent), (2 * plain.threads, true));
        }
    }
    assert!(persistent > 0, "no persistent two-tile variants");
}
