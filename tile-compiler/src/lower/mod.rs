//! Lowering: tile IR with layouts to per-thread PTX instructions over
//! virtual registers.
//!
//! Each tile value becomes the registers its layout gives a thread (in
//! register-index order); scalars are one register that every thread holds.
//! Loads and stores become (vector) global accesses guarded by bounds
//! predicates; reductions fold in-thread, then across lanes with
//! `shfl.sync.bfly`, then across warps through shared memory; layout
//! conversions go through shared memory unless they only reorder registers.

use crate::dtype::DType;
use crate::error::{Result, bail};
use crate::ir::*;
use crate::layout::{Bit, LANE_BITS, Layout, Layouts};
use crate::ptx::{self, EntryParam, RegClass, Regs, arith_type, f32_imm};
use std::collections::{BTreeSet, HashMap, HashSet};

mod cluster;
mod convert;
mod pipeline;
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

/// Which operand of an `mma` a value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operand {
    A,
    B,
}

impl Operand {
    /// The operand's K dimension: A is `[M, K]`, B is `[K, N]`.
    fn k_dim(self) -> usize {
        match self {
            Operand::A => 1,
            Operand::B => 0,
        }
    }
}

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

/// `2^x` on the GPU: the hardware approximation, results below 2^-126
/// flushed to zero (`.ftz`; a subnormal `x` gives 1 either way). Without
/// `.ftz`, ptxas wraps each `MUFU.EX2` in a range check and two multiplies
/// to produce subnormal results: 3 of the ~15 instructions attention's loop
/// spends per score (SASS, sm_90a).
const EX2: &str = "ex2.approx.ftz.f32";

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
    let mut l = Lower {
        scratch_offset,
        stage_budget,
        ping_pong,
        pairs,
        team_scratch,
        num_stages,
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
        operands: HashMap::new(),
        register_b: HashSet::new(),
        fragment_offsets: HashMap::new(),
        consts: HashMap::new(),
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
    l.find_consts(&func.body);
    l.find_operands(&func.body);
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

#[derive(Clone)]
struct TensorRegs {
    ptr: String,
    dims: Vec<String>,
    strides: Vec<String>,
}

/// Per-dimension thread coordinate registers; `None` is a constant 0.
type Coords = Vec<Option<String>>;

/// What thread coordinates depend on: the lane and warp bits of a layout, and its rank.
type ThreadBits = (Vec<Option<Bit>>, Vec<Option<Bit>>, usize);

struct Lower<'a> {
    func: &'a Func,
    path: MmaPath,
    /// Why an `mma` could not take the `wgmma` path (that variant is dropped).
    no_wgmma: Option<wgmma::Unsupported>,
    /// `mma`s lowered to `wgmma`.
    wgmma_count: usize,
    /// `mma` results that may reuse their accumulator's registers (result -> accumulator).
    in_place: HashMap<ValueId, ValueId>,
    /// `wgmma` groups an iteration of the current pipelined loop leaves running.
    wgmma_in_flight: usize,
    /// Tensor maps the TMA copies use, with the register holding each one's address.
    tensor_maps: Vec<(TensorMap, String)>,
    /// Their kernel parameters, declared after the regular ones.
    tma_params: Vec<EntryParam>,
    /// Set when the kernel is warp-specialized and persistent.
    roles: Option<specialize::Roles>,
    /// Set when a portable kernel runs two teams per block (see [`twins`]).
    twins: Option<twins::Twins>,
    entry: String,
    layouts: &'a Layouts,
    /// The tensor parameters accessed with 16-byte vectors.
    vectorized: &'a [usize],
    regs: Regs,
    prologue: Vec<String>,
    code: Vec<String>,
    vals: HashMap<ValueId, Vec<String>>,
    tid: String,
    tensors: HashMap<usize, TensorRegs>,
    thread_coords: HashMap<ThreadBits, Coords>,
    repl_preds: HashMap<u32, String>,
    specials: HashMap<String, String>,
    shared_bytes: usize,
    /// The `num_stages` hint: how many stages `mma` pipelines get.
    num_stages: Option<u32>,
    /// Where the scratch area (`shared_bytes`) lives in dynamic shared
    /// memory, when it is too large for static; `None`: the static `smem`.
    scratch_offset: Option<usize>,
    /// Shared memory the pipeline stages may take, when less than the default.
    stage_budget: Option<usize>,
    /// Whether two consumer warpgroups may take turns (see [`specialize`]),
    /// and the bytes of each one's scratch area, once known.
    ping_pong: bool,
    team_scratch: Option<usize>,
    /// Whether blocks may run in pairs sharing operand tiles (see [`cluster`]).
    pairs: bool,
    labels: usize,
    /// Values that are `mma` operands, converted into fragment layouts.
    operands: HashMap<ValueId, Operand>,
    /// `b` operands of `mma`s that `wgmma` computes transposed (`b^T a^T`,
    /// [`Layout::wgmma_acc_swapped`]), reading `b` into registers.
    register_b: HashSet<ValueId>,
    /// Per-thread shared-memory offsets computed once in the prologue: keyed
    /// by layout and a discriminating pair (fragment reads: stored
    /// orientation and transposition; pipeline copies: element size).
    fragment_offsets: HashMap<(Layout, usize, &'static str), Vec<String>>,
    /// Scalar constants, by value.
    consts: HashMap<ValueId, ConstVal>,
    /// Ops not to emit: loads a pipeline replaced with asynchronous copies.
    skip: HashSet<ValueId>,
    /// Conversions a pipeline serves from shared memory: the tile's address
    /// register, its stored orientation, and the operand role.
    staged_reads: HashMap<ValueId, (String, usize, Operand)>,
    /// Loop-invariant `wgmma` A operands stored once before their loop
    /// straight from the tile they convert (`convert -> source`), not
    /// converted first ([`Lower::staged_once`]).
    stored_unconverted: HashMap<ValueId, ValueId>,
    /// The tensors the pipelines in use copy from.
    pipelined: BTreeSet<usize>,
    /// Staged conversions whose tiles have their rows interleaved
    /// ([`pipeline::interleaved_row`]).
    interleaved: HashSet<ValueId>,
    /// The tensors accessed with vectors other than by TMA.
    vector_accessed: BTreeSet<usize>,
    /// Bytes of dynamic shared memory (pipeline stages), `dyn_smem` in PTX.
    dynamic_shared: usize,
    /// The first pipelined loop's stages, all of them and one, in bytes,
    /// where the lowering may take fewer (see [`lower_with`]): portable, or
    /// `wgmma` on one warpgroup not warp-specialized.
    stages: Option<(usize, usize)>,
    /// `mma` pipelines (`cp.async`) under way and done, as lowering goes.
    pipelines: (usize, usize),
    /// `None` until the scratch area is used; then the fewest pipelines
    /// done at any of its uses, or `None` once one came while a pipeline
    /// was under way.
    scratch_after: Option<Option<usize>>,
    /// The registers a thread's `mma.sync` steps hold live: each `mma`'s
    /// accumulator and two K-steps' operand fragments (one in use, the next
    /// being read), 32 bits each, summed over the kernel's `mma`s, which in
    /// a loop are live together (attention's scores, while `p @ v` runs).
    mma_live_registers: usize,
    /// The most `cp.async` copies a thread issues per tile of a pipelined
    /// loop: each holds its address's advance from the copy before.
    copy_registers: usize,
    /// Words split into 16-bit halves ([`Lower::split_word`]), by their
    /// halves: packing the same halves again ([`Lower::packed_word`]) is
    /// the word itself. Nothing writes a word or its halves after the split.
    split_words: HashMap<(String, String), String>,
}

/// One global access: `width` consecutive registers from `first` at `[addr+imm]`.
struct Access {
    first: usize,
    width: usize,
    addr: String,
    imm: usize,
    pred: String,
}

fn mov_type(class: RegClass) -> &'static str {
    match class {
        RegClass::Pred => "pred",
        RegClass::B16 => "b16",
        RegClass::B32 => "b32",
        RegClass::F32 => "f32",
        RegClass::B64 => "b64",
    }
}

/// Row-major strides of a shape, in elements.
fn row_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn flat(coord: &[usize], shape: &[usize]) -> usize {
    coord.iter().zip(row_strides(shape)).map(|(c, s)| c * s).sum()
}

fn addr(base: &str, imm: usize) -> String {
    if imm == 0 {
        format!("[{base}]")
    } else {
        format!("[{base}+{imm}]")
    }
}

impl<'a> Lower<'a> {
    fn emit(&mut self, s: impl Into<String>) {
        self.code.push(s.into());
    }

    fn reg(&mut self, class: RegClass) -> String {
        self.regs.new_reg(class)
    }

    fn layout(&self, v: ValueId) -> &'a Layout {
        &self.layouts[&v]
    }

    fn dtype(&self, v: ValueId) -> DType {
        self.func.values[v].dtype
    }

    /// A barrier among the threads that compute: the whole block, or with
    /// warp specialization the consumer warps alone (named barrier 1), or
    /// their team's (named barriers 1 and 2).
    fn barrier(&mut self) {
        if let Some(t) = &self.twins {
            let line = format!("bar.sync {}, {};", t.barrier, self.func.num_warps * 32);
            self.emit(line);
            return;
        }
        match &self.roles {
            None => self.emit("bar.sync 0;"),
            Some(r) => {
                let id = r
                    .team
                    .as_ref()
                    .map_or(specialize::CONSUMER_BARRIER.to_string(), |t| t.barrier.clone());
                self.emit(format!("bar.sync {id}, {};", r.consumers / r.teams))
            }
        }
    }

    fn label(&mut self, what: &str) -> String {
        self.labels += 1;
        format!("$L{what}{}", self.labels)
    }

    // ---- entry and prologue ----------------------------------------------

    fn params(&mut self, entry: &str) -> Vec<EntryParam> {
        let mut out = Vec::new();
        self.tid = self.reg(RegClass::B32);
        let tid = self.tid.clone();
        self.prologue.push(format!("mov.u32 {tid}, %tid.x;"));
        for (i, p) in self.func.params.iter().enumerate() {
            match p {
                Param::Tensor(t) => {
                    let name = format!("{entry}_p{i}_ptr");
                    let raw = self.reg(RegClass::B64);
                    let ptr = self.reg(RegClass::B64);
                    self.prologue.push(format!("ld.param.u64 {raw}, [{name}];"));
                    self.prologue.push(format!("cvta.to.global.u64 {ptr}, {raw};"));
                    out.push(EntryParam { name, ty: "u64" });
                    let mut dims = Vec::new();
                    let mut strides = Vec::new();
                    for (kind, list) in [("d", &mut dims), ("s", &mut strides)] {
                        for d in 0..t.rank {
                            let name = format!("{entry}_p{i}_{kind}{d}");
                            let r = self.reg(RegClass::B32);
                            self.prologue.push(format!("ld.param.u32 {r}, [{name}];"));
                            out.push(EntryParam { name, ty: "u32" });
                            list.push(r);
                        }
                    }
                    self.tensors.insert(i, TensorRegs { ptr, dims, strides });
                }
                Param::Scalar { dtype, .. } => {
                    let name = format!("{entry}_p{i}");
                    let ty = match dtype {
                        DType::F32 => "f32",
                        DType::U32 => "u32",
                        _ => "s32",
                    };
                    out.push(EntryParam { name, ty });
                }
            }
        }
        out
    }

    fn special(&mut self, name: &str) -> String {
        if let Some(r) = self.specials.get(name) {
            return r.clone();
        }
        let r = self.reg(RegClass::B32);
        self.prologue.push(format!("mov.u32 {r}, {name};"));
        self.specials.insert(name.to_string(), r.clone());
        r
    }

    /// The coordinates of this thread's first element in layout `l`, per dimension.
    fn coords(&mut self, l: &Layout) -> Coords {
        let key = (l.lane.clone(), l.warp.clone(), l.shape.len());
        if let Some(c) = self.thread_coords.get(&key) {
            return c.clone();
        }
        // Thread-index bit i (lanes first, then warps) selects coordinate bit bits[i].
        let bits: Vec<Option<Bit>> = l.lane.iter().chain(&l.warp).copied().collect();
        let mut coords: Coords = vec![None; l.shape.len()];
        let mut i = 0;
        while i < bits.len() {
            let Some((d, b)) = bits[i] else {
                i += 1;
                continue;
            };
            // A run of thread bits that select consecutive bits of one dimension.
            let mut len = 1;
            while i + len < bits.len() && bits[i + len] == Some((d, b + len as u32)) {
                len += 1;
            }
            let t = self.reg(RegClass::B32);
            self.prologue.push(format!("bfe.u32 {t}, {}, {i}, {len};", self.tid));
            if b > 0 {
                self.prologue.push(format!("shl.b32 {t}, {t}, {b};"));
            }
            coords[d] = Some(match coords[d].take() {
                None => t,
                Some(prev) => {
                    let s = self.reg(RegClass::B32);
                    self.prologue.push(format!("or.b32 {s}, {prev}, {t};"));
                    s
                }
            });
            i += len;
        }
        self.thread_coords.insert(key, coords.clone());
        coords
    }

    /// True in the one thread of each group of copies (see `Layout::replicated_mask`).
    fn owner_pred(&mut self, mask: u32) -> Option<String> {
        if mask == 0 {
            return None;
        }
        if let Some(p) = self.repl_preds.get(&mask) {
            return Some(p.clone());
        }
        let t = self.reg(RegClass::B32);
        let p = self.reg(RegClass::Pred);
        self.prologue.push(format!("and.b32 {t}, {}, {mask};", self.tid));
        self.prologue.push(format!("setp.eq.u32 {p}, {t}, 0;"));
        self.repl_preds.insert(mask, p.clone());
        Some(p)
    }

    /// The row-major flat index of this thread's coordinates in `shape`.
    fn thread_flat(&mut self, coords: &Coords, shape: &[usize]) -> Option<String> {
        let mut acc: Option<String> = None;
        for (c, s) in coords.iter().zip(row_strides(shape)) {
            let Some(c) = c else { continue };
            let term = if s == 1 {
                c.clone()
            } else {
                let t = self.reg(RegClass::B32);
                self.emit(format!("shl.b32 {t}, {c}, {};", s.trailing_zeros()));
                t
            };
            acc = Some(self.fold(acc, term, "add.s32", RegClass::B32));
        }
        acc
    }

    /// The start of the scratch area (reductions, layout conversions,
    /// operand staging), in a new register.
    fn scratch_base(&mut self) -> String {
        let (under_way, done) = self.pipelines;
        let after = (under_way == 0).then_some(done);
        self.scratch_after = Some(match self.scratch_after {
            None => after,
            Some(before) => before.zip(after).map(|(b, a)| b.min(a)),
        });
        let base = match self.scratch_offset {
            None => {
                let base = self.reg(RegClass::B32);
                self.emit(format!("mov.u32 {base}, smem;"));
                base
            }
            Some(offset) => self.dynamic_address(offset, None),
        };
        // Teams taking turns: this thread's team's part.
        if let Some(team) = self.roles.as_ref().and_then(|r| r.team.as_ref()?.scratch.clone()) {
            self.emit(format!("add.s32 {base}, {base}, {team};"));
        }
        base
    }

    /// `offset` bytes into dynamic shared memory, plus `index * stride`
    /// when given (a register and a byte stride), in a new register.
    fn dynamic_address(&mut self, offset: usize, index: Option<(&str, usize)>) -> String {
        let a = self.reg(RegClass::B32);
        self.emit(format!("mov.u32 {a}, {}_dyn_smem;", self.entry));
        self.emit(format!("add.s32 {a}, {a}, {offset};"));
        if let Some(t) = &self.twins {
            let line = format!("add.s32 {a}, {a}, {};", t.offset);
            self.emit(line);
        }
        if let Some((index, stride)) = index {
            self.emit(format!("mad.lo.s32 {a}, {index}, {stride}, {a};"));
        }
        a
    }

    /// The shared-memory address of this thread's first element, `bytes` per element.
    fn smem_base(&mut self, l: &Layout, bytes: usize) -> String {
        let coords = self.coords(l);
        let base = self.scratch_base();
        let Some(f) = self.thread_flat(&coords, &l.shape) else {
            return base;
        };
        let t = self.reg(RegClass::B32);
        self.emit(format!("mad.lo.s32 {t}, {f}, {bytes}, {base};"));
        t
    }

    // ---- element-wise helpers ------------------------------------------------

    fn mov(&mut self, class: RegClass, dst: &str, src: &str) {
        self.emit(format!("mov.{} {dst}, {src};", mov_type(class)));
    }

    fn copy(&mut self, class: RegClass, src: &str) -> String {
        let d = self.reg(class);
        self.mov(class, &d, src);
        d
    }

    /// `term` combined into `acc` by the binary `op` (`add.s32`,
    /// `and.pred`) into a new register of `class`, or `term` itself when
    /// `acc` is empty: a sum or conjunction built one term at a time.
    fn fold(&mut self, acc: Option<String>, term: String, op: &str, class: RegClass) -> String {
        match acc {
            None => term,
            Some(a) => {
                let d = self.reg(class);
                self.emit(format!("{op} {d}, {a}, {term};"));
                d
            }
        }
    }

    /// The two 16-bit halves of word `w`, low first.
    fn split_word(&mut self, w: &str) -> (String, String) {
        let (lo, hi) = (self.reg(RegClass::B16), self.reg(RegClass::B16));
        self.emit(format!("mov.b32 {{{lo}, {hi}}}, {w};"));
        self.split_words.insert((lo.clone(), hi.clone()), w.to_string());
        (lo, hi)
    }

    /// The word of 16-bit halves `lo` and `hi`: the word they were split
    /// from, if they were, so that an `ldmatrix` or load result reaches an
    /// `mma` or store as it was read. Packing it anew left ptxas moving
    /// operand fragments between registers: 48 of the 250 instructions of a
    /// 128x128x64 bf16 K-step.
    fn packed_word(&mut self, lo: &str, hi: &str) -> String {
        if let Some(w) = self.split_words.get(&(lo.to_string(), hi.to_string())) {
            return w.clone();
        }
        let w = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {w}, {{{lo}, {hi}}};"));
        w
    }

    fn widen(&mut self, r: &str, dtype: DType) -> String {
        match dtype {
            DType::F16 | DType::BF16 => {
                let f = self.reg(RegClass::F32);
                self.emit(format!("cvt.f32.{} {f}, {r};", arith_type(dtype)));
                f
            }
            _ => r.to_string(),
        }
    }

    fn narrow(&mut self, r: &str, dtype: DType) -> String {
        match dtype {
            DType::F16 | DType::BF16 => {
                let h = self.reg(RegClass::B16);
                self.emit(format!("cvt.rn.{}.f32 {h}, {r};", arith_type(dtype)));
                h
            }
            _ => r.to_string(),
        }
    }

    fn constant(&mut self, c: ConstVal, dtype: DType) -> String {
        match (c, dtype) {
            (ConstVal::Bool(b), _) => {
                let r = self.reg(RegClass::B32);
                let p = self.reg(RegClass::Pred);
                self.emit(format!("mov.u32 {r}, {};", b as u32));
                self.emit(format!("setp.ne.u32 {p}, {r}, 0;"));
                p
            }
            (ConstVal::Int(i), DType::I32 | DType::U32) => {
                let r = self.reg(RegClass::B32);
                self.emit(format!("mov.b32 {r}, {};", i as u32));
                r
            }
            (ConstVal::Int(i), d) => self.constant(ConstVal::Float(i as f64), d),
            (ConstVal::Float(x), d) => {
                let f = self.reg(RegClass::F32);
                self.emit(format!("mov.f32 {f}, {};", f32_imm(x)));
                self.narrow(&f, d)
            }
        }
    }

    fn f32_const(&mut self, x: f64) -> String {
        self.constant(ConstVal::Float(x), DType::F32)
    }

    fn unary(&mut self, op: UnaryOp, dtype: DType, a: &str) -> String {
        if dtype.is_half() {
            let x = self.widen(a, dtype);
            let y = self.unary(op, DType::F32, &x);
            return self.narrow(&y, dtype);
        }
        let class = RegClass::of(dtype);
        let d = self.reg(class);
        let t = arith_type(dtype);
        match (op, dtype) {
            (UnaryOp::Not, DType::Bool) => self.emit(format!("not.pred {d}, {a};")),
            (UnaryOp::Not, _) => self.emit(format!("not.b32 {d}, {a};")),
            (UnaryOp::Neg, _) => self.emit(format!("neg.{t} {d}, {a};")),
            (UnaryOp::Abs, _) => self.emit(format!("abs.{t} {d}, {a};")),
            (UnaryOp::Exp, _) => {
                let s = self.reg(RegClass::F32);
                self.emit(format!("mul.f32 {s}, {a}, {};", f32_imm(std::f64::consts::LOG2_E)));
                self.emit(format!("{EX2} {d}, {s};"));
            }
            (UnaryOp::Exp2, _) => self.emit(format!("{EX2} {d}, {a};")),
            (UnaryOp::Log, _) => {
                let s = self.reg(RegClass::F32);
                self.emit(format!("lg2.approx.f32 {s}, {a};"));
                self.emit(format!("mul.f32 {d}, {s}, {};", f32_imm(std::f64::consts::LN_2)));
            }
            (UnaryOp::Log2, _) => self.emit(format!("lg2.approx.f32 {d}, {a};")),
            (UnaryOp::Sqrt, _) => self.emit(format!("sqrt.rn.f32 {d}, {a};")),
            (UnaryOp::Rsqrt, _) => self.emit(format!("rsqrt.approx.f32 {d}, {a};")),
            (UnaryOp::Tanh, _) => self.emit(format!("tanh.approx.f32 {d}, {a};")),
            (UnaryOp::Erf, _) => return self.erf(a),
        }
        d
    }

    /// erf(x) = sign(x) (1 - p(t) e^{-x^2}), t = 1 / (1 + 0.3275911 |x|)
    /// (Abramowitz & Stegun 7.1.26, absolute error under 1.5e-7).
    fn erf(&mut self, x: &str) -> String {
        let ax = self.reg(RegClass::F32);
        self.emit(format!("abs.f32 {ax}, {x};"));
        let den = self.reg(RegClass::F32);
        self.emit(format!("fma.rn.f32 {den}, {ax}, {}, 0f3F800000;", f32_imm(0.3275911)));
        let t = self.reg(RegClass::F32);
        self.emit(format!("rcp.rn.f32 {t}, {den};"));
        let coeffs = [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592];
        let mut p = self.f32_const(coeffs[0]);
        for c in &coeffs[1..] {
            let n = self.reg(RegClass::F32);
            self.emit(format!("fma.rn.f32 {n}, {p}, {t}, {};", f32_imm(*c)));
            p = n;
        }
        let pt = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {pt}, {p}, {t};"));
        let sq = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {sq}, {ax}, {ax};"));
        let arg = self.reg(RegClass::F32);
        self.emit(format!("mul.f32 {arg}, {sq}, {};", f32_imm(-std::f64::consts::LOG2_E)));
        let e = self.reg(RegClass::F32);
        self.emit(format!("{EX2} {e}, {arg};"));
        let r = self.reg(RegClass::F32);
        self.emit(format!("neg.f32 {pt}, {pt};"));
        self.emit(format!("fma.rn.f32 {r}, {pt}, {e}, 0f3F800000;"));
        let d = self.reg(RegClass::F32);
        self.emit(format!("copysign.f32 {d}, {x}, {r};"));
        d
    }

    fn binary(&mut self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> String {
        if dtype.is_half() {
            let x = self.widen(a, dtype);
            let y = self.widen(b, dtype);
            let r = self.binary(op, DType::F32, &x, &y);
            return if op.is_comparison() { r } else { self.narrow(&r, dtype) };
        }
        let t = arith_type(dtype);
        if op.is_comparison() {
            let d = self.reg(RegClass::Pred);
            if dtype == DType::Bool {
                match op {
                    BinaryOp::Ne => self.emit(format!("xor.pred {d}, {a}, {b};")),
                    BinaryOp::Eq => {
                        self.emit(format!("xor.pred {d}, {a}, {b};"));
                        self.emit(format!("not.pred {d}, {d};"));
                    }
                    _ => unreachable!("checked: bools compare only for equality"),
                }
                return d;
            }
            let cmp = match (op, dtype.is_float()) {
                (BinaryOp::Eq, _) => "eq",
                (BinaryOp::Ne, true) => "neu",
                (BinaryOp::Ne, false) => "ne",
                (BinaryOp::Lt, _) => "lt",
                (BinaryOp::Le, _) => "le",
                (BinaryOp::Gt, _) => "gt",
                _ => "ge",
            };
            self.emit(format!("setp.{cmp}.{t} {d}, {a}, {b};"));
            return d;
        }
        let d = self.reg(RegClass::of(dtype));
        let bits = if dtype == DType::Bool { "pred" } else { "b32" };
        let ins = match op {
            BinaryOp::Add => format!("add.{t}"),
            BinaryOp::Sub => format!("sub.{t}"),
            BinaryOp::Mul if dtype.is_float() => format!("mul.{t}"),
            BinaryOp::Mul => format!("mul.lo.{t}"),
            BinaryOp::Div if dtype.is_float() => format!("div.rn.{t}"),
            BinaryOp::Div => format!("div.{t}"),
            BinaryOp::Rem => format!("rem.{t}"),
            BinaryOp::Max => format!("max.{t}"),
            BinaryOp::Min => format!("min.{t}"),
            BinaryOp::And => format!("and.{bits}"),
            BinaryOp::Or => format!("or.{bits}"),
            BinaryOp::Xor => format!("xor.{bits}"),
            BinaryOp::Shl => "shl.b32".to_string(),
            BinaryOp::Shr => format!("shr.{t}"),
            _ => unreachable!("comparisons handled above"),
        };
        self.emit(format!("{ins} {d}, {a}, {b};"));
        d
    }

    fn select(&mut self, dtype: DType, c: &str, a: &str, b: &str) -> String {
        if dtype == DType::Bool {
            let (x, y, d) = (
                self.reg(RegClass::Pred),
                self.reg(RegClass::Pred),
                self.reg(RegClass::Pred),
            );
            self.emit(format!("and.pred {x}, {c}, {a};"));
            self.emit(format!("not.pred {y}, {c};"));
            self.emit(format!("and.pred {y}, {y}, {b};"));
            self.emit(format!("or.pred {d}, {x}, {y};"));
            return d;
        }
        let class = RegClass::of(dtype);
        let d = self.reg(class);
        let t = if dtype.is_half() { "b16" } else { arith_type(dtype) };
        self.emit(format!("selp.{t} {d}, {a}, {b}, {c};"));
        d
    }

    fn cast(&mut self, from: DType, to: DType, a: &str) -> String {
        use DType::*;
        if from == to {
            return a.to_string();
        }
        match (from, to) {
            (Bool, _) => {
                let d = self.reg(RegClass::B32);
                self.emit(format!("selp.u32 {d}, 1, 0, {a};"));
                self.cast(U32, to, &d)
            }
            (_, Bool) => {
                let p = self.reg(RegClass::Pred);
                let cmp = if from.is_float() { "neu" } else { "ne" };
                let x = self.widen(a, from);
                let t = if from.is_float() { "f32" } else { arith_type(from) };
                let zero = if from.is_float() { "0f00000000" } else { "0" };
                self.emit(format!("setp.{cmp}.{t} {p}, {x}, {zero};"));
                p
            }
            (I32, U32) | (U32, I32) => a.to_string(),
            (F16 | BF16, _) => {
                let f = self.widen(a, from);
                self.cast(F32, to, &f)
            }
            (_, F16 | BF16) => {
                let f = self.cast(from, F32, a);
                self.narrow(&f, to)
            }
            (F32, I32 | U32) => {
                let d = self.reg(RegClass::B32);
                self.emit(format!("cvt.rzi.{}.f32 {d}, {a};", arith_type(to)));
                d
            }
            (I32 | U32, F32) => {
                let d = self.reg(RegClass::F32);
                self.emit(format!("cvt.rn.f32.{} {d}, {a};", arith_type(from)));
                d
            }
            _ => unreachable!("all dtype pairs covered"),
        }
    }

    // ---- ops ------------------------------------------------------------------

    fn ops(&mut self, ops: &[Op]) -> Result<()> {
        for op in ops {
            self.op(op)?;
        }
        Ok(())
    }

    fn regs_of(&self, v: ValueId) -> Vec<String> {
        self.vals[&v].clone()
    }

    fn scalar(&self, v: ValueId) -> String {
        self.vals[&v][0].clone()
    }

    fn op(&mut self, op: &Op) -> Result<()> {
        let r = op.results.first().copied();
        if r.is_some_and(|r| self.skip.contains(&r)) {
            return Ok(());
        }
        let out: Vec<String> = match &op.kind {
            OpKind::ScalarParam(i) => {
                let Param::Scalar { dtype, .. } = &self.func.params[*i] else {
                    unreachable!()
                };
                let class = RegClass::of(*dtype);
                let reg = self.reg(class);
                let ty = match dtype {
                    DType::F32 => "f32",
                    DType::U32 => "u32",
                    _ => "s32",
                };
                let name = format!("{}_p{i}", self.entry);
                self.prologue.push(format!("ld.param.{ty} {reg}, [{name}];"));
                vec![reg]
            }
            OpKind::BlockId(0) if self.roles.is_some() => vec![self.roles.as_ref().expect("roles").block.clone()],
            OpKind::NumBlocks(0) if self.roles.is_some() => vec![self.roles.as_ref().expect("roles").grid.clone()],
            OpKind::BlockId(0) if self.twins.is_some() => vec![self.twins.as_ref().expect("twins").block.clone()],
            OpKind::NumBlocks(0) if self.twins.is_some() => vec![self.twins.as_ref().expect("twins").grid.clone()],
            OpKind::BlockId(a) => vec![self.special(&format!("%ctaid.{}", ["x", "y", "z"][*a]))],
            OpKind::NumBlocks(a) => vec![self.special(&format!("%nctaid.{}", ["x", "y", "z"][*a]))],
            OpKind::TensorDim { tensor, axis } => vec![self.tensors[tensor].dims[*axis].clone()],
            OpKind::Const(c) => vec![self.constant(*c, self.dtype(r.expect("result")))],
            OpKind::Get { tensor, index } => vec![self.get(*tensor, index)],
            OpKind::Splat(s) => {
                let n = self.layout(r.expect("result")).num_regs();
                vec![self.scalar(*s); n]
            }
            OpKind::Arange => {
                let l = self.layout(r.expect("result"));
                let coords = self.coords(l);
                (0..l.num_regs())
                    .map(|q| {
                        let k = l.reg_coord(q)[0];
                        let d = self.reg(RegClass::B32);
                        match &coords[0] {
                            Some(c) => self.emit(format!("add.s32 {d}, {c}, {k};")),
                            None => self.emit(format!("mov.b32 {d}, {k};")),
                        }
                        d
                    })
                    .collect()
            }
            OpKind::Load { tensor, index, pad } => self.load(*tensor, index, *pad, r.expect("result")),
            OpKind::Store { tensor, index, value } => {
                self.store(*tensor, index, *value);
                vec![]
            }
            OpKind::Gather { tensor, index, pad } => self.gather(*tensor, index, *pad),
            OpKind::Scatter { tensor, index, value } => {
                self.scatter(*tensor, index, *value);
                vec![]
            }
            OpKind::Unary(u, a) => {
                let dt = self.dtype(*a);
                self.regs_of(*a).iter().map(|x| self.unary(*u, dt, x)).collect()
            }
            OpKind::Binary(b, x, y) => {
                let dt = self.dtype(*x);
                let (xs, ys) = (self.regs_of(*x), self.regs_of(*y));
                xs.iter().zip(&ys).map(|(p, q)| self.binary(*b, dt, p, q)).collect()
            }
            OpKind::Select(c, a, b) => {
                let dt = self.dtype(*a);
                let (cs, xs, ys) = (self.regs_of(*c), self.regs_of(*a), self.regs_of(*b));
                (0..xs.len()).map(|i| self.select(dt, &cs[i], &xs[i], &ys[i])).collect()
            }
            OpKind::Cast(a) => {
                let (from, to) = (self.dtype(*a), self.dtype(r.expect("result")));
                self.regs_of(*a).iter().map(|x| self.cast(from, to, x)).collect()
            }
            OpKind::Reduce { op: rop, arg, axis } => self.reduce(*rop, *arg, *axis, r.expect("result")),
            OpKind::Reshape(a) | OpKind::Permute { arg: a, .. } => self.regs_of(*a),
            OpKind::Broadcast(a) => self.broadcast(*a, r.expect("result")),
            OpKind::Mma { a, b, acc } => match self.path {
                MmaPath::Portable => self.mma(*a, *b, *acc),
                MmaPath::Wgmma => self.wgmma(*a, *b, *acc, r.expect("mma result")),
            },
            OpKind::Convert(a) => self.convert(*a, r.expect("result")),
            OpKind::For {
                lo,
                hi,
                var,
                inits,
                args,
                body,
                yields,
            } => {
                self.for_loop(*lo, *hi, *var, inits, args, body, yields, &op.results)?;
                return Ok(());
            }
            OpKind::If {
                cond,
                then_body,
                then_yields,
                else_body,
                else_yields,
            } => {
                self.if_op(*cond, then_body, then_yields, else_body, else_yields, &op.results)?;
                return Ok(());
            }
        };
        if let Some(r) = r {
            self.vals.insert(r, out);
        }
        Ok(())
    }

    // ---- memory ---------------------------------------------------------------

    /// The address of the element at `coords` (registers) of tensor `t`, and
    /// the predicate that it is in bounds.
    fn element_address(&mut self, t: usize, coords: &[String]) -> (String, String) {
        let eb = self.func.tensor(t).dtype.bytes();
        let (ptr, dims, strides) = {
            let tr = &self.tensors[&t];
            (tr.ptr.clone(), tr.dims.clone(), tr.strides.clone())
        };
        let mut off: Option<String> = None;
        let mut pred: Option<String> = None;
        for (d, i) in coords.iter().enumerate() {
            let p = self.reg(RegClass::Pred);
            self.emit(format!("setp.lt.u32 {p}, {i}, {};", dims[d]));
            pred = Some(self.fold(pred, p, "and.pred", RegClass::Pred));
            let o = self.reg(RegClass::B32);
            match off {
                None => self.emit(format!("mul.lo.s32 {o}, {i}, {};", strides[d])),
                Some(prev) => self.emit(format!("mad.lo.s32 {o}, {i}, {}, {prev};", strides[d])),
            }
            off = Some(o);
        }
        let a = self.reg(RegClass::B64);
        self.emit(format!("mad.wide.s32 {a}, {}, {eb}, {ptr};", off.expect("rank >= 1")));
        (a, pred.expect("rank >= 1"))
    }

    /// Reads one element (`pad` when out of bounds) with a predicated load.
    fn load_element(&mut self, t: usize, coords: &[String], pad: &str) -> String {
        let param = self.func.tensor(t).clone();
        let (a, pred) = self.element_address(t, coords);
        let class = RegClass::of(param.dtype);
        let d = self.copy(class, pad);
        let ty = if param.dtype.is_half() {
            "b16"
        } else {
            arith_type(param.dtype)
        };
        let nc = if param.mutable { "" } else { ".nc" };
        self.emit(format!("@{pred} ld.global{nc}.{ty} {d}, [{a}];"));
        d
    }

    fn get(&mut self, t: usize, index: &[ValueId]) -> String {
        let coords: Vec<String> = index.iter().map(|i| self.scalar(*i)).collect();
        let zero = self.constant(ConstVal::Int(0), self.func.tensor(t).dtype);
        self.load_element(t, &coords, &zero)
    }

    fn gather(&mut self, t: usize, index: &[ValueId], pad: ValueId) -> Vec<String> {
        let pad = self.scalar(pad);
        let idx: Vec<Vec<String>> = index.iter().map(|i| self.regs_of(*i)).collect();
        (0..idx[0].len())
            .map(|e| {
                let coords: Vec<String> = idx.iter().map(|i| i[e].clone()).collect();
                self.load_element(t, &coords, &pad)
            })
            .collect()
    }

    fn scatter(&mut self, t: usize, index: &[ValueId], value: ValueId) {
        let dtype = self.func.tensor(t).dtype;
        let owner = self.owner_pred(self.layout(value).replicated_mask());
        let vals = self.regs_of(value);
        let idx: Vec<Vec<String>> = index.iter().map(|i| self.regs_of(*i)).collect();
        let ty = if dtype.is_half() { "b16" } else { arith_type(dtype) };
        for (e, v) in vals.iter().enumerate() {
            let coords: Vec<String> = idx.iter().map(|i| i[e].clone()).collect();
            let (a, mut pred) = self.element_address(t, &coords);
            if let Some(o) = &owner {
                let n = self.reg(RegClass::Pred);
                self.emit(format!("and.pred {n}, {pred}, {o};"));
                pred = n;
            }
            self.emit(format!("@{pred} st.global.{ty} [{a}], {v};"));
        }
    }

    /// `base + k` and whether it is below `dim`.
    fn position(&mut self, base: &str, k: usize, dim: &str) -> (String, String) {
        let pos = if k == 0 {
            base.to_string()
        } else {
            let p = self.reg(RegClass::B32);
            self.emit(format!("add.s32 {p}, {base}, {k};"));
            p
        };
        let inb = self.reg(RegClass::Pred);
        self.emit(format!("setp.lt.u32 {inb}, {pos}, {dim};"));
        (pos, inb)
    }

    /// The accesses that move tile `l` of tensor `t` at tile-grid `index`.
    fn accesses(&mut self, t: usize, index: &[ValueId], l: &Layout, store: bool) -> Vec<Access> {
        let index: Vec<String> = index.iter().map(|&i| self.scalar(i)).collect();
        let param = self.func.tensor(t).clone();
        let rank = param.rank;
        let eb = param.dtype.bytes();
        let (ptr, dims, strides) = {
            let tr = &self.tensors[&t];
            (tr.ptr.clone(), tr.dims.clone(), tr.strides.clone())
        };
        let coords = self.coords(l);
        // This thread's first element along each dimension.
        let mut base = Vec::new();
        for d in 0..rank {
            let ix = index[d].clone();
            let origin = if l.shape[d] == 1 {
                ix
            } else {
                let o = self.reg(RegClass::B32);
                self.emit(format!("shl.b32 {o}, {ix}, {};", l.shape[d].trailing_zeros()));
                o
            };
            base.push(match &coords[d] {
                None => origin,
                Some(c) => {
                    let b = self.reg(RegClass::B32);
                    self.emit(format!("add.s32 {b}, {origin}, {c};"));
                    b
                }
            });
        }
        let vectors = self.vectorized.contains(&t);
        if vectors {
            self.vector_accessed.insert(t);
        }
        let width = if vectors {
            l.contiguous_run(rank - 1).min(16 / eb)
        } else {
            1
        };
        // With a contiguous last dimension, its offsets are immediates.
        let strided_dims = if vectors { rank - 1 } else { rank };
        let owner = if store {
            self.owner_pred(l.replicated_mask())
        } else {
            None
        };

        let mut dim_terms: HashMap<(usize, usize), (String, String)> = HashMap::new();
        let mut rows: HashMap<Vec<usize>, (String, Option<String>)> = HashMap::new();
        let mut last_preds: HashMap<usize, String> = HashMap::new();
        let mut out = Vec::new();
        for first in (0..l.num_regs()).step_by(width) {
            let c = l.reg_coord(first);
            let key: Vec<usize> = c[..strided_dims].to_vec();
            if let std::collections::hash_map::Entry::Vacant(slot) = rows.entry(key.clone()) {
                let mut off: Option<String> = None;
                let mut pred: Option<String> = None;
                for d in 0..strided_dims {
                    let k = c[d];
                    let (o, inb) = match dim_terms.get(&(d, k)) {
                        Some(t) => t.clone(),
                        None => {
                            let (pos, inb) = self.position(&base[d], k, &dims[d]);
                            let o = self.reg(RegClass::B32);
                            self.emit(format!("mul.lo.s32 {o}, {pos}, {};", strides[d]));
                            dim_terms.insert((d, k), (o.clone(), inb.clone()));
                            (o, inb)
                        }
                    };
                    off = Some(self.fold(off, o, "add.s32", RegClass::B32));
                    pred = Some(self.fold(pred, inb, "and.pred", RegClass::Pred));
                }
                let last = rank - 1;
                let off = if vectors {
                    match off {
                        None => base[last].clone(),
                        Some(o) => {
                            let s = self.reg(RegClass::B32);
                            self.emit(format!("add.s32 {s}, {o}, {};", base[last]));
                            s
                        }
                    }
                } else {
                    off.expect("rank >= 1")
                };
                let a = self.reg(RegClass::B64);
                self.emit(format!("mad.wide.s32 {a}, {off}, {eb}, {ptr};"));
                slot.insert((a, pred));
            }
            let (a, row_pred) = rows[&key].clone();
            let mut preds: Vec<String> = row_pred.into_iter().collect();
            let mut imm = 0;
            if vectors {
                let k = c[rank - 1];
                imm = k * eb;
                let inb = match last_preds.get(&k) {
                    Some(p) => p.clone(),
                    None => {
                        let (_, inb) = self.position(&base[rank - 1], k, &dims[rank - 1]);
                        last_preds.insert(k, inb.clone());
                        inb
                    }
                };
                preds.push(inb);
            }
            preds.extend(owner.clone());
            let mut pred = preds[0].clone();
            for p in &preds[1..] {
                let n = self.reg(RegClass::Pred);
                self.emit(format!("and.pred {n}, {pred}, {p};"));
                pred = n;
            }
            out.push(Access {
                first,
                width,
                addr: a,
                imm,
                pred,
            });
        }
        out
    }

    fn load(&mut self, t: usize, index: &[ValueId], pad: ValueId, result: ValueId) -> Vec<String> {
        let l = self.layout(result);
        let param = self.func.tensor(t).clone();
        let dtype = param.dtype;
        let nc = if param.mutable { "" } else { ".nc" };
        let pad = self.scalar(pad);
        let accesses = self.accesses(t, index, l, false);
        let mut regs = vec![String::new(); l.num_regs()];
        for a in accesses {
            let target = addr(&a.addr, a.imm);
            if dtype.is_half() && a.width >= 2 {
                let words = a.width / 2;
                let packed = self.reg(RegClass::B32);
                self.emit(format!("mov.b32 {packed}, {{{pad}, {pad}}};"));
                let ws: Vec<String> = (0..words).map(|_| self.copy(RegClass::B32, &packed)).collect();
                let (v, list) = if words > 1 {
                    (format!(".v{words}"), format!("{{{}}}", ws.join(", ")))
                } else {
                    (String::new(), ws[0].clone())
                };
                self.emit(format!("@{} ld.global{nc}{v}.b32 {list}, {target};", a.pred));
                for (i, w) in ws.iter().enumerate() {
                    let (lo, hi) = self.split_word(w);
                    regs[a.first + 2 * i] = lo;
                    regs[a.first + 2 * i + 1] = hi;
                }
                continue;
            }
            let class = RegClass::of(dtype);
            let ds: Vec<String> = (0..a.width).map(|_| self.copy(class, &pad)).collect();
            let ty = if dtype.is_half() { "b16" } else { arith_type(dtype) };
            let (v, list) = if a.width > 1 {
                (format!(".v{}", a.width), format!("{{{}}}", ds.join(", ")))
            } else {
                (String::new(), ds[0].clone())
            };
            self.emit(format!("@{} ld.global{nc}{v}.{ty} {list}, {target};", a.pred));
            for (i, d) in ds.into_iter().enumerate() {
                regs[a.first + i] = d;
            }
        }
        regs
    }

    fn store(&mut self, t: usize, index: &[ValueId], value: ValueId) {
        if self.tma_store(t, index, value) {
            return;
        }
        let l = self.layout(value);
        let dtype = self.func.tensor(t).dtype;
        let vals = self.regs_of(value);
        let accesses = self.accesses(t, index, l, true);
        for a in accesses {
            let target = addr(&a.addr, a.imm);
            let regs = &vals[a.first..a.first + a.width];
            let (ty, items): (&str, Vec<String>) = if dtype.is_half() && a.width >= 2 {
                let words = regs.chunks(2).map(|p| self.packed_word(&p[0], &p[1])).collect();
                ("b32", words)
            } else if dtype.is_half() {
                ("b16", regs.to_vec())
            } else {
                (arith_type(dtype), regs.to_vec())
            };
            let (v, list) = if items.len() > 1 {
                (format!(".v{}", items.len()), format!("{{{}}}", items.join(", ")))
            } else {
                (String::new(), items[0].clone())
            };
            self.emit(format!("@{} st.global{v}.{ty} {target}, {list};", a.pred));
        }
    }

    // ---- data movement between layouts ------------------------------------------

    fn broadcast(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        let l = self.layout(result);
        let src = self.regs_of(arg);
        let from = &self.func.values[arg].shape.clone().expect("tile");
        // Register bits of the result that survive in the argument, in order.
        let kept: Vec<usize> = (0..l.reg.len())
            .filter(|&i| !(from[l.reg[i].0] == 1 && l.shape[l.reg[i].0] > 1))
            .collect();
        (0..l.num_regs())
            .map(|q| {
                let r: usize = kept.iter().enumerate().map(|(j, &i)| (q >> i & 1) << j).sum();
                src[r].clone()
            })
            .collect()
    }

    fn convert(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        if self.staged_once(result).is_some_and(|source| source == arg) {
            // Stored straight from `arg` before its loop: no registers.
            self.stored_unconverted.insert(result, arg);
            return Vec::new();
        }
        let (la, lb) = (self.layout(arg), self.layout(result));
        if let Some((base, contiguous, role)) = self.staged_reads.get(&result).cloned() {
            // `wgmma` reads the stage itself, through a descriptor.
            if self.path == MmaPath::Wgmma {
                return Vec::new();
            }
            let eb = self.dtype(arg).bytes();
            return self
                .read_fragments(&base, lb, (contiguous, eb), role)
                .unwrap_or_else(|| self.read_elements(&base, lb, contiguous));
        }
        let src = self.regs_of(arg);
        if let Some(perm) = la.register_permutation(lb) {
            return perm.into_iter().map(|r| src[r].clone()).collect();
        }
        if let Some(role) = self.operands.get(&result).copied() {
            if let Some(regs) = self.stage_operand(arg, result, role) {
                return regs;
            }
        }
        if let Some(regs) = self.convert_swizzled(arg, result) {
            return regs;
        }
        let dtype = self.dtype(arg);
        let (class, ty, bytes) = match dtype {
            DType::F16 | DType::BF16 => (RegClass::B16, "b16", 2),
            DType::Bool => (RegClass::B32, "u32", 4),
            DType::F32 => (RegClass::F32, "f32", 4),
            _ => (RegClass::B32, "b32", 4),
        };
        let n: usize = la.shape.iter().product();
        self.shared_bytes = self.shared_bytes.max(n * bytes);
        let wbase = self.smem_base(la, bytes);
        let owner = self.owner_pred(la.replicated_mask());
        self.barrier();
        for (r, v) in src.iter().enumerate() {
            let v = if dtype == DType::Bool {
                self.cast(DType::Bool, DType::U32, v)
            } else {
                v.clone()
            };
            let imm = flat(&la.reg_coord(r), &la.shape) * bytes;
            let guard = owner.as_ref().map(|p| format!("@{p} ")).unwrap_or_default();
            self.emit(format!("{guard}st.shared.{ty} {}, {v};", addr(&wbase, imm)));
        }
        self.barrier();
        let rbase = self.smem_base(lb, bytes);
        (0..lb.num_regs())
            .map(|q| {
                let d = self.reg(class);
                let imm = flat(&lb.reg_coord(q), &lb.shape) * bytes;
                self.emit(format!("ld.shared.{ty} {d}, {};", addr(&rbase, imm)));
                if dtype == DType::Bool {
                    self.cast(DType::U32, DType::Bool, &d)
                } else {
                    d
                }
            })
            .collect()
    }

    // ---- reductions ------------------------------------------------------------

    fn combine(&mut self, op: ReduceOp, dtype: DType, a: &str, b: &str) -> String {
        let bop = match op {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Max => BinaryOp::Max,
            _ => BinaryOp::Min,
        };
        self.binary(bop, dtype, a, b)
    }

    /// Picks `(bv, bi)` over `(av, ai)` when it is larger (smaller for argmin),
    /// or equal with a smaller index.
    fn combine_arg(&mut self, op: ReduceOp, a: (&str, &str), b: (&str, &str)) -> (String, String) {
        let cmp = if op == ReduceOp::ArgMax { "gt" } else { "lt" };
        let (p, q, s) = (
            self.reg(RegClass::Pred),
            self.reg(RegClass::Pred),
            self.reg(RegClass::Pred),
        );
        self.emit(format!("setp.{cmp}.f32 {p}, {}, {};", b.0, a.0));
        self.emit(format!("setp.eq.f32 {q}, {}, {};", b.0, a.0));
        self.emit(format!("setp.lt.s32 {s}, {}, {};", b.1, a.1));
        self.emit(format!("and.pred {q}, {q}, {s};"));
        self.emit(format!("or.pred {p}, {p}, {q};"));
        let (v, i) = (self.reg(RegClass::F32), self.reg(RegClass::B32));
        self.emit(format!("selp.f32 {v}, {}, {}, {p};", b.0, a.0));
        self.emit(format!("selp.b32 {i}, {}, {}, {p};", b.1, a.1));
        (v, i)
    }

    fn reduce(&mut self, op: ReduceOp, arg: ValueId, axis: usize, result: ValueId) -> Vec<String> {
        let (la, lr) = (self.layout(arg), self.layout(result));
        let in_dtype = self.dtype(arg);
        let is_arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
        // Floats reduce in f32; arg-reductions compare as f32 too.
        let acc_dtype = if in_dtype.is_float() || is_arg {
            DType::F32
        } else {
            in_dtype
        };
        let src: Vec<String> = self
            .regs_of(arg)
            .iter()
            .map(|r| {
                if in_dtype == acc_dtype {
                    r.clone()
                } else {
                    self.cast(in_dtype, acc_dtype, r)
                }
            })
            .collect();
        let idx: Vec<String> = if is_arg {
            let coords = self.coords(la);
            (0..la.num_regs())
                .map(|r| {
                    let k = la.reg_coord(r)[axis];
                    let d = self.reg(RegClass::B32);
                    match &coords[axis] {
                        Some(c) => self.emit(format!("add.s32 {d}, {c}, {k};")),
                        None => self.emit(format!("mov.b32 {d}, {k};")),
                    }
                    d
                })
                .collect()
        } else {
            Vec::new()
        };

        // 1. Inside each thread.
        let keep: Vec<usize> = (0..la.reg.len()).filter(|&i| la.reg[i].0 != axis).collect();
        let fold: Vec<usize> = (0..la.reg.len()).filter(|&i| la.reg[i].0 == axis).collect();
        let mut vals = Vec::new();
        let mut idxs = Vec::new();
        for q in 0..lr.num_regs() {
            let base: usize = keep.iter().enumerate().map(|(j, &i)| (q >> j & 1) << i).sum();
            let mut members: Vec<(String, String)> = (0..1usize << fold.len())
                .map(|m| {
                    let r = base | fold.iter().enumerate().map(|(j, &i)| (m >> j & 1) << i).sum::<usize>();
                    (src[r].clone(), idx.get(r).cloned().unwrap_or_default())
                })
                .collect();
            // Pairwise tree: shorter dependency chains and better rounding for sums.
            while members.len() > 1 {
                let mut next = Vec::new();
                for pair in members.chunks(2) {
                    next.push(if is_arg {
                        self.combine_arg(op, (&pair[0].0, &pair[0].1), (&pair[1].0, &pair[1].1))
                    } else {
                        (self.combine(op, acc_dtype, &pair[0].0, &pair[1].0), String::new())
                    });
                }
                members = next;
            }
            let (v, i) = members.pop().expect("one member");
            vals.push(v);
            idxs.push(i);
        }

        // 2. Across the lanes of a warp.
        for (bit, b) in la.lane.iter().enumerate() {
            if !matches!(b, Some((d, _)) if *d == axis) {
                continue;
            }
            for q in 0..vals.len() {
                let ov = self.reg(RegClass::of(acc_dtype));
                self.emit(format!("shfl.sync.bfly.b32 {ov}, {}, {}, 31, -1;", vals[q], 1 << bit));
                if is_arg {
                    let oi = self.reg(RegClass::B32);
                    self.emit(format!("shfl.sync.bfly.b32 {oi}, {}, {}, 31, -1;", idxs[q], 1 << bit));
                    let (v, i) = self.combine_arg(op, (&vals[q], &idxs[q]), (&ov, &oi));
                    vals[q] = v;
                    idxs[q] = i;
                } else {
                    vals[q] = self.combine(op, acc_dtype, &vals[q], &ov);
                }
            }
        }

        // 3. Across warps, through shared memory.
        let wbits: Vec<usize> = (0..la.warp.len())
            .filter(|&i| matches!(la.warp[i], Some((d, _)) if d == axis))
            .collect();
        if !wbits.is_empty() {
            let n: usize = lr.shape.iter().product();
            let k = 1usize << wbits.len();
            let region = k * n * 4;
            self.shared_bytes = self.shared_bytes.max(if is_arg { 2 * region } else { region });
            // The warp's position along the axis, compacted: which partial it holds.
            let j = self.reg(RegClass::B32);
            self.emit(format!("mov.b32 {j}, 0;"));
            for (pos, &w) in wbits.iter().enumerate() {
                let t = self.reg(RegClass::B32);
                self.emit(format!("bfe.u32 {t}, {}, {}, 1;", self.tid, LANE_BITS + w));
                self.emit(format!("shl.b32 {t}, {t}, {pos};"));
                self.emit(format!("or.b32 {j}, {j}, {t};"));
            }
            let rbase = self.smem_base(lr, 4);
            let wbase = self.reg(RegClass::B32);
            self.emit(format!("mad.lo.s32 {wbase}, {j}, {}, {rbase};", n * 4));
            let wmask = lr.replicated_mask() & !wbits.iter().map(|w| 1u32 << (LANE_BITS + w)).sum::<u32>();
            let owner = self.owner_pred(wmask);
            let guard = owner.map(|p| format!("@{p} ")).unwrap_or_default();
            let vty = if acc_dtype == DType::F32 { "f32" } else { "b32" };
            self.barrier();
            for q in 0..vals.len() {
                let imm = flat(&lr.reg_coord(q), &lr.shape) * 4;
                self.emit(format!("{guard}st.shared.{vty} {}, {};", addr(&wbase, imm), vals[q]));
                if is_arg {
                    self.emit(format!(
                        "{guard}st.shared.b32 {}, {};",
                        addr(&wbase, imm + region),
                        idxs[q]
                    ));
                }
            }
            self.barrier();
            for q in 0..vals.len() {
                let at = flat(&lr.reg_coord(q), &lr.shape) * 4;
                let mut acc: Option<(String, String)> = None;
                for part in 0..k {
                    let imm = at + part * n * 4;
                    let v = self.reg(RegClass::of(acc_dtype));
                    self.emit(format!("ld.shared.{vty} {v}, {};", addr(&rbase, imm)));
                    let i = if is_arg {
                        let i = self.reg(RegClass::B32);
                        self.emit(format!("ld.shared.b32 {i}, {};", addr(&rbase, imm + region)));
                        i
                    } else {
                        String::new()
                    };
                    acc = Some(match acc {
                        None => (v, i),
                        Some((av, ai)) if is_arg => self.combine_arg(op, (&av, &ai), (&v, &i)),
                        Some((av, _)) => (self.combine(op, acc_dtype, &av, &v), String::new()),
                    });
                }
                let (v, i) = acc.expect("at least one partial");
                vals[q] = v;
                idxs[q] = i;
            }
        }
        if is_arg {
            return idxs;
        }
        if acc_dtype == in_dtype {
            vals
        } else {
            vals.iter().map(|v| self.cast(acc_dtype, in_dtype, v)).collect()
        }
    }

    // ---- control flow -------------------------------------------------------------

    fn classes(&self, v: ValueId) -> RegClass {
        RegClass::of(self.dtype(v))
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        lo: ValueId,
        hi: ValueId,
        var: ValueId,
        inits: &[ValueId],
        args: &[ValueId],
        body: &[Op],
        yields: &[ValueId],
        results: &[ValueId],
    ) -> Result<()> {
        let mut carried = Vec::new();
        for (&init, &arg) in inits.iter().zip(args) {
            let class = self.classes(arg);
            let regs: Vec<String> = self.regs_of(init).iter().map(|r| self.copy(class, r)).collect();
            self.vals.insert(arg, regs.clone());
            carried.push(regs);
        }
        // Accumulators an `mma` may update in place: a carried tile used only
        // by the `mma` whose result is used only as the next iteration's value.
        for (&y, &arg) in yields.iter().zip(args) {
            let by_mma = body
                .iter()
                .any(|op| op.results.first() == Some(&y) && matches!(op.kind, OpKind::Mma { acc, .. } if acc == arg));
            if by_mma && pipeline::uses(body, arg) == 1 && pipeline::uses(body, y) == 0 {
                self.in_place.insert(y, arg);
            }
        }
        let i = self.copy(RegClass::B32, &self.scalar(lo));
        let mut plan = match &self.roles {
            Some(roles) if roles.plan.var == var => Some(roles.plan.clone()),
            _ => self.pipeline_plan(var, body, false, 1),
        };
        if let Some(plan) = &mut plan {
            self.pipelines.0 += 1;
            self.pipeline_prologue(plan, &i, &self.scalar(hi));
            self.wgmma_in_flight = plan.wgmma_in_flight;
        }
        self.stage_invariant_operands(body);
        self.vals.insert(var, vec![i.clone()]);
        let (head, end) = (self.label("loop"), self.label("done"));
        let done = self.reg(RegClass::Pred);
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.s32 {done}, {i}, {};", self.scalar(hi)));
        self.emit(format!("@{done} bra {end};"));
        if let Some(plan) = &plan {
            self.pipeline_step(plan, &i, &self.scalar(hi));
        }
        self.ops(body)?;
        if let Some(plan) = &plan {
            self.pipeline_advance(plan);
        }
        // Parallel copy: read every yield before overwriting any carried
        // register. A yield updated in place (`wgmma`) needs none.
        let mut temps = Vec::new();
        for ((&y, &arg), regs) in yields.iter().zip(args).zip(&carried) {
            if self.regs_of(y) == *regs {
                continue;
            }
            let class = self.classes(arg);
            let t: Vec<String> = self.regs_of(y).iter().map(|r| self.copy(class, r)).collect();
            temps.push((class, t, regs));
        }
        for (class, t, regs) in &temps {
            for (d, s) in regs.iter().zip(t) {
                self.mov(*class, d, s);
            }
        }
        self.emit(format!("add.s32 {i}, {i}, 1;"));
        self.emit(format!("bra {head};"));
        self.emit(format!("{end}:"));
        if plan.is_some() {
            self.pipeline_drain();
            self.wgmma_in_flight = 0;
            self.pipelines = (self.pipelines.0 - 1, self.pipelines.1 + 1);
        }
        for (&r, regs) in results.iter().zip(carried) {
            self.vals.insert(r, regs);
        }
        Ok(())
    }

    fn if_op(
        &mut self,
        cond: ValueId,
        then_body: &[Op],
        then_yields: &[ValueId],
        else_body: &[Op],
        else_yields: &[ValueId],
        results: &[ValueId],
    ) -> Result<()> {
        let outs: Vec<(RegClass, Vec<String>)> = results
            .iter()
            .map(|&r| {
                let class = self.classes(r);
                let n = if self.func.values[r].is_scalar() {
                    1
                } else {
                    self.layout(r).num_regs()
                };
                (class, (0..n).map(|_| self.reg(class)).collect())
            })
            .collect();
        let (els, end) = (self.label("else"), self.label("endif"));
        self.emit(format!("@!{} bra {els};", self.scalar(cond)));
        for (body, yields, label) in [(then_body, then_yields, Some(&end)), (else_body, else_yields, None)] {
            self.ops(body)?;
            for ((class, regs), &y) in outs.iter().zip(yields) {
                let src = self.regs_of(y);
                for (d, s) in regs.iter().zip(&src) {
                    self.mov(*class, d, s);
                }
            }
            if let Some(end) = label {
                self.emit(format!("bra {end};"));
                self.emit(format!("{els}:"));
            }
        }
        self.emit(format!("{end}:"));
        for (&r, (_, regs)) in results.iter().zip(outs) {
            self.vals.insert(r, regs);
        }
        Ok(())
    }
}
