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
