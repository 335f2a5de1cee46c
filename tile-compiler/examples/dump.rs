//! Temporary bring-up helper: prints the IR and PTX of a kernel given on stdin.
use std::io::Read;
fn main() {
    let mut src = String::new();
    std::io::stdin().read_to_string(&mut src).unwrap();
    let (attr, item) = src.split_once("\n---\n").unwrap();
    match tile_compiler::compile_str(attr, item) {
        Ok(k) => {
            for (_, f) in &k.funcs { println!("{f}"); }
            let dir = std::env::args().nth(1).unwrap_or("/tmp/ptx".into());
            std::fs::create_dir_all(&dir).unwrap();
            for v in &k.variants {
                for t in tile_compiler::Target::ALL {
                    std::fs::write(format!("{dir}/{}.{}.ptx", v.entry, t.name()), v.module(t)).unwrap();
                }
            }
        }
        Err(e) => { eprintln!("error: {}", e.message); std::process::exit(1) }
    }
}
