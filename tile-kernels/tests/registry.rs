//! `tile_kernels::kernels()` lists every kernel of the library: tools that
//! link the library through it (tile-ptx, the ptxas test) then see them all.

#[test]
fn every_kernel_in_the_sources_is_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut in_sources = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            in_sources += std::fs::read_to_string(&path)
                .unwrap()
                .matches("#[tile::kernel")
                .count();
        }
    }
    let listed = tile_kernels::kernels();
    assert_eq!(listed.len(), in_sources, "add new kernels to tile_kernels::kernels()");
    let registered = tile::registered_kernels();
    for k in listed {
        assert!(
            registered.iter().any(|r| std::ptr::eq(*r, k)),
            "{} is not registered",
            k.name
        );
    }
}

/// An sm_120 GPU gives a block 99 KiB of shared memory and runs only the
/// portable variants: each of those must fit there, except the two-team
/// variants, which the runtime launches only where a block may have twice
/// a plain block's memory, and whose plain twin must fit.
#[test]
fn every_portable_variant_but_two_teams_fits_an_sm_120_block() {
    use tile::testing::SM120_BLOCK_SHARED_BYTES;
    let mut twins = 0;
    for k in tile_kernels::kernels() {
        for v in k.variants.iter().filter(|v| v.target.is_none()) {
            let Some(plain) = v.entry.strip_suffix("_twins") else {
                assert!(
                    v.block_shared_bytes() <= SM120_BLOCK_SHARED_BYTES,
                    "{} takes {} bytes of shared memory",
                    k.describe(v),
                    v.block_shared_bytes()
                );
                continue;
            };
            twins += 1;
            let plain = k.variants.iter().find(|p| p.entry == plain).expect("plain twin");
            assert_eq!(
                v.block_shared_bytes(),
                2 * plain.block_shared_bytes().next_multiple_of(1024)
            );
            assert_eq!((v.threads, v.persistent), (2 * plain.threads, true));
        }
    }
    assert!(twins > 0, "no two-team variants");
}
