//! Software pipelining of loops that feed the tensor cores.
//!
//! In a `for` loop whose body loads tiles only to hand them to `mma`, the
//! loads become `cp.async` copies straight from global into a ring of
//! shared-memory stages, issued `STAGES - 1` iterations ahead: iteration `k`
//! waits for its own tiles, starts the copies for `k + STAGES - 1`, and reads
//! fragments with `ldmatrix` while those copies are in flight.

use super::tensor_core::Swizzle;
use super::tma::StageBarrier;
use super::transpose;
use super::{Lower, MmaPath, Operand, TensorRegs, addr};
use crate::ir::*;
use crate::layout::{Bit, Layout};
use crate::ptx::RegClass;
use std::collections::HashMap;

/// Shared memory a pipeline's stages may take (dynamic shared memory: the
/// launcher raises the kernel's limit past the 48 KiB default). `wgmma`
/// keeps no operand fragments in registers, so its blocks are fewer per SM
/// and take deeper pipelines.
const PIPELINE_BYTES: usize = 96 * 1024;
const WGMMA_PIPELINE_BYTES: usize = 192 * 1024;
/// Half of an SM's 227 KiB of shared memory, less room for a block's scratch.
const HALF_SM_BYTES: usize = 110 * 1024;

/// Alignment of every staged tile: the 1024-byte period of the 128-byte
/// swizzle, so that the stored pattern is the hardware's (`wgmma`, TMA).
pub(super) const STAGED_TILE_ALIGN: usize = 1024;

/// One tile the pipeline copies each iteration.
#[derive(Clone)]
pub(super) struct Staged {
    /// The `Load` it replaces and the conversion into a fragment layout it feeds.
    pub(super) load: ValueId,
    /// The transposes and reshapes between the load and the conversion.
    chain: Vec<ValueId>,
    convert: ValueId,
    pub(super) tensor: usize,
    pub(super) index: Vec<ValueId>,
    /// Operand dimension the stored rows run along, and the operand role.
    contiguous: usize,
    role: Operand,
    /// Offset of this tile within a stage.
    pub(super) offset: usize,
    /// Whether the producer transposes the tile in place into K-major
    /// rows before `wgmma` reads it: a tf32 operand loaded M- or N-major,
    /// which tf32 `wgmma` cannot read (warp specialization, [`super::transpose`]).
    pub(super) transposed: bool,
    /// Whether its rows (K) are stored interleaved ([`interleaved_row`]): a
    /// tf32 tile the consumers read into registers (`b` of a product
    /// `wgmma` computes transposed), whose rows a multiple of 8.
    pub(super) interleaved: bool,
    /// Bytes per element, and of the whole tile.
    pub(super) eb: usize,
    bytes: usize,
}

impl Staged {
    /// How the tile (of load shape `shape`) lies in its stage: rows along
    /// the last dimension, the others (at most one longer than 1) stacked.
    pub(super) fn swizzle(&self, shape: &[usize]) -> Swizzle {
        let rank = shape.len();
        Swizzle {
            rows: shape[..rank - 1].iter().product(),
            row_bytes: shape[rank - 1] * self.eb,
        }
    }
}

#[derive(Clone)]
pub(super) struct Plan {
    /// The loop variable, which the copies' tile indices replace.
    pub(super) var: ValueId,
    staged: Vec<Staged>,
    pub(super) stages: usize,
    /// Copies by TMA (one thread, counted on per-stage mbarriers) instead
    /// of `cp.async` by every thread.
    pub(super) tma: bool,
    /// The mbarriers' offset in dynamic shared memory (TMA).
    pub(super) barriers: usize,
    /// The parity of the read stage's current mbarrier phase (TMA).
    pub(super) phase: String,
    /// How many iterations ahead the copies run: `stages - 1`, or with
    /// `wgmma` `stages - 2`, so that the stage the previous iteration's
    /// still-running `wgmma` reads is not overwritten.
    ahead: usize,
    /// `wgmma` groups left running at the end of an iteration (0 or 1).
    pub(super) wgmma_in_flight: usize,
    stage_bytes: usize,
    /// Offset of the stages in dynamic shared memory.
    buffer: usize,
    pub(super) read_stage: String,
    pub(super) write_stage: String,
    /// Each staged tile's `cp.async` copies (set before the loop).
    streams: Vec<CopyStream>,
}

impl Plan {
    pub(super) fn staged(&self) -> &[Staged] {
        &self.staged
    }

    /// Whether the producer transposes a staged tile before `wgmma` reads it.
    pub(super) fn transposes(&self) -> bool {
        self.staged.iter().any(|s| s.transposed)
    }

    /// Bytes the staged tiles of one iteration hold.
    pub(super) fn staged_bytes(&self) -> usize {
        self.staged.iter().map(|s| s.bytes).sum()
    }
}

/// One thread's `cp.async` copies of a staged tile, carried from one
/// iteration to the next: the first copy's global address and its
/// position along the looped dimension move by a tile per iteration, every
/// other copy is a loop-invariant step from the one before it, and the
/// bounds along the dimensions the loop does not move are checked once,
/// before the loop. (Recomputing each address from the tile index took
/// twelve instructions a copy.)
#[derive(Clone)]
pub(super) struct CopyStream {
    /// Global address of the first copy of the next tile to issue (b64).
    next: String,
    /// Bytes from one tile to the next (b64).
    step: String,
    /// The first copy's position along the looped dimension less that
    /// dimension's size (b32): a copy `along` further is inside while
    /// `below + along < 0`.
    below: String,
    /// The tile's size along the looped dimension: what `below` moves by.
    extent: usize,
    copies: Vec<StreamCopy>,
}

#[derive(Clone)]
struct StreamCopy {
    /// What takes the previous copy's row address to this one's (b64), if
    /// the row differs.
    advance: Option<String>,
    /// Bytes past the row address (the contiguous last dimension).
    imm: usize,
    /// Position along the looped dimension past the first copy's.
    along: usize,
    /// Inside every dimension but the looped one (a predicate), where any.
    inside: Option<String>,
    /// Where it lands within the tile: a register and an immediate.
    dst: (String, usize),
}

/// Where row (K index) bit `b` of an interleaved tile is stored: rows are
/// stored in the order (k / 8, k % 4, k / 4 % 2), row k at
/// 8 (k / 8) + 2 (k % 4) + k / 4 % 2. A warp reading `wgmma`'s A fragment
/// (four consecutive rows, eight consecutive columns) then finds its rows
/// 2 apart, which the 128-byte swizzle puts on distinct banks; stored in
/// order, rows 2j and 2j + 1 share them (2-way conflicts).
pub(super) fn interleaved_row(b: u32) -> u32 {
    match b {
        0 => 1,
        1 => 2,
        2 => 0,
        b => b,
    }
}

pub(super) fn uses(ops: &[Op], v: ValueId) -> usize {
    ops.iter()
        .map(|op| {
            op.kind.operands().iter().filter(|&&x| x == v).count()
                + op.kind.bodies().iter().map(|b| uses(b, v)).sum::<usize>()
        })
        .sum()
}

impl Lower<'_> {
    /// The tiles of loop `body` (loop variable `var`) that can be pipelined:
    /// loads of vector-accessed tensors padded with zero, indexed by the
    /// loop variable and values from outside the loop, used only (through a
    /// transpose) by a conversion into an `mma` fragment layout. With
    /// `transposing` (a warp-specialized producer), tf32 tiles that `wgmma`
    /// cannot read as loaded are transposed in their stage. `teams`: the
    /// consumer warpgroups taking turns on the stages (see [`super::specialize`]).
    pub(super) fn pipeline_plan(&mut self, var: ValueId, body: &[Op], transposing: bool, teams: u32) -> Option<Plan> {
        let inside = defined_in(body);
        let def = |v: ValueId| body.iter().find(|op| op.results.first() == Some(&v));
        let mut staged = Vec::new();
        let mut offset = 0;
        for op in body {
            let OpKind::Convert(src) = op.kind else { continue };
            let convert = op.results[0];
            let Some(&role) = self.operands.get(&convert) else {
                continue;
            };
            // Through transposes and reshapes (layout relabelings) to the load.
            let mut chain = vec![src];
            while let Some(OpKind::Permute { arg, .. } | OpKind::Reshape(arg)) =
                def(chain[chain.len() - 1]).map(|o| &o.kind)
            {
                chain.push(*arg);
            }
            let load = chain[chain.len() - 1];
            let Some(Op {
                kind: OpKind::Load { tensor, index, pad },
                ..
            }) = def(load)
            else {
                continue;
            };
            let eb = self.func.tensor(*tensor).dtype.bytes();
            let zero_pad = self
                .consts
                .get(pad)
                .is_some_and(|c| matches!(c, ConstVal::Float(x) if *x == 0.0) || matches!(c, ConstVal::Int(0)));
            // Indexed by the loop along exactly one dimension, the others fixed.
            let indexable = index.iter().filter(|&&i| i == var).count() == 1
                && index.iter().all(|&i| i == var || !inside.contains(&i));
            let la: &Layout = self.layout(src);
            let contiguous = (0..2).find(|&d| la.contiguous_run(d) >= 16 / eb);
            // `wgmma` reads the stage itself: the conversion must feed one `mma` alone.
            let single_use = chain.iter().all(|&v| uses(body, v) == 1)
                && (self.path == MmaPath::Portable || uses(body, convert) == 1);
            let load_shape = &self.layout(load).shape;
            let two_d = load_shape[..load_shape.len() - 1].iter().filter(|&&n| n > 1).count() <= 1;
            let vectors = self.vectorized.contains(tensor);
            let (Some(contiguous), true, true, true, true, true, true) =
                (contiguous, eb != 1, vectors, zero_pad, indexable, single_use, two_d)
            else {
                continue;
            };
            let bytes = self.layout(load).shape.iter().product::<usize>() * eb;
            let transposed = transposing
                && contiguous != role.k_dim()
                && !self.register_b.contains(&convert)
                && transpose::transposable(&self.layout(load).shape, eb);
            let rank = load_shape.len();
            let interleaved = self.path == MmaPath::Wgmma
                && self.register_b.contains(&convert)
                && eb == 4
                && rank >= 2
                && load_shape[..rank - 2].iter().all(|&n| n == 1)
                && load_shape[rank - 2] % 8 == 0;
            staged.push(Staged {
                load,
                chain,
                convert,
                tensor: *tensor,
                index: index.clone(),
                contiguous,
                role,
                offset,
                transposed,
                interleaved,
                eb,
                bytes,
            });
            offset += bytes.next_multiple_of(STAGED_TILE_ALIGN);
        }
        let budget = match self.path {
            MmaPath::Portable => PIPELINE_BYTES,
            MmaPath::Wgmma => WGMMA_PIPELINE_BYTES,
        }
        .min(self.stage_budget.unwrap_or(usize::MAX));
        if staged.is_empty() || (offset * 2 > budget && self.num_stages.is_none()) {
            return None;
        }
        // `mma.sync` keeps four stages. `wgmma` up to six (two of them being
        // read: the running K-step's and the previous one's, still in
        // flight). One consumer warpgroup takes no more than lets two blocks
        // share an SM while three stages fit in half of it, so that one
        // block's epilogue overlaps the other's K-loop (ncu, before warp
        // specialization: 128x128 tiles with six 32 KiB stages at one block
        // per SM, tensor pipe 37% busy). So does a kernel that is not
        // warp-specialized (`!transposing`), whatever its warps: every warp
        // computes, and two blocks overlap each other's products with
        // their other work (attention). Two consumer warpgroups of a
        // specialized kernel (splitting a tile, or taking turns) and the
        // producer's hold a whole SM's registers: they take the stages.
        let shares_sm = teams == 1 && (self.func.num_warps == 4 || !transposing);
        let stages = match (self.num_stages, self.path) {
            (Some(n), _) => n as usize,
            (None, MmaPath::Portable) => (budget / offset).clamp(2, 4),
            (None, MmaPath::Wgmma) if shares_sm && 3 * offset <= HALF_SM_BYTES => {
                (HALF_SM_BYTES.min(budget) / offset).clamp(2, 6)
            }
            (None, MmaPath::Wgmma) => (budget / offset).clamp(2, 6),
        };
        let overlap_wgmma = self.path == MmaPath::Wgmma && stages >= 3;
        let ahead = if overlap_wgmma { stages - 2 } else { stages - 1 };
        let flexible = self.path == MmaPath::Portable || (shares_sm && !transposing);
        if flexible && self.stages.is_none() {
            self.stages = Some((stages * offset, offset));
        }
        let buffer = self.dynamic_shared.next_multiple_of(STAGED_TILE_ALIGN);
        let barriers = buffer + stages * offset;
        let tma = self.path == MmaPath::Wgmma;
        self.dynamic_shared = barriers + if tma { 8 * stages } else { 0 };
        Some(Plan {
            var,
            staged,
            stages,
            tma,
            barriers,
            phase: self.reg(RegClass::B32),
            ahead,
            wgmma_in_flight: usize::from(overlap_wgmma),
            stage_bytes: offset,
            buffer,
            read_stage: self.reg(RegClass::B32),
            write_stage: self.reg(RegClass::B32),
            streams: Vec::new(),
        })
    }

    /// The shared address of stage `stage` (a register).
    pub(super) fn stage_base(&mut self, plan: &Plan, stage: &str) -> String {
        self.dynamic_address(plan.buffer, Some((stage, plan.stage_bytes)))
    }

    /// Before the first copy of a staged tile (iteration `lo`): where this
    /// thread's copies start, what moves them from one iteration to the
    /// next, and their bounds checks along the dimensions the loop does
    /// not move.
    fn copy_stream(&mut self, var: ValueId, s: &Staged, lo: &str) -> CopyStream {
        let l = self.layout(s.load).clone();
        let (rank, eb) = (l.shape.len(), s.eb);
        let TensorRegs { ptr, dims, strides } = self.tensors[&s.tensor].clone();
        let looped = s
            .index
            .iter()
            .position(|&i| i == var)
            .expect("a staged tile is indexed by its loop");
        let coords = self.coords(&l);
        // The thread's first element along each dimension.
        let base: Vec<String> = (0..rank)
            .map(|d| {
                let ix = if d == looped {
                    lo.to_string()
                } else {
                    self.scalar(s.index[d])
                };
                let origin = self.reg(RegClass::B32);
                self.emit(format!("shl.b32 {origin}, {ix}, {};", l.shape[d].trailing_zeros()));
                match &coords[d] {
                    Some(c) => {
                        self.emit(format!("add.s32 {origin}, {origin}, {c};"));
                        origin
                    }
                    None => origin,
                }
            })
            .collect();
        // The last dimension is contiguous (a vector-accessed tensor).
        let last = rank - 1;
        let offset = self.reg(RegClass::B32);
        self.emit(format!("mov.b32 {offset}, {};", base[last]));
        for d in 0..last {
            self.emit(format!("mad.lo.s32 {offset}, {}, {}, {offset};", base[d], strides[d]));
        }
        let next = self.reg(RegClass::B64);
        self.emit(format!("mad.wide.s32 {next}, {offset}, {eb}, {ptr};"));
        let step = self.reg(RegClass::B64);
        let extent = l.shape[looped];
        if looped == last {
            self.emit(format!("mov.b64 {step}, {};", extent * eb));
        } else {
            self.emit(format!("mul.wide.s32 {step}, {}, {};", strides[looped], extent * eb));
        }
        let below = self.reg(RegClass::B32);
        self.emit(format!("sub.s32 {below}, {}, {};", base[looped], dims[looped]));

        let dst = self.copy_destinations(s, &l);
        let mut advances: HashMap<Vec<isize>, String> = HashMap::new();
        let mut checks: HashMap<(usize, usize), String> = HashMap::new();
        let mut previous: Option<Vec<usize>> = None;
        let mut copies = Vec::new();
        for (first, dst) in (0..l.num_regs()).step_by(16 / eb).zip(dst) {
            let c = l.reg_coord(first);
            // From the previous copy's row to this one's: loop-invariant bytes.
            let advance = match &previous {
                Some(p) if *p == c[..last] => None,
                _ => {
                    let from = previous.clone().unwrap_or_else(|| vec![0; last]);
                    let diff: Vec<isize> = (0..last).map(|d| c[d] as isize - from[d] as isize).collect();
                    previous = Some(c[..last].to_vec());
                    if diff.iter().all(|&x| x == 0) {
                        None
                    } else if let Some(r) = advances.get(&diff) {
                        Some(r.clone())
                    } else {
                        let r = self.reg(RegClass::B64);
                        self.emit(format!("mov.b64 {r}, 0;"));
                        for (d, &x) in diff.iter().enumerate().filter(|(_, x)| **x != 0) {
                            let t = self.reg(RegClass::B64);
                            self.emit(format!("mul.wide.s32 {t}, {}, {};", strides[d], x * eb as isize));
                            self.emit(format!("add.s64 {r}, {r}, {t};"));
                        }
                        advances.insert(diff, r.clone());
                        Some(r)
                    }
                }
            };
            // Inside every dimension but the looped one: checked once.
            let mut inside: Option<String> = None;
            for d in (0..rank).filter(|&d| d != looped) {
                let check = match checks.get(&(d, c[d])) {
                    Some(p) => p.clone(),
                    None => {
                        let (_, p) = self.position(&base[d], c[d], &dims[d]);
                        checks.insert((d, c[d]), p.clone());
                        p
                    }
                };
                inside = Some(self.fold(inside, check, "and.pred", RegClass::Pred));
            }
            copies.push(StreamCopy {
                advance,
                imm: c[last] * eb,
                along: c[looped],
                inside,
                dst,
            });
        }
        CopyStream {
            next,
            step,
            below,
            extent,
            copies,
        }
    }

    /// Where each of a thread's copies of a staged tile (load layout `l`)
    /// lands within the swizzled tile: a thread-dependent register and an
    /// immediate. Register bits the swizzle leaves alone add constant
    /// offsets; each combination of the others (the rows' phase, the
    /// chunk within a line) gets its own register, computed once.
    fn copy_destinations(&mut self, s: &Staged, l: &Layout) -> Vec<(String, usize)> {
        let eb = s.eb;
        // Stored rows run along the last dimension; the row is the one other
        // dimension longer than 1 (pipelined tiles are 2-D up to size-1 dimensions).
        let cols_dim = l.shape.len() - 1;
        let rows_dim = (0..cols_dim).find(|&d| l.shape[d] > 1).unwrap_or(0);
        let sw = s.swizzle(&l.shape);
        let offset_of = |(d, b): Bit| sw.bit_offset(d != cols_dim, b, eb);
        let mixed: usize = (0..l.reg.len())
            .filter(|&i| offset_of(l.reg[i]).is_none())
            .map(|i| 1 << i)
            .sum();
        let firsts: Vec<usize> = (0..l.num_regs()).step_by(16 / eb).collect();
        let mut classes: Vec<usize> = firsts.iter().map(|f| f & mixed).collect();
        classes.sort_unstable();
        classes.dedup();
        let key = (l.clone(), eb, "cp.async");
        let registers = match self.fragment_offsets.get(&key) {
            Some(o) => o.clone(),
            None => {
                let o = self.in_prologue(|lower| {
                    let tc = lower.coords(l);
                    let zero = lower.reg(RegClass::B32);
                    lower.emit(format!("mov.b32 {zero}, 0;"));
                    classes
                        .iter()
                        .map(|&class| {
                            let c = l.reg_coord(class);
                            let row = lower.plus(&tc[rows_dim], c[rows_dim]);
                            let col = lower.plus(&tc[cols_dim], c[cols_dim]);
                            let chunk = lower.reg(RegClass::B32);
                            lower.emit(format!("shr.u32 {chunk}, {col}, {};", (16 / eb).trailing_zeros()));
                            lower.swizzled(&zero, &row, &chunk, &sw)
                        })
                        .collect::<Vec<String>>()
                });
                self.fragment_offsets.insert(key, o.clone());
                o
            }
        };
        firsts
            .iter()
            .map(|&first| {
                let class = classes
                    .binary_search(&(first & mixed))
                    .expect("every class has a register");
                let imm = (0..l.reg.len())
                    .filter(|&i| first >> i & 1 == 1 && mixed >> i & 1 == 0)
                    .map(|i| offset_of(l.reg[i]).expect("not a mixed bit"))
                    .sum();
                (registers[class].clone(), imm)
            })
            .collect()
    }

    /// Copies the next tile of every stream into stage `stage` (a
    /// register), commits them, and moves the streams on by one tile.
    /// Copies outside the tensor are zero-filled.
    fn issue_copies(&mut self, plan: &Plan, stage: &str) {
        let base = self.stage_base(plan, stage);
        for (s, stream) in plan.staged.iter().zip(&plan.streams) {
            let mut inside_loop: HashMap<usize, String> = HashMap::new();
            let mut destinations: HashMap<String, String> = HashMap::new();
            let mut row = stream.next.clone();
            for copy in &stream.copies {
                if let Some(advance) = &copy.advance {
                    let r = self.reg(RegClass::B64);
                    self.emit(format!("add.s64 {r}, {row}, {advance};"));
                    row = r;
                }
                let along = match inside_loop.get(&copy.along) {
                    Some(p) => p.clone(),
                    None => {
                        let p = self.reg(RegClass::Pred);
                        self.emit(format!(
                            "setp.lt.s32 {p}, {}, {};",
                            stream.below,
                            -(copy.along as isize)
                        ));
                        inside_loop.insert(copy.along, p.clone());
                        p
                    }
                };
                let pred = match &copy.inside {
                    None => along,
                    Some(q) => {
                        let p = self.reg(RegClass::Pred);
                        self.emit(format!("and.pred {p}, {along}, {q};"));
                        p
                    }
                };
                let dst = match destinations.get(&copy.dst.0) {
                    Some(d) => d.clone(),
                    None => {
                        let d = self.reg(RegClass::B32);
                        self.emit(format!("add.s32 {d}, {base}, {};", copy.dst.0));
                        destinations.insert(copy.dst.0.clone(), d.clone());
                        d
                    }
                };
                let size = self.reg(RegClass::B32);
                self.emit(format!("selp.b32 {size}, 16, 0, {pred};"));
                let (to, from) = (addr(&dst, s.offset + copy.dst.1), addr(&row, copy.imm));
                self.emit(format!("cp.async.cg.shared.global {to}, {from}, 16, {size};"));
            }
            self.emit(format!("add.s64 {0}, {0}, {1};", stream.next, stream.step));
            self.emit(format!("add.s32 {0}, {0}, {1};", stream.below, stream.extent));
        }
        self.emit("cp.async.commit_group;");
    }

    /// Before the loop (`lo..hi`): stage indices, and the first `ahead` iterations' copies.
    /// With warp specialization the producer fills the stages, and they
    /// run on from one block's loop into the next: nothing to do.
    pub(super) fn pipeline_prologue(&mut self, plan: &mut Plan, lo: &str, hi: &str) {
        if self.roles.is_some() {
            return;
        }
        if !plan.tma {
            plan.streams = (plan.staged.clone().iter())
                .map(|s| self.copy_stream(plan.var, s, lo))
                .collect();
            let copies = plan.streams.iter().map(|s| s.copies.len()).sum();
            self.copy_registers = self.copy_registers.max(copies);
        }
        self.emit(format!("mov.b32 {}, 0;", plan.read_stage));
        self.emit(format!("mov.b32 {}, {};", plan.write_stage, plan.ahead));
        if plan.tma {
            self.emit(format!("mov.b32 {}, 0;", plan.phase));
            self.tma_init(plan, &[]);
        }
        for s in 0..plan.ahead {
            let stage = self.reg(RegClass::B32);
            self.emit(format!("mov.b32 {stage}, {s};"));
            if plan.tma {
                let j = self.reg(RegClass::B32);
                self.emit(format!("add.s32 {j}, {lo}, {s};"));
                self.tma_issue(plan, &j, hi, &stage);
            } else {
                self.issue_copies(plan, &stage);
            }
        }
    }

    /// At the top of iteration `k`: wait for its tiles, start the copies for
    /// `k + ahead`, and point the staged conversions at the read stage.
    pub(super) fn pipeline_step(&mut self, plan: &Plan, k: &str, hi: &str) {
        if self.roles.is_some() {
            // The producer fills the stages: wait for this one's tiles.
            let kind = if plan.transposes() {
                StageBarrier::Ready
            } else {
                StageBarrier::Full
            };
            self.tma_wait(plan, kind);
        } else if plan.tma {
            // Every thread is past the previous iteration, so the stage
            // written next is no longer read (its `wgmma`s are done).
            self.emit("bar.sync 0;");
            let j = self.reg(RegClass::B32);
            self.emit(format!("add.s32 {j}, {k}, {};", plan.ahead));
            self.tma_issue(plan, &j, hi, &plan.write_stage.clone());
            self.tma_wait(plan, StageBarrier::Full);
        } else {
            self.emit(format!("cp.async.wait_group {};", plan.ahead - 1));
            if self.path == MmaPath::Wgmma {
                // The copies wrote through the generic proxy; `wgmma` reads through the async one.
                self.emit("fence.proxy.async.shared::cta;");
            }
            self.barrier();
            self.issue_copies(plan, &plan.write_stage.clone());
        }
        let base = self.stage_base(plan, &plan.read_stage.clone());
        for s in &plan.staged {
            let tile = self.reg(RegClass::B32);
            self.emit(format!("add.s32 {tile}, {base}, {};", s.offset));
            self.skip.extend(s.chain.iter().copied());
            self.pipelined.insert(s.tensor);
            let contiguous = if s.transposed { s.role.k_dim() } else { s.contiguous };
            self.staged_reads.insert(s.convert, (tile, contiguous, s.role));
            if s.interleaved {
                self.interleaved.insert(s.convert);
            }
        }
    }

    /// At the end of an iteration: both stage indices move on, modulo
    /// STAGES; the mbarrier phase flips when the read stage wraps. With warp
    /// specialization, the previous iteration's stage goes back to the
    /// producer (its `wgmma`s are done) and only the read stage moves.
    pub(super) fn pipeline_advance(&mut self, plan: &Plan) {
        if let Some(previous) = self.roles.as_ref().map(|r| r.previous.clone()) {
            self.release_previous(plan);
            self.emit(format!("mov.b32 {previous}, {};", plan.read_stage));
            self.remember_partner();
            self.next_stage(plan, &plan.read_stage, Some(&plan.phase));
            return;
        }
        self.next_stage(plan, &plan.read_stage, plan.tma.then_some(&plan.phase));
        self.next_stage(plan, &plan.write_stage, None);
    }

    /// Moves the stage index in register `stage` on, modulo STAGES,
    /// flipping the mbarrier phase parity `parity` when it wraps.
    pub(super) fn next_stage(&mut self, plan: &Plan, stage: &str, parity: Option<&str>) {
        let p = self.reg(RegClass::Pred);
        self.emit(format!("add.s32 {stage}, {stage}, 1;"));
        self.emit(format!("setp.eq.s32 {p}, {stage}, {};", plan.stages));
        self.emit(format!("selp.b32 {stage}, 0, {stage}, {p};"));
        if let Some(parity) = parity {
            self.emit(format!("@{p} xor.b32 {parity}, {parity}, 1;"));
        }
    }

    /// After the loop: no copy may still be writing shared memory, and no
    /// `wgmma` still updating an accumulator.
    pub(super) fn pipeline_drain(&mut self) {
        if self.path == MmaPath::Wgmma {
            self.emit("wgmma.wait_group.sync.aligned 0;");
        }
        if self.roles.is_some() {
            // One team: the last stage read goes back to the producer in
            // the next block's first iteration. Two: see `end_turn`. The
            // consumers need no barrier among themselves.
            self.end_turn();
            return;
        }
        self.emit("cp.async.wait_group 0;");
        self.barrier();
    }
}
