//! `cluster_gather`: every block of a cluster stores its tile into the
//! cluster's first block's buffer through distributed shared memory
//! (`mapa`, `st.shared::cluster`), at its rank's place; then the cluster
//! meets at a barrier (each thread arrives, a release, and waits, an
//! acquire: the defaults of PTX ISA 7.8, which portable PTX targets), and
//! the first block reads the gathered tiles back from its own buffers
//! while the others take zeros. Gathers that follow one another share a
//! meeting (`plan::gather`): the earlier ones' results get their
//! registers when stored and their loads at the meeting. Every thread
//! arrives once at the kernel's start, and the first gather waits for
//! that phase, so no block stores into one that has not started.

use super::emit::{Lower, addr, flat};
use super::state::Gathered;
use crate::ir::ValueId;
use crate::ptx::RegClass;

impl Lower<'_> {
    /// The kernel's first cluster barrier phase, in the prologue: this
    /// block has started.
    pub(super) fn cluster_started(&mut self) {
        if !self.plan.gathers.buffers.is_empty() {
            self.prologue.push("barrier.cluster.arrive.aligned;".to_string());
        }
    }

    /// `arg` of every block of the cluster, stacked along axis 0 in
    /// `result`'s layout in the first block, zeros elsewhere: the
    /// registers, loaded once the cluster has met.
    pub(super) fn cluster_gather(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        let buffer = (self.plan.gathers.buffers.iter())
            .position(|&(r, _)| r == result)
            .expect("planned");
        if buffer == 0 {
            self.emit("barrier.cluster.wait.aligned;");
        }
        let la = self.layout(arg);
        let dtype = self.dtype(arg);
        let eb = dtype.bytes();
        let ty = word(RegClass::of(dtype));
        let rank = self.special("%cluster_ctarank");
        let local = self.reg(RegClass::B32);
        self.emit(format!("mov.u32 {local}, cluster_buffer{buffer};"));
        // This block's place in the first block's buffer.
        let at = self.reg(RegClass::B32);
        self.emit(format!("mapa.shared::cluster.u32 {at}, {local}, 0;"));
        let part = la.shape.iter().product::<usize>() * eb;
        self.emit(format!("mad.lo.u32 {at}, {rank}, {part}, {at};"));
        let at = self.row_major_at(la, eb, at);
        let guard = (self.owner_pred(la.replicated_mask()))
            .map(|p| format!("@{p} "))
            .unwrap_or_default();
        for (r, v) in self.regs_of(arg).iter().enumerate() {
            let imm = flat(&la.reg_coord(r), &la.shape) * eb;
            self.emit(format!("{guard}st.shared::cluster.{ty} {}, {v};", addr(&at, imm)));
        }
        let regs: Vec<String> = (0..self.layout(result).num_regs())
            .map(|_| self.reg(RegClass::of(dtype)))
            .collect();
        self.gathered.push(Gathered {
            result,
            regs: regs.clone(),
            buffer: local,
        });
        if self.plan.gathers.meets_after.contains(&result) {
            self.cluster_meets();
        }
        regs
    }

    /// The cluster meets; the first block reads back every gather stored
    /// since the last meeting, the others take zeros.
    fn cluster_meets(&mut self) {
        self.emit("barrier.cluster.arrive.aligned;");
        self.emit("barrier.cluster.wait.aligned;");
        let first = self.reg(RegClass::Pred);
        let rank = self.special("%cluster_ctarank");
        self.emit(format!("setp.eq.u32 {first}, {rank}, 0;"));
        for g in std::mem::take(&mut self.gathered) {
            let l = self.layout(g.result);
            let dtype = self.dtype(g.result);
            let (class, eb) = (RegClass::of(dtype), dtype.bytes());
            let ty = word(class);
            let from = self.row_major_at(l, eb, g.buffer);
            let zero = if class == RegClass::F32 { "0f00000000" } else { "0" };
            for (q, d) in g.regs.iter().enumerate() {
                let imm = flat(&l.reg_coord(q), &l.shape) * eb;
                self.emit(format!("mov.{ty} {d}, {zero};"));
                self.emit(format!("@{first} ld.shared.{ty} {d}, {};", addr(&from, imm)));
            }
        }
    }
}

/// The type of a shared-memory access to a register of `class`.
fn word(class: RegClass) -> &'static str {
    match class {
        RegClass::F32 => "f32",
        RegClass::B16 => "b16",
        _ => "b32",
    }
}
