//! 2-CTA clusters of persistent blocks that share operand tiles by TMA
//! multicast (sm_90a), for f32 (tf32) operands.
//!
//! The grid is launched in clusters of two blocks (`.reqnctapercluster`),
//! which start at an even and an odd `%ctaid.x` and step by `%nctaid.x`:
//! the blocks of a cluster compute the launch's blocks 2p and 2p + 1 in
//! lockstep, and their producers fill the same stages in the same order
//! (the loop's bounds must not depend on the block). For each cluster, each
//! producer computes both blocks' tile indices; a staged tile that both
//! blocks load alike (`group_tiles` hands a cluster the same column of `b`) is
//! copied half by each producer and multicast into both blocks' stages, so
//! it is read from L2 once for the two. A tile the blocks load differently,
//! each copies whole. A tile's halves are its panels (128-byte columns of
//! the swizzle), or the halves of its rows when it has one panel.
//!
//! Such variants are built beside the others (entries ending in `_cluster`),
//! and a launch takes one when its grid asks for clusters: they gain on
//! some problems (an LM head, short K-loops) and lose on others (squares),
//! so the caller's tuner chooses.
//!
//! A stage is then written by both producers: neither refills it before
//! both blocks' consumers have released it. Each consumer warp arrives on
//! its own block's empty mbarrier and on its peer's, or twice on its own
//! when the cluster's other block is past the launch's end. A cluster barrier
//! after the mbarriers' setup keeps a producer from copying into a block
//! whose mbarriers do not exist yet, and one at exit keeps a block's shared
//! memory alive while its peer may still arrive on it.

use super::emit::Lower;
use super::state::*;
use crate::ir::*;
use crate::ptx::RegClass;

impl Lower<'_> {
    /// The cluster's registers, set up in the prologue, for a plan staging
    /// `tiles` tiles.
    pub(super) fn cluster(&mut self, tiles: usize) -> Cluster {
        let rank = self.special("%cluster_ctarank");
        let mask = self.in_prologue(|l| {
            let m = l.reg(RegClass::B16);
            l.emit(format!("mov.b16 {m}, {};", (1 << CLUSTER_BLOCKS) - 1));
            m
        });
        Cluster {
            rank,
            peer: self.reg(RegClass::B32),
            previous_peer: self.reg(RegClass::B32),
            shared: (0..tiles).map(|_| self.reg(RegClass::Pred)).collect(),
            mask,
        }
    }

    fn clustered(&self) -> Option<&Cluster> {
        self.roles.as_ref()?.cluster.as_ref()
    }

    /// The launch's block paired with block `block` (a register), and
    /// whether the launch has it.
    fn other_block(&mut self, block: &str) -> (String, String) {
        let grid = self.roles.as_ref().expect("roles").grid.clone();
        let (other, exists) = (self.reg(RegClass::B32), self.reg(RegClass::Pred));
        self.emit(format!("xor.b32 {other}, {block}, 1;"));
        self.emit(format!("setp.lt.u32 {exists}, {other}, {grid};"));
        (other, exists)
    }

    /// Consumers, as a block's computation starts: the block its releases
    /// go to besides this one (see [`Cluster::peer`]).
    pub(super) fn cluster_peer(&mut self) {
        let Some(c) = self.clustered() else { return };
        let (rank, peer) = (c.rank.clone(), c.peer.clone());
        let block = self.roles.as_ref().expect("roles").block.clone();
        let (_, exists) = self.other_block(&block);
        let other = self.reg(RegClass::B32);
        self.emit(format!("xor.b32 {other}, {rank}, 1;"));
        self.emit(format!("selp.b32 {peer}, {other}, {rank}, {exists};"));
    }

    /// Consumers: the stage just read becomes `WarpRoles::previous`; its peer with it.
    pub(super) fn remember_peer(&mut self) {
        if let Some(c) = self.clustered() {
            let line = format!("mov.b32 {}, {};", c.previous_peer, c.peer);
            self.emit(line);
        }
    }

    /// Consumers, releasing `WarpRoles::previous`, whose empty mbarrier is at
    /// `bar`, where `releases` (each warp's lane 0): the peer's arrival.
    pub(super) fn release_to_peer(&mut self, bar: &str, releases: &str) {
        let Some(peer) = self.clustered().map(|c| c.previous_peer.clone()) else {
            return;
        };
        let remote = self.reg(RegClass::B32);
        self.emit(format!("@{releases} mapa.shared::cluster.u32 {remote}, {bar}, {peer};"));
        // Release at the CTA's scope, as the local arrival: the stage was
        // read by `wgmma`s already waited for, and a cluster-scope release
        // would fence the epilogue's stores too, which stalls the consumers
        // on the fence.
        self.emit(format!(
            "@{releases} mbarrier.arrive.shared::cluster.b64 _, [{remote}];"
        ));
    }

    /// Producer, for each block: the scalar ops `slice` (the loop's bounds
    /// and tile indices), first for the pair's other block and then for this
    /// one, and per staged tile whether the two load it alike.
    pub(super) fn cluster_tiles(&mut self, plan: &Pipeline, slice: &[&Op]) {
        let block = self.roles.as_ref().expect("roles").block.clone();
        let (other, exists) = self.other_block(&block);
        self.roles.as_mut().expect("roles").block = other;
        for op in slice {
            self.op(op);
        }
        let mut theirs: Vec<Vec<Option<String>>> = Vec::new();
        for s in &plan.staged {
            let mut index = Vec::new();
            for &i in &s.index {
                let value = self.scalar(i);
                index.push((i != plan.var).then(|| self.copy(RegClass::B32, &value)));
            }
            theirs.push(index);
        }
        self.roles.as_mut().expect("roles").block = block;
        for op in slice {
            self.op(op);
        }
        let shared = self.clustered().expect("a cluster").shared.clone();
        for ((s, theirs), alike) in plan.staged.iter().zip(theirs).zip(shared) {
            self.emit(format!("mov.pred {alike}, {exists};"));
            for (&i, their) in s.index.iter().zip(theirs) {
                let Some(their) = their else { continue };
                let same = self.reg(RegClass::Pred);
                self.emit(format!("setp.eq.s32 {same}, {}, {their};", self.scalar(i)));
                self.emit(format!("and.pred {alike}, {alike}, {same};"));
            }
        }
    }

    /// Every thread of both blocks: `release` orders this block's earlier
    /// writes and arrivals before the other's reads after the barrier (`acquire`).
    pub(super) fn cluster_barrier(&mut self) {
        self.emit("barrier.cluster.arrive.release;");
        self.emit("barrier.cluster.wait.acquire;");
    }
}
