//! Lowering: tile IR with layouts to per-thread PTX instructions over
//! virtual registers.
//!
//! Each tile value becomes the registers its layout gives a thread (in
//! register-index order); scalars are one register that every thread holds.
//! Loads and stores become (vector) global accesses guarded by bounds
//! predicates; reductions fold in-thread, then across lanes with
//! `shfl.sync.bfly`, then across warps through shared memory; layout
//! conversions go through shared memory unless they only reorder registers.

use crate::ptx::{self, Regs};
use std::collections::{BTreeSet, HashMap, HashSet};

mod arith;
mod cluster;
mod cluster_gather;
mod control;
mod convert;
mod emit;
mod flagged;
mod memory;
mod persistent;
mod pipeline;
mod reduce;
mod scan;
mod sort;
mod specialize;
mod state;
mod tensor_core;
mod tma;
mod tma_store;
mod transpose;
mod wgmma;

pub use state::{CLUSTER_BLOCKS, TensorMap};

pub use crate::layout::MmaPath;
use crate::plan::{Context, Plan};
use emit::Lower;

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
    /// A persistent grid (see `lower/specialize.rs`, `lower/persistent.rs`): the
    /// launcher starts only the blocks that fit on the GPU at once and
    /// passes the block count it was asked for as the last parameter.
    pub persistent: bool,
    /// Blocks per cluster along x (1: no clusters): a persistent grid whose
    /// the blocks of a 2-CTA cluster share operand tiles (see `lower/cluster.rs`),
    /// or a kernel that gathers tiles across its clusters
    /// (`lower/cluster_gather.rs`); the launcher starts a multiple of it.
    pub cluster: u32,
    /// The tensors whose tiles `mma` pipelines copy into shared memory
    /// (`cp.async` or TMA), sorted.
    pub pipelined: Vec<usize>,
    /// Ping-pong consumers: two consumer warpgroups take turns on the tiles (see `lower/specialize.rs`).
    pub ping_pong: bool,
    /// The tensors read only by TMA copies, sorted: their arguments need a
    /// 16-byte aligned address and strides, but no particular shape.
    pub tma_only: Vec<usize>,
}

/// Lowers the variant of `cx` as `plan` says, once, into entry `entry_name`.
/// The tensor parameters in `cx.vectorized` are accessed with 16-byte
/// vectors, which assumes what the runtime checks before choosing this
/// variant: each of them is 16-byte aligned, its last dimension is
/// contiguous and a multiple of 16 bytes, and its other strides are
/// multiples of 16 bytes.
pub fn lower(cx: &Context, plan: &Plan, entry_name: &str) -> Lowered {
    let func = cx.func;
    let mut l = Lower {
        cx,
        plan,
        path: cx.path,
        wgmma_in_flight: 0,
        tensor_maps: Vec::new(),
        tma_params: Vec::new(),
        roles: None,
        persistent: None,
        func,
        entry: entry_name.to_string(),
        layouts: cx.layouts,
        vectorized: cx.vectorized,
        regs: Regs::default(),
        prologue: Vec::new(),
        code: Vec::new(),
        vals: HashMap::new(),
        tid: String::new(),
        tensors: HashMap::new(),
        thread_coords: HashMap::new(),
        repl_preds: HashMap::new(),
        specials: HashMap::new(),
        labels: 0,
        fragment_offsets: HashMap::new(),
        skip: HashSet::new(),
        staged_reads: HashMap::new(),
        stored_unconverted: HashMap::new(),
        interleaved: HashSet::new(),
        vector_accessed: BTreeSet::new(),
        split_words: HashMap::new(),
        networks: HashMap::new(),
        gathered: Vec::new(),
    };
    let mut params = l.params(entry_name);
    l.cluster_started();
    if let Some(half_bytes) = plan.persistent {
        l.persistent_prologue(half_bytes);
        l.persistent_body(&func.body);
    }
    let persistent = l.persistent.is_some() || (cx.path == MmaPath::Wgmma && l.specialize(&func.body));
    let mut waits_at = 0;
    if !persistent {
        let (before, after) = func.body.split_at(plan.waits_at);
        l.ops(before);
        waits_at = l.code.len();
        l.ops(after);
    }
    // Programmatic dependent launch (see `plan::dependency`): wait for the
    // previous kernel's memory, then let the next kernel's blocks be scheduled.
    l.code.splice(
        waits_at..waits_at,
        ["griddepcontrol.wait;", "griddepcontrol.launch_dependents;"].map(String::from),
    );
    params.append(&mut l.tma_params);
    params.extend(l.roles.as_ref().map(|r| r.grid_param.clone()));
    params.extend(l.persistent.as_ref().map(|t| t.grid_param.clone()));
    let cluster = match func.cluster_blocks() {
        1 => plan
            .specialization
            .as_ref()
            .and_then(|s| s.clustered.then_some(CLUSTER_BLOCKS)),
        gathered => Some(gathered as u32),
    };
    let launch = ptx::LaunchShape {
        threads: plan.threads,
        max_registers: l.roles.as_ref().and_then(|r| r.entry_registers),
        min_blocks: plan.min_blocks,
        cluster,
    };
    let text = ptx::entry(
        entry_name,
        &params,
        launch,
        &l.regs,
        ptx::SharedMemory {
            static_bytes: plan.static_bytes,
            dynamic: plan.dynamic_bytes > 0,
            cluster_buffers: plan.gathers.buffers.iter().map(|&(_, bytes)| bytes).collect(),
        },
        (&l.prologue, &l.code),
    );
    let tma_only = (l.tensor_maps.iter())
        .map(|(m, _)| m.param)
        .filter(|p| !l.vector_accessed.contains(p))
        .collect::<BTreeSet<usize>>();
    Lowered {
        text,
        shared_bytes: plan.static_bytes + plan.gathers.buffers.iter().map(|&(_, bytes)| bytes).sum::<usize>(),
        dynamic_shared_bytes: plan.dynamic_bytes,
        threads: plan.threads,
        tensor_maps: l.tensor_maps.iter().map(|(m, _)| m.clone()).collect(),
        persistent,
        cluster: cluster.unwrap_or(1),
        pipelined: plan.pipelined.clone(),
        ping_pong: plan.specialization.as_ref().is_some_and(|s| s.consumer_groups > 1),
        tma_only: tma_only.into_iter().collect(),
    }
}
