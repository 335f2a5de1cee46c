//! Shared memory and occupancy: a walk over the kernel in lowering's order
//! that places every region (pipeline stages and their mbarriers, operands
//! stored once, the scratch area) and sizes what each thread holds; then
//! the rules that move regions where the block's shared memory would pass
//! what it may take (the scratch area onto the drained stages or into
//! dynamic memory, fewer stages), and that run two tiles per persistent
//! block where two blocks would share an SM anyway.

use super::pipeline::{LoopPlan, STAGED_TILE_ALIGN, plan_loop, uses};
use super::scratch::{Conversion, TmaStore, invariant_a_operands, reduction_bytes};
use super::specialize::{PRODUCER_THREADS, Specialization};
use super::streaming::{STREAM_MIN_THREADS, STREAM_OVERHEAD_REGISTERS, UNDECLARED_REGISTERS, streamed_registers};
use super::wgmma::{Product, Unsupported};
use super::{Context, Placed, Plan};
use crate::dtype::DType;
use crate::ir::*;
use crate::layout::MmaPath;
use std::collections::{BTreeSet, HashMap};

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

/// Threads and blocks an SM holds on every GPU the PTX runs on (an sm_120
/// SM's; ptxas rejects a declared occupancy above them), and the 32-bit
/// registers it holds.
const SM_THREADS: u32 = 1536;
const SM_BLOCKS: u32 = 24;
pub const SM_REGISTERS: u32 = 65536;

/// Registers a thread holds through a `cp.async` `mma` loop besides its
/// operands, accumulator and copy addresses: the loop counter, stage
/// offsets and bounds.
const LOOP_REGISTERS: usize = 8;

/// Alignment of the scratch area (and of each consumer's part): the 1024-byte
/// period of the 128-byte swizzle, which TMA applies to shared addresses
/// (`lower/tma_store.rs`).
pub const SCRATCH_ALIGN: usize = 1024;

/// The blocks per SM a kernel with a `cp.async` `mma` pipeline declares
/// (`.minnctapersm`): as many as shared memory holds (its stages are sized
/// for that occupancy), but no more than leave each thread the registers
/// it holds live (`live_registers`: through the loop its accumulators, two
/// K-steps' fragments, operands held whole, copy addresses and the
/// epilogue's tensors; after it the accumulators beside the tiles the
/// epilogue loads), and at least one.
/// ptxas then spends registers up to that occupancy and no further. Left
/// to its own heuristics it squeezed some such kernels into 128
/// registers, where they spilled, and gave others a few more than 128,
/// costing them their second block per SM. Every variant goes through
/// ptxas (`tests/ptxas.rs`), which fails on a spill.
fn blocks_per_sm(shared_bytes: usize, threads: u32, live_registers: usize) -> u32 {
    let by_shared = SM_SHARED_BYTES / (shared_bytes + BLOCK_RESERVED_SHARED_BYTES);
    let by_registers = SM_REGISTERS as usize / ((live_registers + LOOP_REGISTERS) * threads as usize);
    let blocks = by_shared.min(by_registers) as u32;
    blocks.clamp(1, (SM_THREADS / threads).min(SM_BLOCKS))
}

/// What the epilogue after the pipelined loop `for_op` costs a thread in
/// 32-bit registers: the addresses and bounds of the tensors `after` loads
/// from (a bias, a residual), which are held through the loop, and the
/// loop's results (the accumulators) beside the tiles loaded, which are
/// held together before the accumulators are free.
fn epilogue_registers(cx: &Context, for_op: &Op, after: &[Op]) -> Epilogue {
    let words = |v: ValueId| (cx.layout(v).num_regs() * cx.dtype(v).bytes()).div_ceil(4);
    let mut epilogue = Epilogue {
        through_loop: 0,
        after_loop: for_op.results.iter().map(|&v| words(v)).sum(),
    };
    for op in after {
        if let OpKind::Load { index, .. } | OpKind::Gather { index, .. } = &op.kind {
            epilogue.through_loop += 2 + index.len();
            epilogue.after_loop += op.results.iter().map(|&v| words(v)).sum::<usize>();
        }
    }
    epilogue
}

/// Registers of an epilogue ([`epilogue_registers`]).
#[derive(Clone, Copy, Default)]
struct Epilogue {
    through_loop: usize,
    after_loop: usize,
}

/// Where the scratch area lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchAt {
    /// Static shared memory (`smem`).
    Static,
    /// Dynamic shared memory at this offset: past the stages, or at 0 on
    /// the stages themselves once every pipeline has drained.
    Dynamic(usize),
}

/// The choices the rules below make, each a fixed point of the walk.
#[derive(Clone, Copy, Default)]
struct Placement {
    scratch_offset: Option<usize>,
    scratch_on_stages: bool,
    stage_budget: Option<usize>,
    consumer_scratch: Option<usize>,
    persistent: Option<usize>,
}

/// What the kernel takes with the pipelines' stages within `stage_budget`.
struct Footprint {
    specialization: Option<Specialization>,
    loops: HashMap<ValueId, Placed>,
    invariant: HashMap<ValueId, Vec<(ValueId, usize)>>,
    conversions: HashMap<ValueId, Conversion>,
    tma_stores: HashMap<(usize, ValueId), TmaStore>,
    in_place: HashMap<ValueId, ValueId>,
    /// Bytes of the scratch area: the largest need.
    scratch: usize,
    /// Bytes of dynamic shared memory placed.
    dynamic: usize,
    /// The first flexible pipeline's stages, all of them and one, in bytes.
    stages: Option<(usize, usize)>,
    /// Pipelines under way and done, as the walk goes.
    pipelines: (usize, usize),
    /// `None` until the scratch area is used; then the fewest pipelines
    /// done at any of its uses, or `None` once one came while a pipeline
    /// was under way.
    scratch_after: Option<Option<usize>>,
    /// The tensors the pipelines copy.
    pipelined: BTreeSet<usize>,
    /// Values read from shared memory (staged conversions, operands stored
    /// once), with the operand dimension their stored rows run along.
    staged: HashMap<ValueId, usize>,
    /// How each `mma` runs on `wgmma`, by result, and why one cannot.
    products: HashMap<ValueId, Product>,
    unsupported: Option<Unsupported>,
    /// Registers a thread's products hold live, and its copies' addresses.
    mma_live_registers: usize,
    copy_registers: usize,
    /// Registers the epilogues after `mma` loops take, the most of each.
    epilogue: Epilogue,
}

/// Places the resources of the kernel of `cx`, warp-specialized where
/// `specialize` allows it ((ping-pong, clusters) on the `wgmma` path),
/// as two tiles per persistent block where `persistent` allows it
/// and two blocks would share an SM (the portable path). An error when
/// the block needs more shared memory than it can have.
pub fn place(cx: &Context, specialize: Option<(bool, bool)>, persistent: bool) -> crate::error::Result<Plan> {
    let mut how = Placement::default();
    loop {
        let fp = walk(cx, specialize, how.stage_budget);
        let mut threads = cx.func.num_warps * 32;
        let mut shared = fp.scratch;
        if let Some(spec) = &fp.specialization {
            if spec.consumer_groups > 1 && shared > 0 {
                // Ping-pong consumers take a scratch area each, one after the other.
                let per_consumer = how.consumer_scratch.unwrap_or(shared.next_multiple_of(SCRATCH_ALIGN));
                how.consumer_scratch = Some(per_consumer);
                shared = per_consumer * spec.consumer_groups as usize;
            }
            threads = spec.consumers(cx.func.num_warps) + PRODUCER_THREADS;
        }
        let (under_way, done) = fp.pipelines;
        let after_pipelines = done > 0 && under_way == 0 && fp.scratch_after == Some(Some(done));
        if cx.path == MmaPath::Portable && after_pipelines && !how.scratch_on_stages {
            // Every use of the scratch area comes after the last `cp.async`
            // pipeline has drained (an `mma` loop's epilogue): it takes the
            // stages' place. (TMA pipelines keep theirs: their mbarriers lie
            // past the stages, and persistent kernels refill the stages while
            // the epilogue runs.)
            how.scratch_offset = Some(0);
            how.scratch_on_stages = true;
            continue;
        }
        if shared > MAX_SHARED_BYTES && how.scratch_offset.is_none() {
            // Past the static limit, the scratch area moves to dynamic
            // shared memory after the pipeline stages.
            how.scratch_offset = Some(fp.dynamic.next_multiple_of(SCRATCH_ALIGN));
            continue;
        }
        let (static_bytes, dynamic_bytes) = match how.scratch_offset {
            None => (shared, fp.dynamic),
            Some(_) if how.scratch_on_stages => (0, fp.dynamic.max(shared)),
            Some(offset) => (0, offset + shared),
        };
        let budgeted = how.stage_budget.is_some() || cx.num_stages.is_some();
        if let Some((stages, one)) = fp.stages.filter(|_| !budgeted) {
            // Fewer stages, when two still fit, where the block's shared
            // memory would pass what it should take: the stages get what the
            // rest of the block (its scratch area, operands stored once)
            // leaves. Portable PTX runs on sm_120 too, whose blocks get 99
            // KiB. Two `wgmma` blocks that are not warp-specialized (or of
            // one warpgroup) share an SM, each one's products overlapping
            // the other's other work, in half an SM each.
            let limit = match cx.path {
                MmaPath::Portable => PORTABLE_BLOCK_SHARED_BYTES,
                MmaPath::Wgmma => SM_SHARED_BYTES / 2 - BLOCK_RESERVED_SHARED_BYTES,
            };
            let rest = static_bytes + dynamic_bytes - stages;
            if rest + stages > limit && rest + 2 * one <= limit {
                how.stage_budget = Some(limit - rest);
                continue;
            }
        }
        if static_bytes + dynamic_bytes > MAX_BLOCK_SHARED_BYTES && !budgeted {
            // Fewer pipeline stages, leaving room for the scratch area (and
            // the stages' mbarriers), and for operands stored once where
            // the stages are known.
            let rest = fp
                .stages
                .map_or(shared, |(stages, _)| static_bytes + dynamic_bytes - stages);
            how = Placement {
                scratch_offset: None,
                stage_budget: Some(MAX_BLOCK_SHARED_BYTES.saturating_sub(rest + 1024)),
                ..how
            };
            continue;
        }
        if static_bytes + dynamic_bytes > MAX_BLOCK_SHARED_BYTES {
            crate::error::bail!(
                cx.func
                    .body
                    .first()
                    .map(|o| o.span)
                    .unwrap_or_else(proc_macro2::Span::call_site),
                "kernel `{}` needs {} bytes of shared memory (pipeline stages, reductions, layout conversions), over the {} KiB a block can have: use smaller tiles",
                cx.func.name,
                static_bytes + dynamic_bytes,
                MAX_BLOCK_SHARED_BYTES / 1024
            );
        }
        let (dynamic_bytes, threads) = match how.persistent {
            Some(half_bytes) => (2 * half_bytes, 2 * threads),
            None => (dynamic_bytes, threads),
        };
        let min_blocks = (fp.specialization.is_none() && !fp.pipelined.is_empty()).then(|| {
            blocks_per_sm(
                static_bytes + dynamic_bytes,
                threads,
                (fp.mma_live_registers + fp.copy_registers + fp.epilogue.through_loop).max(fp.epilogue.after_loop),
            )
        });
        let half_bytes = dynamic_bytes.next_multiple_of(SCRATCH_ALIGN);
        if persistent
            && how.persistent.is_none()
            && min_blocks.is_some_and(|b| b >= 2)
            && 2 * threads * 255 <= SM_REGISTERS
            && static_bytes == 0
            && 2 * half_bytes <= MAX_BLOCK_SHARED_BYTES
        {
            // Two blocks fit on an SM: run them as the two halves of one
            // block on a persistent grid instead, each with its half. Not
            // when a thread of the doubled block would have fewer than 255
            // registers: at 128 (256-thread halves) the loop's own registers
            // spilled the f32 128x128 tiles.
            how.persistent = Some(half_bytes);
            continue;
        }
        // A loop streaming from global memory declares the occupancy that
        // leaves a thread room for all of an iteration's loads at once,
        // where that is more than ptxas gives it undeclared and leaves the
        // SM enough threads.
        let min_blocks = min_blocks.or_else(|| {
            let live = streamed_registers(cx)? + STREAM_OVERHEAD_REGISTERS;
            let blocks = blocks_per_sm(static_bytes + dynamic_bytes, threads, live);
            let fewer = blocks < SM_REGISTERS / (UNDECLARED_REGISTERS * threads);
            (fewer && blocks * threads >= STREAM_MIN_THREADS).then_some(blocks)
        });
        let scratch_at = match how.scratch_offset {
            None => ScratchAt::Static,
            Some(offset) => ScratchAt::Dynamic(offset),
        };
        let hint_reads = super::dependency::hint_reads(&cx.func.body);
        return Ok(Plan {
            specialization: fp.specialization,
            loops: fp.loops,
            invariant: fp.invariant,
            conversions: fp.conversions,
            tma_stores: fp.tma_stores,
            in_place: fp.in_place,
            products: fp.products,
            unsupported: fp.unsupported,
            pipelined: fp.pipelined.into_iter().collect(),
            scratch_at,
            consumer_scratch: how.consumer_scratch,
            static_bytes,
            dynamic_bytes,
            threads,
            min_blocks,
            persistent: how.persistent,
            waits_at: super::dependency::waits_at(&cx.func.body, &hint_reads),
            hint_reads,
            coherent_reads: super::dependency::waits_for_stores(&cx.func.body),
            gathers: super::gather::plan(cx.func),
        });
    }
}

/// Walks the kernel in lowering's order with the stages within `stage_budget`.
fn walk(cx: &Context, specialize: Option<(bool, bool)>, stage_budget: Option<usize>) -> Footprint {
    let mut fp = Footprint {
        specialization: None,
        loops: HashMap::new(),
        invariant: HashMap::new(),
        conversions: HashMap::new(),
        tma_stores: HashMap::new(),
        in_place: HashMap::new(),
        scratch: 0,
        dynamic: 0,
        stages: None,
        pipelines: (0, 0),
        scratch_after: None,
        pipelined: BTreeSet::new(),
        staged: HashMap::new(),
        products: HashMap::new(),
        unsupported: None,
        mma_live_registers: 0,
        copy_registers: 0,
        epilogue: Epilogue::default(),
    };
    if let Some(options) = specialize.filter(|_| cx.path == MmaPath::Wgmma)
        && let Some(spec) = Specialization::of(cx, options, stage_budget)
    {
        let var = spec.plan.var;
        let placed = fp.place_stages(spec.plan.clone());
        // The empty mbarriers follow the full ones, and the ready ones those.
        let kinds = if spec.plan.transposes() { 2 } else { 1 };
        fp.dynamic += 8 * spec.plan.stages * kinds;
        fp.loops.insert(var, placed);
        fp.specialization = Some(spec);
    }
    fp.ops(cx, &cx.func.body, stage_budget);
    fp
}

impl Footprint {
    /// Places a loop's stages (and full mbarriers, for TMA) after the
    /// dynamic shared memory placed so far.
    fn place_stages(&mut self, plan: LoopPlan) -> Placed {
        if plan.flexible && self.stages.is_none() {
            self.stages = Some((plan.stages * plan.stage_bytes, plan.stage_bytes));
        }
        let buffer = self.dynamic.next_multiple_of(STAGED_TILE_ALIGN);
        let barriers = buffer + plan.stages * plan.stage_bytes;
        self.dynamic = barriers + if plan.tma { 8 * plan.stages } else { 0 };
        Placed { plan, buffer, barriers }
    }

    /// A use of the scratch area taking `bytes`.
    fn scratch_use(&mut self, bytes: usize) {
        self.scratch = self.scratch.max(bytes);
        let (under_way, done) = self.pipelines;
        let after = (under_way == 0).then_some(done);
        self.scratch_after = Some(match self.scratch_after {
            None => after,
            Some(before) => before.zip(after).map(|(b, a)| b.min(a)),
        });
    }

    fn ops(&mut self, cx: &Context, ops: &[Op], stage_budget: Option<usize>) {
        for (i, op) in ops.iter().enumerate() {
            self.op(cx, op, stage_budget);
            if let OpKind::For { var, .. } = &op.kind
                && self.loops.contains_key(var)
            {
                let e = epilogue_registers(cx, op, &ops[i + 1..]);
                self.epilogue.through_loop = self.epilogue.through_loop.max(e.through_loop);
                self.epilogue.after_loop = self.epilogue.after_loop.max(e.after_loop);
            }
        }
    }

    fn op(&mut self, cx: &Context, op: &Op, stage_budget: Option<usize>) {
        match &op.kind {
            OpKind::Convert(arg) => {
                let result = op.results[0];
                let (kind, bytes) = Conversion::of(cx, *arg, result, self.staged.contains_key(&result));
                if bytes > 0 {
                    self.scratch_use(bytes);
                }
                self.conversions.insert(result, kind);
            }
            OpKind::Reduce { op: rop, arg, axis } => {
                let bytes = reduction_bytes(cx, *rop, *arg, *axis, op.results[0]);
                if bytes > 0 {
                    self.scratch_use(bytes);
                }
            }
            // The old value, handed from the first thread to the block.
            OpKind::FetchAdd { .. } => self.scratch_use(4),
            // Partners across warps: a slot of each thread's registers
            // (32-bit sums, 64-bit sort keys).
            OpKind::Scan { arg, axis, .. } | OpKind::Sort { arg, axis, .. }
                if cx.layout(*arg).warp.iter().any(|b| b.is_some_and(|b| b.0 == *axis)) =>
            {
                let bytes = if matches!(op.kind, OpKind::Sort { .. }) { 8 } else { 4 };
                let threads = cx.func.num_warps as usize * 32;
                self.scratch_use(threads * cx.layout(*arg).num_regs() * bytes);
            }
            // Old values handed from each element's owner to its copies.
            OpKind::Atomic { value, .. } if !op.results.is_empty() && cx.layout(*value).replicated_mask() != 0 => {
                let l = cx.layout(*value);
                self.scratch_use(l.shape.iter().product::<usize>() * cx.func.values[*value].dtype.bytes());
            }
            OpKind::Store { tensor, value, .. } => {
                if let Some(store) = TmaStore::of(cx, *tensor, *value, self.specialization.is_some()) {
                    self.scratch_use(store.rows * store.line);
                    self.tma_stores.insert((*tensor, *value), store);
                }
            }
            OpKind::Mma { a, b, acc } => self.mma_registers(cx, (*a, *b, *acc), op.results[0]),
            OpKind::For {
                var,
                args,
                body,
                yields,
                ..
            } => {
                // Accumulators an `mma` may update in place: a carried tile
                // used only by the `mma` whose result is used only as the
                // next iteration's value.
                for (&y, &arg) in yields.iter().zip(args) {
                    let by_mma = body.iter().any(|op| {
                        op.results.first() == Some(&y) && matches!(op.kind, OpKind::Mma { acc, .. } if acc == arg)
                    });
                    if by_mma && uses(body, arg) == 1 && uses(body, y) == 0 {
                        self.in_place.insert(y, arg);
                    }
                }
                let specialized = self.specialization.as_ref().is_some_and(|s| s.plan.var == *var);
                let plan = if specialized {
                    Some(self.loops[var].plan.clone())
                } else {
                    let plan = plan_loop(cx, (*var, body), (false, 1), stage_budget);
                    if let Some(plan) = &plan {
                        let placed = self.place_stages(plan.clone());
                        self.loops.insert(*var, placed);
                    }
                    plan
                };
                if let Some(plan) = &plan {
                    self.pipelines.0 += 1;
                    if self.specialization.is_none() && !plan.tma {
                        let copies = plan
                            .staged
                            .iter()
                            .map(|s| cx.layout(s.load).num_regs().div_ceil(16 / s.eb))
                            .sum();
                        self.copy_registers = self.copy_registers.max(copies);
                    }
                }
                let stored = self.staged.clone();
                let invariant = invariant_a_operands(cx, body, &|a| stored.contains_key(&a));
                if !invariant.is_empty() {
                    let mut placed = Vec::new();
                    for a in invariant {
                        let l = cx.layout(a);
                        let offset = self.dynamic.next_multiple_of(STAGED_TILE_ALIGN);
                        self.dynamic = offset + l.shape[0] * l.shape[1] * cx.dtype(a).bytes();
                        self.staged.insert(a, 1);
                        placed.push((a, offset));
                    }
                    self.invariant.insert(*var, placed);
                }
                if let Some(plan) = &plan {
                    for s in &plan.staged {
                        let contiguous = if s.transposed { s.role.k_dim() } else { s.contiguous };
                        self.staged.insert(s.convert, contiguous);
                        self.pipelined.insert(s.tensor);
                    }
                }
                self.ops(cx, body, stage_budget);
                if plan.is_some() {
                    self.pipelines = (self.pipelines.0 - 1, self.pipelines.1 + 1);
                }
            }
            OpKind::If {
                then_body, else_body, ..
            } => {
                self.ops(cx, then_body, stage_budget);
                self.ops(cx, else_body, stage_budget);
            }
            _ => {}
        }
    }

    /// The registers an `mma` holds live through its loop: on the portable
    /// path its accumulator, two K-steps' operand fragments (one in use,
    /// the next being read) and operands not read from a stage a K-step at
    /// a time; with `wgmma` its accumulator (twice when fresh: the tile
    /// computed from the result is live beside it) and an `a` from registers.
    fn mma_registers(&mut self, cx: &Context, (a, b, acc): (ValueId, ValueId, ValueId), result: ValueId) {
        let regs = |v: ValueId| cx.layout(v).num_regs();
        match cx.path {
            MmaPath::Portable => {
                let (la, lb, lc) = (cx.layout(a), cx.layout(b), cx.layout(acc));
                let tf32 = cx.dtype(a) == DType::F32;
                let (m, n) = (la.shape[0], lb.shape[1]);
                let split = |dim| lc.warp.iter().flatten().filter(|b| b.0 == dim).count();
                let (tm, tn) = (m >> split(0), n >> split(1));
                // An A fragment of one step is four 32-bit words, a B
                // fragment two (m16n8k16 for 16-bit operands, m16n8k8 for tf32).
                let step_registers = tm / 16 * 4 + tn / 8 * 2;
                let held: usize = [a, b]
                    .iter()
                    .filter(|v| !self.staged.contains_key(v))
                    .map(|&v| if tf32 { regs(v) } else { regs(v) / 2 })
                    .sum();
                self.mma_live_registers += regs(acc) + 2 * step_registers + held;
            }
            MmaPath::Wgmma => {
                let in_place = self.in_place.get(&result) == Some(&acc);
                let staged = &self.staged;
                match Product::of(cx, (a, b), &|v| staged.get(&v).copied(), in_place) {
                    Ok(product) => {
                        let direct = matches!(product, Product::Direct { .. });
                        if direct {
                            let results = if in_place { 1 } else { 2 };
                            let a_registers = if product.register_a() { regs(a) / 2 } else { 0 };
                            self.mma_live_registers += results * regs(acc) + a_registers;
                        }
                        self.products.insert(result, product);
                    }
                    Err(reason) => {
                        self.unsupported.get_or_insert(reason);
                    }
                }
            }
        }
    }
}
