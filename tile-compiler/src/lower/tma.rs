//! Tensor Memory Accelerator copies (sm_90a): in a pipelined loop of the
//! `wgmma` path, one thread moves each operand tile from global memory into
//! its stage with `cp.async.bulk.tensor`, described by a tensor map that the
//! runtime encodes at launch. The hardware writes the stage in the same
//! swizzled panels the descriptors read ([`super::tensor_core::Swizzle`]),
//! fills out-of-bounds elements with zeros, and counts the bytes on the
//! stage's mbarrier, which every thread waits on before its `wgmma`s.

use super::emit::Lower;
use super::state::*;
use crate::ptx::{EntryParam, RegClass, TENSOR_MAP};

impl Lower<'_> {
    /// The generic address of the tensor-map parameter for `map`, declared on first use.
    pub(super) fn tensor_map(&mut self, map: TensorMap) -> String {
        if let Some(i) = self.tensor_maps.iter().position(|(m, _)| *m == map) {
            return self.tensor_maps[i].1.clone();
        }
        let name = format!("{}_tmap{}", self.entry, self.tensor_maps.len());
        let reg = self.in_prologue(|l| {
            let r = l.reg(RegClass::B64);
            l.emit(format!("mov.u64 {r}, {name};"));
            l.emit(format!("cvta.param.u64 {r}, {r};"));
            r
        });
        self.tma_params.push(EntryParam { name, ty: TENSOR_MAP });
        self.tensor_maps.push((map, reg.clone()));
        reg
    }

    /// The shared address of stage `stage`'s mbarrier of kind `kind`: one
    /// array of `plan.stages` per kind, in [`StageBarrier`]'s order.
    pub(super) fn stage_barrier(&mut self, plan: &Pipeline, stage: &str, kind: StageBarrier) -> String {
        let offset = plan.barriers + 8 * plan.stages * kind as usize;
        self.dynamic_address(offset, Some((stage, 8)))
    }

    /// Thread 0 sets up each stage's mbarriers: the full one expects one
    /// arrival (its own, with the byte count) per fill, and each other kind
    /// in `others` the given number; then the block synchronizes, so that
    /// no thread uses a barrier before it exists.
    pub(super) fn tma_init(&mut self, plan: &Pipeline, others: &[(StageBarrier, u32)]) {
        let (skip, leader) = (self.label("tma_init"), self.reg(RegClass::Pred));
        self.emit(format!("setp.ne.u32 {leader}, {}, 0;", self.tid));
        self.emit(format!("@{leader} bra {skip};"));
        for s in 0..plan.stages {
            let stage = format!("{s}");
            let bar = self.stage_barrier(plan, &stage, StageBarrier::Full);
            self.emit(format!("mbarrier.init.shared::cta.b64 [{bar}], 1;"));
            for &(kind, arrivals) in others {
                let bar = self.stage_barrier(plan, &stage, kind);
                self.emit(format!("mbarrier.init.shared::cta.b64 [{bar}], {arrivals};"));
            }
        }
        self.emit("fence.mbarrier_init.release.cluster;");
        self.emit(format!("{skip}:"));
        if self.roles.as_ref().is_some_and(|r| r.cluster.is_some()) {
            // The other block's producer copies into this one's stages too.
            self.cluster_barrier();
        } else {
            self.emit("bar.sync 0;");
        }
    }

    /// Thread 0 starts the copies of iteration `j`'s tiles into `stage`,
    /// unless `j` is past the loop's end (`hi`): no copy outlives the loop.
    pub(super) fn tma_issue(&mut self, plan: &Pipeline, j: &str, hi: &str, stage: &str) {
        let skip = self.label("tma_skip");
        let (not_leader, past) = (self.reg(RegClass::Pred), self.reg(RegClass::Pred));
        self.emit(format!("setp.ne.u32 {not_leader}, {}, 0;", self.tid));
        self.emit(format!("setp.ge.s32 {past}, {j}, {hi};"));
        self.emit(format!("or.pred {not_leader}, {not_leader}, {past};"));
        self.emit(format!("@{not_leader} bra {skip};"));
        self.tma_fill(plan, j, stage);
        self.emit(format!("{skip}:"));
    }

    /// Copies iteration `j`'s tiles into `stage` (the calling thread alone),
    /// announcing their bytes to the stage's full mbarrier. In a cluster
    /// ([`super::cluster`]) a tile the pair's blocks load alike goes in two
    /// halves (its panels, or the halves of its rows when it has one), this
    /// block's half multicast into both blocks' stages; another tile this
    /// block copies itself, both halves.
    pub(super) fn tma_fill(&mut self, plan: &Pipeline, j: &str, stage: &str) {
        let bar = self.stage_barrier(plan, stage, StageBarrier::Full);
        let state = self.reg(RegClass::B64);
        self.emit(format!(
            "mbarrier.arrive.expect_tx.shared::cta.b64 {state}, [{bar}], {};",
            plan.staged_bytes()
        ));
        let cluster = self
            .roles
            .as_ref()
            .and_then(|r| r.cluster.as_ref())
            .map(|c| (c.rank.clone(), c.shared.clone(), c.mask.clone()));
        let base = self.stage_base(plan, stage);
        for (tile, s) in plan.staged.iter().enumerate() {
            let shape = self.layout(s.load).shape.clone();
            let rank = shape.len();
            let line = s.swizzle(&shape).line_bytes();
            let inner = line / s.eb;
            let rows: usize = shape[..rank - 1].iter().product();
            let mut box_dims = vec![inner as u32];
            if s.interleaved {
                box_dims.extend([2, 4, shape[rank - 2] as u32 / 8]);
                box_dims.extend(shape[..rank - 2].iter().rev().map(|&n| n as u32));
            } else {
                box_dims.extend(shape[..rank - 1].iter().rev().map(|&n| n as u32));
            }
            // In a cluster a tile is copied in halves: its panels, or when
            // it has one, its rows (in groups of 8 when interleaved), whose
            // box then halves.
            let panels = shape[rank - 1] / inner;
            let split_rows = cluster.is_some() && panels % 2 == 1;
            let split = if s.interleaved {
                3
            } else {
                let rows_dim = (0..rank - 1).find(|&d| shape[d] > 1).unwrap_or(rank - 2);
                rank - 1 - rows_dim
            };
            if split_rows {
                box_dims[split] /= 2;
            }
            let half_rows = box_dims[split];
            let map = self.tensor_map(TensorMap {
                param: s.tensor,
                box_dims: box_dims.into(),
                swizzle_bytes: line as u32,
                interleaved_rows: s.interleaved,
                tf32: s.eb == 4,
            });
            // Element coordinates of the tile, innermost first; interleaved
            // rows count in groups of 8.
            let mut coords: Vec<String> = Vec::new();
            for d in (0..rank).rev() {
                let index = if s.index[d] == plan.var {
                    j.to_string()
                } else {
                    self.scalar(s.index[d])
                };
                if s.interleaved && d == rank - 2 {
                    let c = self.tile_origin(&index, shape[d] / 8);
                    let zero = self.reg(RegClass::B32);
                    self.emit(format!("mov.b32 {zero}, 0;"));
                    coords.extend([zero.clone(), zero, c]);
                } else {
                    coords.push(self.tile_origin(&index, shape[d]));
                }
            }
            let tile_base = self.reg(RegClass::B32);
            self.emit(format!("add.s32 {tile_base}, {base}, {};", s.offset));
            // One copy of the box at `at`: a byte offset into the tile and
            // steps of the coordinates (dimension, elements); and, for the
            // multicast of this block's half, as much again per rank.
            let copy = |l: &mut Self, guard: &str, at: (usize, usize, usize), per_rank: Option<(usize, usize)>| {
                let (bytes, dim, step) = at;
                let (dst, mut coord) = (l.reg(RegClass::B32), coords.clone());
                l.emit(format!("add.s32 {dst}, {tile_base}, {bytes};"));
                let c = l.reg(RegClass::B32);
                l.emit(format!("add.s32 {c}, {}, {step};", coords[dim]));
                coord[dim] = c.clone();
                let mut multicast = (String::new(), String::new());
                if let (Some((rank_bytes, rank_step)), Some((rank, _, mask))) = (per_rank, &cluster) {
                    l.emit(format!("mad.lo.s32 {dst}, {rank}, {rank_bytes}, {dst};"));
                    l.emit(format!("mad.lo.s32 {c}, {rank}, {rank_step}, {c};"));
                    multicast = (".multicast::cluster".to_string(), format!(", {mask}"));
                }
                l.emit(format!(
                    "{guard}cp.async.bulk.tensor.{}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{} [{dst}], [{map}, {{{}}}], [{bar}]{};",
                    coord.len(),
                    multicast.0,
                    coord.join(", "),
                    multicast.1,
                ));
            };
            let panel_bytes = rows * line;
            let Some((_, shared, _)) = &cluster else {
                for panel in 0..panels {
                    copy(self, "", (panel * panel_bytes, 0, panel * inner), None);
                }
                continue;
            };
            let (alone, together) = (format!("@!{} ", shared[tile]), format!("@{} ", shared[tile]));
            if split_rows {
                // One panel: both halves of its rows, or this block's for both.
                let half_bytes = rows / 2 * line;
                for half in 0..2 {
                    copy(
                        self,
                        &alone,
                        (half * half_bytes, split, half * half_rows as usize),
                        None,
                    );
                }
                copy(self, &together, (0, split, 0), Some((half_bytes, half_rows as usize)));
            } else {
                // Every panel, or this block's half of them for both.
                for panel in 0..panels {
                    copy(self, &alone, (panel * panel_bytes, 0, panel * inner), None);
                }
                let half = panels / 2;
                for panel in 0..half {
                    let per_rank = (half * panel_bytes, half * inner);
                    copy(self, &together, (panel * panel_bytes, 0, panel * inner), Some(per_rank));
                }
            }
        }
    }

    /// Waits until the read stage's mbarrier of kind `kind` completes phase
    /// `plan.phase` (which flips each time the stages wrap): its copies
    /// have landed (full), or its transposed tiles are written (ready).
    pub(super) fn tma_wait(&mut self, plan: &Pipeline, kind: StageBarrier) {
        let bar = self.stage_barrier(plan, &plan.read_stage, kind);
        self.wait_parity(&bar, &plan.phase);
    }

    /// Spins until the mbarrier at `bar` completes the phase of parity `parity`.
    pub(super) fn wait_parity(&mut self, bar: &str, parity: &str) {
        let (wait, done) = (self.label("mbar_wait"), self.reg(RegClass::Pred));
        self.emit(format!("{wait}:"));
        self.emit(format!(
            "mbarrier.try_wait.parity.shared::cta.b64 {done}, [{bar}], {parity};"
        ));
        self.emit(format!("@!{done} bra {wait};"));
    }
}
