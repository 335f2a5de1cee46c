//! `cluster_gather`: every block of a cluster stores its tile into the
//! cluster's first block's buffer through distributed shared memory
//! (`mapa`, `st.shared::cluster`), at its rank's place; then the cluster
//! meets at a barrier (each thread arrives, a release, and waits, an
//! acquire: the defaults of PTX ISA 7.8, which portable PTX targets), and
//! the first block reads the gathered tile back from its own buffer while
//! the others take zeros. Every thread arrives once at the kernel's
//! start, and the first gather waits for that phase, so no block stores
//! into one that has not started; each gather then takes one phase, every
//! thread arriving and waiting in turn.

use super::emit::{Lower, addr, flat};
use crate::ir::ValueId;
use crate::ptx::RegClass;

impl Lower<'_> {
    /// The kernel's first cluster barrier phase, in the prologue: this
    /// block has started.
    pub(super) fn cluster_started(&mut self) {
        if !self.plan.cluster_buffers.is_empty() {
            self.prologue.push("barrier.cluster.arrive.aligned;".to_string());
        }
    }

    /// `arg` of every block of the cluster, stacked along axis 0 in
    /// `result`'s layout in the first block, zeros elsewhere.
    pub(super) fn cluster_gather(&mut self, arg: ValueId, result: ValueId) -> Vec<String> {
        let buffer = (self.plan.cluster_buffers.iter())
            .position(|&(r, _)| r == result)
            .expect("planned");
        if buffer == 0 {
            self.emit("barrier.cluster.wait.aligned;");
        }
        let (la, lr) = (self.layout(arg), self.layout(result));
        let dtype = self.dtype(arg);
        let (class, eb) = (RegClass::of(dtype), dtype.bytes());
        let ty = match class {
            RegClass::F32 => "f32",
            RegClass::B16 => "b16",
            _ => "b32",
        };
        let rank = self.special("%cluster_ctarank");
        let local = self.reg(RegClass::B32);
        self.emit(format!("mov.u32 {local}, cluster_buffer{buffer};"));
        // This block's place in the first block's buffer.
        let at = self.reg(RegClass::B32);
        self.emit(format!("mapa.shared::cluster.u32 {at}, {local}, 0;"));
        let part = la.shape.iter().product::<usize>() * eb;
        self.emit(format!("mad.lo.u32 {at}, {rank}, {part}, {at};"));
        let coords = self.coords(la);
        if let Some(f) = self.thread_flat(&coords, &la.shape) {
            self.emit(format!("mad.lo.u32 {at}, {f}, {eb}, {at};"));
        }
        let guard = (self.owner_pred(la.replicated_mask()))
            .map(|p| format!("@{p} "))
            .unwrap_or_default();
        for (r, v) in self.regs_of(arg).iter().enumerate() {
            let imm = flat(&la.reg_coord(r), &la.shape) * eb;
            self.emit(format!("{guard}st.shared::cluster.{ty} {}, {v};", addr(&at, imm)));
        }
        self.emit("barrier.cluster.arrive.aligned;");
        self.emit("barrier.cluster.wait.aligned;");
        let first = self.reg(RegClass::Pred);
        self.emit(format!("setp.eq.u32 {first}, {rank}, 0;"));
        let coords = self.coords(lr);
        let from = match self.thread_flat(&coords, &lr.shape) {
            Some(f) => {
                let t = self.reg(RegClass::B32);
                self.emit(format!("mad.lo.u32 {t}, {f}, {eb}, {local};"));
                t
            }
            None => local,
        };
        (0..lr.num_regs())
            .map(|q| {
                let d = self.reg(class);
                let imm = flat(&lr.reg_coord(q), &lr.shape) * eb;
                let zero = if class == RegClass::F32 { "0f00000000" } else { "0" };
                self.emit(format!("mov.{ty} {d}, {zero};"));
                self.emit(format!("@{first} ld.shared.{ty} {d}, {};", addr(&from, imm)));
                d
            })
            .collect()
    }
}
