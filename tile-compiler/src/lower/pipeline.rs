//! Software pipelining of loops that feed the tensor cores.
//!
//! In a `for` loop whose body loads tiles only to hand them to `mma`, the
//! loads become `cp.async` copies straight from global into a ring of
//! shared-memory stages, issued `STAGES - 1` iterations ahead: iteration `k`
//! waits for its own tiles, starts the copies for `k + STAGES - 1`, and reads
//! fragments with `ldmatrix` while those copies are in flight.

use super::MmaPath;
use super::emit::{Lower, addr};
use super::state::*;
use crate::ir::*;
use crate::layout::{Bit, Layout};
use crate::plan::pipeline::Staged;
use crate::ptx::RegClass;
use std::collections::HashMap;

impl Lower<'_> {
    /// Loop `var`'s pipeline as planned, with the registers that track its
    /// stages; `None` when the loop is not pipelined.
    pub(super) fn pipeline(&mut self, var: ValueId) -> Option<Pipeline> {
        let placed = self.plan.loops.get(&var)?.clone();
        Some(Pipeline {
            phase: self.reg(RegClass::B32),
            read_stage: self.reg(RegClass::B32),
            write_stage: self.reg(RegClass::B32),
            plan: placed.plan,
            barriers: placed.barriers,
            buffer: placed.buffer,
            streams: Vec::new(),
        })
    }

    /// The shared address of stage `stage` (a register).
    pub(super) fn stage_base(&mut self, plan: &Pipeline, stage: &str) -> String {
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
        // The thread's first element along each dimension. Along the
        // loop's, the tiles move on from `lo` and are checked as they go
        // (`below`): that origin is not clamped, which would stop it moving.
        let base: Vec<String> = (0..rank)
            .map(|d| {
                let origin = if d == looped {
                    let origin = self.reg(RegClass::B32);
                    self.emit(format!("shl.b32 {origin}, {lo}, {};", l.shape[d].trailing_zeros()));
                    origin
                } else {
                    let ix = self.scalar(s.index[d]);
                    self.tile_origin(&ix, l.shape[d])
                };
                match &coords[d] {
                    Some(c) => {
                        let b = self.reg(RegClass::B32);
                        self.emit(format!("add.s32 {b}, {origin}, {c};"));
                        b
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
    fn issue_copies(&mut self, plan: &Pipeline, stage: &str) {
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
    pub(super) fn pipeline_prologue(&mut self, plan: &mut Pipeline, lo: &str, hi: &str) {
        if self.roles.is_some() {
            return;
        }
        if !plan.tma {
            plan.streams = (plan.plan.staged.clone().iter())
                .map(|s| self.copy_stream(plan.var, s, lo))
                .collect();
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
    pub(super) fn pipeline_step(&mut self, plan: &Pipeline, k: &str, hi: &str) {
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
    pub(super) fn pipeline_advance(&mut self, plan: &Pipeline) {
        if let Some(previous) = self.roles.as_ref().map(|r| r.previous.clone()) {
            self.release_previous(plan);
            self.emit(format!("mov.b32 {previous}, {};", plan.read_stage));
            self.remember_peer();
            self.next_stage(plan, &plan.read_stage, Some(&plan.phase));
            return;
        }
        self.next_stage(plan, &plan.read_stage, plan.tma.then_some(&plan.phase));
        self.next_stage(plan, &plan.write_stage, None);
    }

    /// Moves the stage index in register `stage` on, modulo STAGES,
    /// flipping the mbarrier phase parity `parity` when it wraps.
    pub(super) fn next_stage(&mut self, plan: &Pipeline, stage: &str, parity: Option<&str>) {
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
            // One consumer: the last stage read goes back to the producer in
            // the next block's first iteration. Two: see `end_turn`. The
            // consumers need no barrier among themselves.
            self.end_turn();
            return;
        }
        self.emit("cp.async.wait_group 0;");
        self.barrier();
    }
}
