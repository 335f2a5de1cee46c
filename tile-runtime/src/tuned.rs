//! The `run` a kernel with a declared tuning gets (`grid = ..`, `key = [..]`
//! in `#[tile::kernel]`): its candidates are the configurations built for
//! the arguments' element types (and on sm_90a, those with 2-CTA cluster
//! variants once more, in clusters); the key's sizes, each rounded to its
//! size class, name the problem class (the tuning key: the kernel's module
//! path, the element types and those classes); the [`autotune`](crate::autotune)
//! tuner times the candidates on the first problem of a class and reuses
//! the choice. The grid of each candidate is computed from the arguments'
//! shapes and its const values.
//!
//! Where even the candidate with the most blocks fills less than one wave
//! of the GPU, every block runs at once and the most blocks (the smallest
//! tiles) finish first: that candidate runs untimed, the first declared
//! of those with as many blocks. (Timing such launches of a few
//! microseconds tells them apart by noise only.)

use crate::arg::{Arg, TensorView};
use crate::autotune::{size_class, tune};
use crate::backend::Backend;
use crate::spec::KernelSpec;
use crate::{Error, Grid, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use tile_spec::{DType, Size, SizeArgs, Target};

/// The configuration a kernel's `run` chose: its const values (in the
/// kernel's declaration order), in 2-CTA clusters or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuned {
    /// The const values, in the kernel's declaration order.
    pub consts: &'static [i64],
    /// Whether the launch runs in 2-CTA clusters ([`Grid::in_clusters`]).
    pub clusters: bool,
}

impl fmt::Display for Tuned {
    /// The const values joined by `x` (`128x256x64`), then ` clusters`
    /// where they apply: the name the tuner caches.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values: Vec<String> = self.consts.iter().map(|v| v.to_string()).collect();
        let clusters = if self.clusters { " clusters" } else { "" };
        f.pad(&format!("{}{clusters}", values.join("x")))
    }
}

/// The sizes a tuning reads, from a launch's arguments and one
/// configuration's const values.
struct Sizes<'a, 'b, O: ?Sized> {
    args: &'a [Arg<'b, O>],
    consts: &'a [i64],
}

impl<O: TensorView + ?Sized> SizeArgs for Sizes<'_, '_, O> {
    fn constant(&self, i: usize) -> Option<u64> {
        self.consts.get(i).and_then(|&v| u64::try_from(v).ok())
    }
    fn scalar(&self, param: usize) -> Option<u64> {
        match self.args.get(param)? {
            Arg::I32(v) => u64::try_from(*v).ok(),
            Arg::U32(v) => Some(*v as u64),
            _ => None,
        }
    }
    fn dim(&self, param: usize, axis: usize) -> Option<u64> {
        let t = self.args.get(param)?.tensor_view()?;
        t.shape().get(axis).map(|&n| n as u64)
    }
}

/// `size` of the arguments with `consts`, or an error naming the kernel
/// and what the size is for.
fn size<O: TensorView + ?Sized>(
    kernel: &KernelSpec,
    what: &str,
    size: &Size,
    (args, consts): (&[Arg<'_, O>], &[i64]),
) -> Result<u64> {
    size.eval(&Sizes { args, consts }).map_err(|e| Error::Argument {
        kernel: kernel.name,
        reason: format!("the tuning's {what}: {e}"),
    })
}

/// The grid of the candidate `c` for these arguments.
fn grid<O: TensorView + ?Sized>(kernel: &KernelSpec, args: &[Arg<'_, O>], c: Tuned) -> Result<Grid> {
    let tuning = kernel.tuning.as_ref().expect("a tuned kernel");
    let mut axes = [1u32; 3];
    for (i, s) in tuning.grid.iter().enumerate() {
        let n = size(kernel, "grid", s, (args, c.consts))?;
        axes[i] = u32::try_from(n).map_err(|_| Error::Grid {
            kernel: kernel.name,
            reason: format!("axis {i} would have {n} blocks; it takes at most {}", u32::MAX),
        })?;
    }
    let grid = Grid::from(axes);
    Ok(if c.clusters { grid.in_clusters() } else { grid })
}

/// Of `candidates` with their grids' block counts, the one with the most
/// blocks (the first declared of those) when even it fills less than one
/// wave of `multiprocessors` SMs: the choice, untimed. Candidates in
/// clusters are not counted (they launch the same blocks in 2-CTA clusters).
fn under_one_wave(candidates: &[(Tuned, u64)], multiprocessors: u64) -> Option<Tuned> {
    let mut widest: Option<(Tuned, u64)> = None;
    for &(c, n) in candidates.iter().filter(|(c, _)| !c.clusters) {
        if widest.is_none_or(|(_, most)| n > most) {
            widest = Some((c, n));
        }
    }
    widest.filter(|&(_, n)| n < multiprocessors).map(|(c, _)| c)
}

/// Runs `kernel` (element types `types`) on `args` in configuration
/// `config`, over the grid its tuning computes. What a generated `run_with`
/// calls.
pub fn run_config<B: Backend>(
    on: &B,
    kernel: &'static KernelSpec,
    types: &[DType],
    config: Tuned,
    args: &mut [Arg<'_, B::Operand>],
) -> Result<()> {
    let g = grid(kernel, args, config)?;
    on.launch_kernel(kernel, types, config.consts, g, args)
}

/// A problem class on one device: the kernel (its address), the element
/// types, the key's size classes, the device (its address) and the target
/// its variants are for.
type Class = (usize, Vec<DType>, Vec<usize>, usize, Target);

/// The configuration chosen for each problem class in this process: after
/// the first launch of a class, a tuned launch costs the key's evaluation
/// and a lookup (the GPT's layers are launches of a few microseconds).
fn chosen() -> &'static Mutex<HashMap<Class, Tuned>> {
    static CHOSEN: OnceLock<Mutex<HashMap<Class, Tuned>>> = OnceLock::new();
    CHOSEN.get_or_init(Default::default)
}

/// Runs `kernel` (element types `types`) on `args` with the configuration
/// its tuning picks for this problem class on `on`, and returns it. What a
/// generated `run` calls. Arguments that are not what the kernel takes
/// (ranks, element types, declared shapes) are an error before anything
/// is tuned.
pub fn run_tuned<B: Backend>(
    on: &B,
    kernel: &'static KernelSpec,
    types: &[DType],
    args: &mut [Arg<'_, B::Operand>],
) -> Result<Tuned> {
    crate::backend::check_params(kernel, types, &[], args)?;
    let tuning = kernel.tuning.as_ref().expect("`run` is generated for tuned kernels");
    let mut classes = Vec::new();
    for s in tuning.key.iter() {
        classes.push(size_class(size(kernel, "key", s, (args, &[]))? as usize));
    }
    let class = on.stream().map(|s| {
        let device = s.device();
        let at = std::sync::Arc::as_ptr(device) as usize;
        (
            kernel as *const KernelSpec as usize,
            types.to_vec(),
            classes.clone(),
            at,
            device.target(),
        )
    });
    let known = class
        .as_ref()
        .and_then(|c| chosen().lock().expect("tuning choices").get(c).copied());
    if let Some(c) = known {
        run_config(on, kernel, types, c, args)?;
        return Ok(c);
    }
    let clusters = on.stream().is_some_and(|s| s.device().target() == Target::Sm90a);
    let mut candidates = kernel.candidates(types, clusters);
    if candidates.is_empty() {
        return Err(Error::NotBuilt {
            kernel: kernel.name,
            consts: Vec::new(),
        });
    }
    // On the CPU, where blocks run one at a time, every grid is "under one
    // wave": the candidate with the most blocks pads the least.
    let sms = on.stream().map_or(u64::MAX, |s| s.device().multiprocessors() as u64);
    let mut blocks = Vec::new();
    for &c in &candidates {
        let g = grid(kernel, args, c)?;
        blocks.push((c, g.x as u64 * g.y as u64 * g.z as u64));
    }
    if let Some(c) = under_one_wave(&blocks, sms) {
        candidates = vec![c];
    }
    let types_named: Vec<&str> = types.iter().map(|d| d.name()).collect();
    let classes: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
    let key = format!("{}|{}|{}", kernel.module_path, types_named.join(","), classes.join("x"));
    let choice = tune(on, &key, &candidates, |c| run_config(on, kernel, types, c, args))?;
    if let Some(class) = class {
        chosen().lock().expect("tuning choices").insert(class, choice);
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn tuned(consts: &'static [i64], clusters: bool) -> Tuned {
        Tuned { consts, clusters }
    }

    #[test]
    fn under_one_wave_the_candidate_with_the_most_blocks_runs_untimed() {
        let small = tuned(&[64, 64, 64], false);
        let small_short = tuned(&[64, 64, 32], false);
        let large = tuned(&[128, 256, 64], false);
        let clustered = tuned(&[64, 64, 32], true);
        // 7 x 87 outputs: one block of each tile; the first declared of the smallest.
        let few = [(small, 8), (small_short, 8), (large, 1), (clustered, 9)];
        assert_eq!(under_one_wave(&few, 132), Some(small));
        // From one wave on, every candidate is timed.
        let many = [(small, 132), (large, 24)];
        assert_eq!(under_one_wave(&many, 132), None);
        assert_eq!(tuned(&[128, 256, 64], true).to_string(), "128x256x64 clusters");
    }
}
