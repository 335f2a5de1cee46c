//! Ops in order: the dispatch from each IR op to its family, `for` loops
//! (with their pipelines) and `if`.

use super::MmaPath;
use super::emit::*;
use crate::dtype::DType;
use crate::ir::*;
use crate::ptx::RegClass;

impl Lower<'_> {
    pub(super) fn op(&mut self, op: &Op) {
        let r = op.results.first().copied();
        if r.is_some_and(|r| self.skip.contains(&r)) {
            return;
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
            OpKind::BlockId(0) if self.persistent.is_some() => {
                vec![self.persistent.as_ref().expect("a persistent block").block.clone()]
            }
            OpKind::NumBlocks(0) if self.persistent.is_some() => {
                vec![self.persistent.as_ref().expect("a persistent block").grid.clone()]
            }
            OpKind::BlockId(a) => vec![self.special(&format!("%ctaid.{}", ["x", "y", "z"][*a]))],
            OpKind::NumBlocks(a) => vec![self.special(&format!("%nctaid.{}", ["x", "y", "z"][*a]))],
            OpKind::TensorDim { tensor, axis } => vec![self.tensors[tensor].dims[*axis].clone()],
            OpKind::Const(c) => vec![self.constant(*c, self.dtype(r.expect("result")))],
            OpKind::Get { tensor, index } => vec![self.get(*tensor, index, r.expect("result"))],
            OpKind::FetchAdd { tensor, index, value } => vec![self.fetch_add(*tensor, index, *value)],
            OpKind::Signal { tensor, index, value } => {
                self.signal(*tensor, index, *value);
                vec![]
            }
            OpKind::Wait { tensor, index, value } => {
                self.wait(*tensor, index, *value);
                vec![]
            }
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
            OpKind::ClusterGather { arg, .. } => self.cluster_gather(*arg, r.expect("result")),
            OpKind::Store { tensor, index, value } => {
                self.store(*tensor, index, *value);
                vec![]
            }
            OpKind::StoreFlagged {
                tensor,
                index,
                value,
                flag,
            } => {
                self.store_flagged(*tensor, index, *value, *flag);
                vec![]
            }
            OpKind::LoadFlagged { tensor, index, flag } => self.load_flagged(*tensor, index, *flag, r.expect("result")),
            OpKind::Gather { tensor, index, pad } => self.gather(*tensor, index, *pad),
            OpKind::Prefetch { tensor, index, shape } => {
                self.prefetch(*tensor, index, shape);
                vec![]
            }
            OpKind::Scatter { tensor, index, value } => {
                self.scatter(*tensor, index, *value);
                vec![]
            }
            OpKind::Atomic {
                tensor,
                index,
                value,
                compare,
                op,
                order,
            } => self.atomic((*tensor, index, *value, *compare), (*op, *order), r),
            OpKind::Unary(UnaryOp::Bitcast, a) => {
                let to = self.dtype(r.expect("result"));
                self.regs_of(*a).iter().map(|x| self.bitcast(to, x)).collect()
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
            OpKind::Scan {
                op: sop,
                arg,
                axis,
                reverse,
            } => self.scan(*sop, *arg, *axis, *reverse),
            OpKind::Sort {
                arg,
                axis,
                descending,
                indices,
                keep,
            } => self.sort(*arg, *axis, (*descending, *indices), *keep),
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
                self.for_loop(*lo, *hi, *var, inits, args, body, yields, &op.results);
                return;
            }
            OpKind::If {
                cond,
                then_body,
                then_yields,
                else_body,
                else_yields,
            } => {
                self.if_op(*cond, then_body, then_yields, else_body, else_yields, &op.results);
                return;
            }
        };
        if let Some(r) = r {
            self.vals.insert(r, out);
        }
    }

    // ---- control flow -------------------------------------------------------------

    pub(super) fn classes(&self, v: ValueId) -> RegClass {
        RegClass::of(self.dtype(v))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn for_loop(
        &mut self,
        lo: ValueId,
        hi: ValueId,
        var: ValueId,
        inits: &[ValueId],
        args: &[ValueId],
        body: &[Op],
        yields: &[ValueId],
        results: &[ValueId],
    ) {
        let mut carried = Vec::new();
        for (&init, &arg) in inits.iter().zip(args) {
            let class = self.classes(arg);
            let regs: Vec<String> = self.regs_of(init).iter().map(|r| self.copy(class, r)).collect();
            self.vals.insert(arg, regs.clone());
            carried.push(regs);
        }
        let i = self.copy(RegClass::B32, &self.scalar(lo));
        let mut plan = match &self.roles {
            Some(roles) if roles.plan.var == var => Some(roles.plan.clone()),
            _ => self.pipeline(var),
        };
        if let Some(plan) = &mut plan {
            self.pipeline_prologue(plan, &i, &self.scalar(hi));
            self.wgmma_in_flight = plan.wgmma_in_flight;
        }
        self.stage_invariant_operands(var);
        self.vals.insert(var, vec![i.clone()]);
        let (head, end) = (self.label("loop"), self.label("done"));
        let done = self.reg(RegClass::Pred);
        self.emit(format!("{head}:"));
        self.emit(format!("setp.ge.s32 {done}, {i}, {};", self.scalar(hi)));
        self.emit(format!("@{done} bra {end};"));
        if let Some(plan) = &plan {
            self.pipeline_step(plan, &i, &self.scalar(hi));
        }
        self.ops(body);
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
        }
        for (&r, regs) in results.iter().zip(carried) {
            self.vals.insert(r, regs);
        }
    }

    pub(super) fn if_op(
        &mut self,
        cond: ValueId,
        then_body: &[Op],
        then_yields: &[ValueId],
        else_body: &[Op],
        else_yields: &[ValueId],
        results: &[ValueId],
    ) {
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
            self.ops(body);
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
    }
}
