//! Lowering: tile IR with layouts to per-thread PTX instructions over
//! virtual registers.
//!
//! Each tile value becomes the registers its layout gives a thread (in
//! register-index order); scalars are one register that every thread holds.
//! Loads and stores become (vector) global accesses guarded by bounds
//! predicates; reductions fold in-thread, then across lanes with
//! `shfl.sync.bfly`, then across warps through shared memory; layout
//! conversions go through shared memory unless they only reorder registers.

use crate::error::{Result, bail};
use crate::ir::*;
use crate::layout::Layouts;
use crate::ptx::{self, Regs};
use std::collections::{BTreeSet, HashMap, HashSet};

mod arith;
mod cluster;
mod control;
mod convert;
mod emit;
mod memory;
mod pipeline;
mod reduce;
mod specialize;
mod tensor_core;
mod tma;
mod tma_store;
mod transpose;
mod twins;
mod wgmma;

pub use cluster::CLUSTER_BLOCKS;
pub use tma::TensorMap;

pub use crate::layout::MmaPath;
use crate::plan::{Context, Operand};
use emit::*;

/// Static shared memory a kernel may declare.
pub const MAX_SHARED_BYTES: usize = 48 * 1024;

/// Shared memory one block may have in all on Hopper (227 KiB).
pub const MAX_BLOCK_SHARED_BYTES: usize = 227 * 1024;

/// Shared memory a block may have on every GPU the portable PTX runs on
/// (an sm_120 GPU's 99 KiB).
pub const PORTABLE_BLOCK_SHARED_BYTES: usize = 99 * 1024;

/// Shared memory of a Hopper SM, of which each resident block takes its
/// own and 1 KiB the driver reserves.
const SM_SHARED_BYTES: usize = 228 * 1024;
const BLOCK_RESERVED_SHARED_BYTES: usize = 1024;

/// Threads and 32-bit registers an SM holds.
const SM_THREADS: u32 = 2048;
pub(super) const SM_REGISTERS: u32 = 65536;

/// Registers a thread holds through a `cp.async` `mma` loop besides its
/// operands, accumulator and copy addresses: the loop counter, stage
/// offsets and bounds.
const LOOP_REGISTERS: usize = 8;

/// The blocks per SM a kernel with a `cp.async` `mma` pipeline declares
/// (`.minnctapersm`): as many as shared memory holds (its stages are sized
/// for that occupancy, [`pipeline`]), but no more than leave each thread
/// the registers its loop holds live (`live_registers`: accumulators, two
/// K-steps' fragments, operands held whole, copy addresses), and at least one. ptxas then
/// spends registers up to that occupancy and no further. Left to its own
/// heuristics it squeezed some such kernels into 128 registers, where they
/// spilled (tf32 with one-instruction rounding), and gave others a few
/// more than 128 (130 for 256 threads), costing them their second block
/// per SM. The model is checked where it matters:
/// every variant goes through ptxas (`tests/ptxas.rs`), which fails on a
/// spill.
fn blocks_per_sm(shared_bytes: usize, threads: u32, live_registers: usize) -> u32 {
    let by_shared = SM_SHARED_BYTES / (shared_bytes + BLOCK_RESERVED_SHARED_BYTES);
    let by_registers = SM_REGISTERS as usize / ((live_registers + LOOP_REGISTERS) * threads as usize);
    let blocks = by_shared.min(by_registers) as u32;
    blocks.clamp(1, SM_THREADS / threads)
}

/// Alignment of the scratch area (and of each team's part): the 1024-byte
/// period of the 128-byte swizzle, which TMA applies to shared addresses
/// (`lower/tma_store.rs`).
pub const SCRATCH_ALIGN: usize = 1024;

/// A lowered kernel entry (module header not included).
pub struct Lowered {
    pub text: String,
    /// Static shared memory (reductions, layout conversions).
    pub shared_bytes: usize,
    /// Dynamic shared memory (pipeline stages) to launch with.
    pub dynamic_shared_bytes: usize,
    pub threads: u32,
    /// Tensor maps to pass after the regular parameters (TMA copies).
    pub tensor_maps: Vec<TensorMap>,
    /// A persistent grid (see `lower/specialize.rs`, `lower/twins.rs`): the
    /// launcher starts only the blocks that fit on the GPU at once and
    /// passes the block count it was asked for as the last parameter.
    pub persistent: bool,
    /// Blocks per cluster along x (1: no clusters): a persistent grid whose
    /// pairs of blocks share operand tiles (see `lower/cluster.rs`); the launcher
    /// starts a multiple of it.
    pub cluster: u32,
    /// The tensors whose tiles `mma` pipelines copy into shared memory
    /// (`cp.async` or TMA), sorted.
    pub pipelined: Vec<usize>,
    /// Two consumer warpgroups take turns on the tiles (see `lower/specialize.rs`).
    pub ping_pong: bool,
    /// The tensors read only by TMA copies, sorted: their arguments need a
    /// 16-byte aligned address and strides, but no particular shape.
    pub tma_only: Vec<usize>,
}

/// Lowers one specialization. The tensor parameters in `vectorized` are
/// accessed with 16-byte vectors, which assumes what the runtime checks
/// before choosing this variant: each of them is 16-byte aligned, its last
/// dimension is contiguous and a multiple of 16 bytes, and its other
/// strides are multiples of 16 bytes.
/// `num_stages` fixes the depth of `mma` pipelines (else chosen by size).
pub fn lower(
    func: &Func,
    layouts: &Layouts,
    vectorized: &[usize],
    entry_name: &str,
    num_stages: Option<u32>,
) -> Result<Lowered> {
    let how = Lowering::new(MmaPath::Portable, num_stages);
    lower_with(func, layouts, vectorized, entry_name, how).map(|(lowered, _)| lowered)
}

/// Lowers one specialization (as [`lower`]) to run as two teams of one
/// block on a persistent grid (see `lower/twins.rs`): `None` unless two
/// of [`lower`]'s blocks would share an SM, its threads could keep 255
/// registers each in a block of twice as many, and the doubled block's
/// shared memory fits in one. The runtime launches it where the device
/// gives a block that much shared memory, and [`lower`]'s elsewhere.
pub fn lower_twins(
    func: &Func,
    layouts: &Layouts,
    vectorized: &[usize],
    entry_name: &str,
    num_stages: Option<u32>,
) -> Result<Option<Lowered>> {
    let how = Lowering {
        twins: Twinning::IfTheyFit,
        ..Lowering::new(MmaPath::Portable, num_stages)
    };
    let (lowered, report) = lower_with(func, layouts, vectorized, entry_name, how)?;
    Ok(report.twins.then_some(lowered))
}

/// Lowers one specialization with its `mma`s on `wgmma` (layouts from
/// [`crate::layout::assign_layouts`] with [`MmaPath::Wgmma`]), the tensors
/// in `vectorized` accessed with vectors (as [`lower`]; TMA copies only
/// those): `None` when the kernel has no `mma` or one of them cannot take
/// that path. With `pairs`, blocks run in pairs sharing f32 operand tiles
/// where they can (see `lower/cluster.rs`; [`Lowered::cluster`] says whether).
pub fn lower_wgmma(
    func: &Func,
    layouts: &Layouts,
    vectorized: &[usize],
    entry_name: &str,
    (num_stages, pairs): (Option<u32>, bool),
) -> Result<Option<Lowered>> {
    let how = Lowering {
        ping_pong: true,
        pairs,
        ..Lowering::new(MmaPath::Wgmma, num_stages)
    };
    let (lowered, l) = lower_with(func, layouts, vectorized, entry_name, how)?;
    Ok((l.no_wgmma.is_none() && l.wgmma_count > 0).then_some(lowered))
}

/// How to lower: the `mma` instructions, the pipeline depth, where the
/// scratch area lives (`None`: static shared memory), the shared memory
/// pipeline stages may take when the default would leave the scratch area
/// too little (`None`: the default), whether two consumer warpgroups
/// may take turns on a warp-specialized kernel's tiles (see [`specialize`])
/// and whether its blocks may run in pairs (see [`cluster`]), and then the
/// bytes of each team's scratch area (`None`: not known yet). With
/// `scratch_on_stages`, the scratch area takes the pipeline stages' place
/// (at offset 0 of dynamic shared memory), which is free once every loop
/// that uses them is over. `twins` says whether the portable path runs
/// two teams per block (see [`twins`]).
#[derive(Clone, Copy)]
struct Lowering {
    path: MmaPath,
    num_stages: Option<u32>,
    scratch_offset: Option<usize>,
    scratch_on_stages: bool,
    stage_budget: Option<usize>,
    ping_pong: bool,
    pairs: bool,
    team_scratch: Option<usize>,
    twins: Twinning,
}

impl Lowering {
    /// The first lowering on `path`: scratch in static shared memory,
    /// default stages, one team per block, no pairs.
    fn new(path: MmaPath, num_stages: Option<u32>) -> Lowering {
        Lowering {
            path,
            num_stages,
            scratch_offset: None,
            scratch_on_stages: false,
            stage_budget: None,
            ping_pong: false,
            pairs: false,
            team_scratch: None,
            twins: Twinning::No,
        }
    }
}

/// Whether a portable kernel runs as two teams per block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Twinning {
    No,
    /// Where two blocks fit on an SM: lower again as [`Twinning::Teams`].
    IfTheyFit,
    /// Two teams, each with this many bytes of dynamic shared memory.
    Teams(usize),
}

/// What the lowering found: why the `wgmma` path could not be taken and
/// how many `mma`s took it, and whether the kernel runs as two teams.
struct Report {
    no_wgmma: Option<wgmma::Unsupported>,
    wgmma_count: usize,
    twins: bool,
}

fn lower_with(
    func: &Func,
    layouts: &Layouts,
    vectorized: &[usize],
    entry_name: &str,
    how: Lowering,
) -> Result<(Lowered, Report)> {
    let Lowering {
        path,
        num_stages,
        scratch_offset,
        scratch_on_stages,
        stage_budget,
        ping_pong,
        pairs,
        team_scratch,
        twins,
    } = how;
    let cx = Context::new(func, layouts, vectorized, path, num_stages);
    let mut l = Lower {
        cx: &cx,
        scratch_offset,
        stage_budget,
        ping_pong,
        pairs,
        team_scratch,
        path,
        no_wgmma: None,
        wgmma_count: 0,
        in_place: HashMap::new(),
        wgmma_in_flight: 0,
        tensor_maps: Vec::new(),
        tma_params: Vec::new(),
        roles: None,
        twins: None,
        func,
        entry: entry_name.to_string(),
        layouts,
        vectorized,
        regs: Regs::default(),
        prologue: Vec::new(),
        code: Vec::new(),
        vals: HashMap::new(),
        tid: String::new(),
        tensors: HashMap::new(),
        thread_coords: HashMap::new(),
        repl_preds: HashMap::new(),
        specials: HashMap::new(),
        shared_bytes: 0,
        labels: 0,
        fragment_offsets: HashMap::new(),
        skip: HashSet::new(),
        staged_reads: HashMap::new(),
        stored_unconverted: HashMap::new(),
        pipelined: BTreeSet::new(),
        interleaved: HashSet::new(),
        vector_accessed: BTreeSet::new(),
        dynamic_shared: 0,
        stages: None,
        pipelines: (0, 0),
        scratch_after: None,
        mma_live_registers: 0,
        copy_registers: 0,
        split_words: HashMap::new(),
    };
    let mut params = l.params(entry_name);
    if let Twinning::Teams(team_bytes) = twins {
        l.twins_prologue(team_bytes);
        l.twins_body(&func.body)?;
    }
    let persistent = l.twins.is_some() || (path == MmaPath::Wgmma && l.specialize(&func.body)?);
    if !persistent {
        l.ops(&func.body)?;
    }
    params.append(&mut l.tma_params);
    let mut threads = func.num_warps * 32;
    if let Some(roles) = &l.roles {
        if roles.teams > 1 && l.shared_bytes > 0 {
            // Teams take a scratch area each, now that its size is known:
            // lower again, each team's scratch after the one before.
            let Some(per_team) = team_scratch else {
                let how = Lowering {
                    team_scratch: Some(l.shared_bytes.next_multiple_of(SCRATCH_ALIGN)),
                    ..how
                };
                return lower_with(func, layouts, vectorized, entry_name, how);
            };
            debug_assert!(l.shared_bytes <= per_team, "the same lowering takes the same scratch");
            l.shared_bytes = per_team * roles.teams as usize;
        }
        threads = roles.consumers + specialize::PRODUCER_THREADS;
        params.push(roles.grid_param.clone());
    }
    let (under_way, done) = l.pipelines;
    let after_pipelines = done > 0 && under_way == 0 && l.scratch_after == Some(Some(done));
    if path == MmaPath::Portable && after_pipelines && !scratch_on_stages {
        // Every use of the scratch area comes after the last `cp.async`
        // pipeline has drained (an `mma` loop's epilogue): it takes the
        // stages' place. (TMA pipelines keep theirs: their mbarriers lie
        // past the stages, and persistent kernels refill the stages while
        // the epilogue runs.)
        let how = Lowering {
            scratch_offset: Some(0),
            scratch_on_stages: true,
            ..how
        };
        return lower_with(func, layouts, vectorized, entry_name, how);
    }
    if l.shared_bytes > MAX_SHARED_BYTES && scratch_offset.is_none() {
        // Past the static limit, the scratch area moves to dynamic shared
        // memory after the pipeline stages: lower again with it there.
        let offset = l.dynamic_shared.next_multiple_of(SCRATCH_ALIGN);
        let how = Lowering {
            scratch_offset: Some(offset),
            ..how
        };
        return lower_with(func, layouts, vectorized, entry_name, how);
    }
    let (static_bytes, dynamic_bytes) = match scratch_offset {
        None => (l.shared_bytes, l.dynamic_shared),
        Some(_) if scratch_on_stages => (0, l.dynamic_shared.max(l.shared_bytes)),
        Some(offset) => (0, offset + l.shared_bytes),
    };
    if let Some((stages, one)) = l.stages.filter(|_| stage_budget.is_none() && num_stages.is_none()) {
        // Fewer stages, when two still fit, where the block's shared memory
        // would pass what it should take: the stages get what the rest of
        // the block (its scratch area, operands stored once) leaves.
        // Portable PTX runs on sm_120 too, whose blocks get 99 KiB. Two
        // `wgmma` blocks that are not warp-specialized (or of one
        // warpgroup) share an SM, each one's products
        // overlapping the other's other work, in half an SM each
        // (attention: one block per SM instead of two cost 40%, H100).
        let limit = match path {
            MmaPath::Portable => PORTABLE_BLOCK_SHARED_BYTES,
            MmaPath::Wgmma => SM_SHARED_BYTES / 2 - BLOCK_RESERVED_SHARED_BYTES,
        };
        let rest = static_bytes + dynamic_bytes - stages;
        if rest + stages > limit && rest + 2 * one <= limit {
            let how = Lowering {
                stage_budget: Some(limit - rest),
                ..how
            };
            return lower_with(func, layouts, vectorized, entry_name, how);
        }
    }
    if static_bytes + dynamic_bytes > MAX_BLOCK_SHARED_BYTES && stage_budget.is_none() && num_stages.is_none() {
        // Fewer pipeline stages, leaving room for the scratch area (and the
        // stages' mbarriers), and for operands stored once where the stages
        // are known (`l.stages`): lower again from the start.
        let rest = l
            .stages
            .map_or(l.shared_bytes, |(stages, _)| static_bytes + dynamic_bytes - stages);
        let how = Lowering {
            scratch_offset: None,
            stage_budget: Some(MAX_BLOCK_SHARED_BYTES.saturating_sub(rest + 1024)),
            ..how
        };
        return lower_with(func, layouts, vectorized, entry_name, how);
    }
    if static_bytes + dynamic_bytes > MAX_BLOCK_SHARED_BYTES {
        bail!(
            func.body
                .first()
                .map(|o| o.span)
                .unwrap_or_else(proc_macro2::Span::call_site),
            "kernel `{}` needs {} bytes of shared memory (pipeline stages, reductions, layout conversions), over the {} KiB a block can have: use smaller tiles",
            func.name,
            static_bytes + dynamic_bytes,
            MAX_BLOCK_SHARED_BYTES / 1024
        );
    }
    let cluster = l
        .roles
        .as_ref()
        .and_then(|r| r.cluster.is_some().then_some(CLUSTER_BLOCKS));
    let (dynamic_bytes, threads) = match (twins, &l.twins) {
        (Twinning::Teams(team_bytes), Some(t)) => {
            params.push(t.grid_param.clone());
            (2 * team_bytes, 2 * threads)
        }
        _ => (dynamic_bytes, threads),
    };
    let min_blocks = (l.roles.is_none() && !l.pipelined.is_empty()).then(|| {
        blocks_per_sm(
            static_bytes + dynamic_bytes,
            threads,
            l.mma_live_registers + l.copy_registers,
        )
    });
    let team_bytes = dynamic_bytes.next_multiple_of(SCRATCH_ALIGN);
    if twins == Twinning::IfTheyFit
        && min_blocks.is_some_and(|b| b >= 2)
        && 2 * threads * 255 <= SM_REGISTERS
        && static_bytes == 0
        && 2 * team_bytes <= MAX_BLOCK_SHARED_BYTES
    {
        // Two blocks fit on an SM: run them as the two teams of one block
        // on a persistent grid instead, lowered again with each team's half.
        // Not when a thread of the doubled block would have fewer than 255
        // registers: at 128 (256-thread teams) the loop's own registers
        // spilled the f32 128x128 tiles.
        let how = Lowering {
            twins: Twinning::Teams(team_bytes),
            ..how
        };
        return lower_with(func, layouts, vectorized, entry_name, how);
    }
    let launch = ptx::LaunchShape {
        threads,
        max_registers: l.roles.as_ref().and_then(|r| r.entry_registers),
        min_blocks,
        cluster,
    };
    let text = ptx::entry(
        entry_name,
        &params,
        launch,
        &l.regs,
        ptx::SharedMemory {
            static_bytes,
            dynamic: dynamic_bytes > 0,
        },
        (&l.prologue, &l.code),
    );
    Ok((
        Lowered {
            text,
            shared_bytes: static_bytes,
            dynamic_shared_bytes: dynamic_bytes,
            threads,
            tensor_maps: l.tensor_maps.iter().map(|(m, _)| m.clone()).collect(),
            persistent,
            cluster: cluster.unwrap_or(1),
            pipelined: l.pipelined.into_iter().collect(),
            ping_pong: l.roles.as_ref().is_some_and(|r| r.team.is_some()),
            tma_only: l
                .tensor_maps
                .iter()
                .map(|(m, _)| m.param)
                .filter(|p| !l.vector_accessed.contains(p))
                .collect::<BTreeSet<usize>>()
                .into_iter()
                .collect(),
        },
        Report {
            no_wgmma: l.no_wgmma,
            wgmma_count: l.wgmma_count,
            twins: l.twins.is_some(),
        },
    ))
}
