//! Every registered kernel variant through `ptxas` for sm_90, sm_90a, sm_100a
//! and sm_120a: the PTX must assemble, and no variant that reads every
//! tensor with vectors may spill registers. Prints registers and shared
//! memory per variant, and the spills of the fallbacks for misaligned
//! tensors, scalar or (`wgmma`) vectors for the TMA-copied operands only
//! (reported, not failed: they serve tensors the fast variant cannot).
//!
//! `ptxas` comes from `$PTXAS`, the PATH, or the PyPI wheel
//! `nvidia-cuda-nvcc` (`nvidia/cu13/bin/ptxas`). Without it the test is
//! reported ignored, with the reason, except under CI=true, where it fails.
//! The table of registers prints with `--nocapture` (or `--show-output`),
//! or when the test fails.

mod common;
use common::harness::{self, Missing, Test};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use tile::{ParamSpec, Target};
// Links the kernel library, so that its kernels are in the registry.
use tile_kernels as _;

fn find_ptxas() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PTXAS") {
        return Some(PathBuf::from(p));
    }
    if Command::new("ptxas")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(PathBuf::from("ptxas"));
    }
    let out = Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .ok()?;
    let site = String::from_utf8(out.stdout).ok()?;
    let p = PathBuf::from(site.trim()).join("nvidia/cu13/bin/ptxas");
    p.exists().then_some(p)
}

struct Report {
    registers: u32,
    spill_bytes: u32,
    shared: u32,
}

/// Parses `ptxas -v` output: per entry, registers, spills and shared memory.
fn parse_reports(stderr: &str) -> Vec<(String, Report)> {
    let mut out = Vec::new();
    let mut current: Option<(String, Report)> = None;
    for line in stderr.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            if let Some(c) = current.take() {
                out.push(c);
            }
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            current = Some((
                name,
                Report {
                    registers: 0,
                    spill_bytes: 0,
                    shared: 0,
                },
            ));
        } else if let Some((_, r)) = current.as_mut() {
            let num_before = |key: &str| -> Option<u32> {
                let i = line.find(key)?;
                line[..i].split_whitespace().last()?.parse().ok()
            };
            if let Some(n) = num_before(" bytes spill stores") {
                r.spill_bytes += n;
            }
            if let Some(n) = num_before(" bytes spill loads") {
                r.spill_bytes += n;
            }
            if let Some(n) = num_before(" registers") {
                r.registers = n;
            }
            if let Some(n) = num_before(" bytes smem") {
                r.shared = n;
            }
        }
    }
    out.extend(current);
    out
}

/// What one ptxas run found.
struct Outcome {
    /// Registers and shared memory of each variant on its own target.
    table: Vec<String>,
    failures: Vec<String>,
    checked: usize,
}

/// Assembles every variant of `k` for `target` in one module.
fn assemble(ptxas: &std::path::Path, dir: &std::path::Path, k: &tile::KernelSpec, target: Target) -> Outcome {
    let mut outcome = Outcome {
        table: Vec::new(),
        failures: Vec::new(),
        checked: 0,
    };
    let variants: Vec<_> = k
        .variants
        .iter()
        .filter(|v| v.target.is_none_or(|t| t == target))
        .collect();
    let entries: Vec<_> = variants.iter().map(|v| tile::ptx::entry(v)).collect();
    let module = target.header() + &entries.join("\n");
    let path = dir.join(format!("{}.{}.ptx", k.name, target.name()));
    std::fs::write(&path, module).unwrap();
    let out = Command::new(ptxas)
        .args(["-v", "-arch", target.name(), "-o", "/dev/null"])
        .arg(&path)
        .output()
        .expect("run ptxas");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        outcome
            .failures
            .push(format!("{} {}: ptxas failed:\n{stderr}", k.name, target.name()));
        return outcome;
    }
    // ptxas says so when it must serialize `wgmma`s or ignores
    // `setmaxnreg` (lowering bugs).
    if stderr.contains("serialized") || stderr.contains("ignored") {
        outcome
            .failures
            .push(format!("{} {}: ptxas about wgmma:\n{stderr}", k.name, target.name()));
    }
    let reports = parse_reports(&stderr);
    for (v, entry) in variants.into_iter().zip(&entries) {
        let Some((_, r)) = reports.iter().find(|(n, _)| *n == v.entry) else {
            outcome
                .failures
                .push(format!("{} {}: no ptxas report for {}", k.name, target.name(), v.entry));
            continue;
        };
        outcome.checked += 1;
        // `setmaxnreg.inc` waits for registers the producer's `.dec` gave
        // up; the lowering counts on each thread starting with an even
        // share of the register file, which ptxas must have given.
        if entry.contains("setmaxnreg.inc") && r.registers != 65536 / v.threads / 8 * 8 {
            outcome.failures.push(format!(
                "{} on {}: {} registers at launch, not the even share that setmaxnreg's counts assume",
                k.describe(v),
                target.name(),
                r.registers
            ));
        }
        if target == v.target.unwrap_or(Target::Sm90) {
            outcome.table.push(format!(
                "{:<48} {:>3} registers {:>6} B shared",
                k.describe(v),
                r.registers,
                r.shared
            ));
        }
        let tensors = k
            .params
            .iter()
            .filter(|p| matches!(p, ParamSpec::Tensor { .. }))
            .count();
        if r.spill_bytes > 0 && v.vectorized.len() < tensors {
            // The fallbacks for misaligned tensors: the scalar one of the
            // largest tensor-core tiles stages whole operand tiles through
            // registers; a `wgmma` one with 256-column tiles loads an
            // epilogue operand (a residual) a register per element.
            outcome.table.push(format!(
                "{} on {} spills {} bytes of registers (fallback for misaligned tensors)",
                k.describe(v),
                target.name(),
                r.spill_bytes
            ));
        } else if r.spill_bytes > 0 {
            outcome.failures.push(format!(
                "{} on {} spills {} bytes of registers",
                k.describe(v),
                target.name(),
                r.spill_bytes
            ));
        }
    }
    outcome
}

/// `ptxas`, or why the test is ignored; under CI=true a missing one fails.
fn ptxas() -> Result<PathBuf, Missing> {
    find_ptxas().ok_or_else(|| {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("ptxas not found under CI: install the PyPI wheel nvidia-cuda-nvcc");
        }
        Missing {
            reason: "no ptxas".to_string(),
            detail: "ptxas is not in $PTXAS, on the PATH, or in the PyPI wheel nvidia-cuda-nvcc \
                     (pip install nvidia-cuda-nvcc); under CI=true that is a failure."
                .to_string(),
        }
    })
}

fn every_kernel_variant_assembles_without_spills(ptxas: PathBuf) {
    let kernels = tile::registered_kernels();
    assert!(
        kernels.iter().any(|k| k.module_path.starts_with("tile_kernels::")),
        "the library's kernels are not in the registry"
    );
    let dir = std::env::temp_dir().join(format!("tile-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // One ptxas run per kernel and target, spread over the cores.
    let jobs: Vec<(&tile::KernelSpec, Target)> = kernels
        .iter()
        .flat_map(|k| Target::ALL.into_iter().map(move |t| (*k, t)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut results: Vec<(usize, Outcome)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(k, target)) = jobs.get(i) else {
                            return done;
                        };
                        done.push((i, assemble(&ptxas, &dir, k, target)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("ptxas worker"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut failures = Vec::new();
    let mut checked = 0;
    // Shown as libtest shows what a test prints: when asked, or on failure.
    let show_table = harness::shows_output() || results.iter().any(|(_, o)| !o.failures.is_empty());
    for (_, outcome) in results {
        if show_table {
            for line in outcome.table {
                println!("{line}");
            }
        }
        failures.extend(outcome.failures);
        checked += outcome.checked;
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{checked} variant x target combinations assembled; no fully vectorized variant spills");
}

fn main() -> ExitCode {
    harness::run([Test::needing(
        "every_kernel_variant_assembles_without_spills",
        ptxas,
        every_kernel_variant_assembles_without_spills,
    )])
}
