//! Writes the PTX of every registered kernel and specialization:
//! `cargo run -p tile-kernels --bin tile-ptx -- --out DIR`.
//!
//! Files are named `<kernel>.<variant>.<target>.ptx`, where the variant is
//! the specialization's types and const values and `v` (16-byte vector
//! accesses) or `s` (scalar accesses), e.g. `softmax.f32_1024_v.sm_90.ptx`,
//! with `_persistent` for an `mma` kernel's two tiles per persistent block, or `wgmma`
//! (Hopper's warpgroup tensor cores), made for sm_90a alone.
//!
//! Each variant is written once, in the module the runtime loads: portable
//! PTX for sm_90 (the driver compiles it for newer GPUs), the rest for their
//! own target. `--target` writes every variant that runs on that target
//! with its header instead: the same entries under another header, for
//! `ptxas -arch` of that target.

use clap::Parser;
use std::path::PathBuf;
use tile::Target;

#[derive(Parser)]
#[command(about = "Dump the PTX of every registered tile kernel")]
struct Args {
    /// Directory to write the .ptx files into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Every variant that runs on these targets (sm_90, sm_90a, sm_100a,
    /// sm_120a), with each one's header; by default each variant once, as
    /// the runtime loads it.
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Only kernels whose name contains this text.
    #[arg(long)]
    kernel: Option<String>,
}

// Links the library, so that its kernels are in the registry.
use tile_kernels as _;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut targets = Vec::new();
    for name in &args.targets {
        match Target::from_name(name) {
            Some(t) => targets.push(t),
            None => {
                eprintln!("unknown target {name}: expected one of sm_90, sm_90a, sm_100a, sm_120a");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("can't create {}: {e}", args.out.display());
        return std::process::ExitCode::FAILURE;
    }
    let mut written = 0;
    for k in tile::registered_kernels() {
        if args.kernel.as_deref().is_some_and(|f| !k.name.contains(f)) {
            continue;
        }
        for v in k.variants {
            let variant = v.entry.strip_prefix(k.name).unwrap_or(&v.entry).trim_start_matches('_');
            let runs_on: Vec<Target> = if targets.is_empty() {
                vec![tile::ptx::load_target(v)]
            } else {
                let runs = |t: &&Target| v.target.is_none_or(|only| only == **t);
                targets.iter().filter(runs).copied().collect()
            };
            let entry = tile::ptx::entry(v);
            for t in runs_on {
                let path = args.out.join(format!("{}.{}.{}.ptx", k.name, variant, t.name()));
                if let Err(e) = std::fs::write(&path, t.header() + &entry) {
                    eprintln!("can't write {}: {e}", path.display());
                    return std::process::ExitCode::FAILURE;
                }
                written += 1;
            }
        }
    }
    println!("wrote {written} PTX files to {}", args.out.display());
    std::process::ExitCode::SUCCESS
}
