//! Which PTX entries a specialization gets, decided before any is lowered
//! ("variants as data"). Each variant is a thread mapping of the function
//! (its warps, its `mma` path, the tensors it accesses with 16-byte
//! vectors) with its [`Plan`]:
//!
//! - portable (`mma.sync`, every target): every tensor loaded or stored as
//!   tiles of rows of two elements or more with vectors (`v`), then for an `mma` kernel whose pipelines
//!   copy only some tensors only those (`vs`), then none (`s`): each serves
//!   arguments the one before cannot (an LM head's output rows are not
//!   16-byte aligned). Tensors read or written element by element (`get`,
//!   `gather`, `scatter`, atomics) are never among them, as vectors would
//!   not serve them: a one-element length tensor does not rule vectors out
//!   for the rest. Each of
//!   them also as a persistent kernel of two tiles per block (`_persistent`)
//!   where two of its blocks would share an SM;
//! - flagged tensors (`store_flagged`, `load_flagged`) are accessed with
//!   16-byte lines in every variant: a reader and its writer on another
//!   GPU must agree on the layout whichever variants they run;
//! - on sm_90a, `wgmma` with TMA (`wgmma`, `wgmma_s`), warp-specialized
//!   where the plan allows, and for f32 operands in 2-CTA clusters with
//!   TMA multicast (`_cluster`), which the launch asks for;
//! - a kernel that gathers across its clusters (`cluster_gather`) gets
//!   only the portable forms of one tile per block, every one in clusters.
//!
//! The runtime picks among them at launch (`tile-runtime`'s selection).

use crate::ast;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Func, Op, OpKind, Param};
use crate::layout::{self, Layouts, MmaPath};
use crate::plan::memory::place;
use crate::plan::{Context, Plan};
use crate::simplify;
use crate::warps::{scalar_warps, wgmma_warps};
use std::rc::Rc;
use tile_spec::Target;

/// A specialization laid out for one thread mapping.
pub struct LaidOut {
    pub func: Func,
    pub layouts: Layouts,
    pub path: MmaPath,
    /// The tensor parameters accessed with 16-byte vectors.
    pub vectorized: Vec<usize>,
    /// The `num_stages` hint.
    pub num_stages: Option<u32>,
}

impl LaidOut {
    /// `func` with `num_warps` warps and layouts for `path`, the
    /// `vectorized` tensors accessed with vectors.
    fn new(func: &Func, num_warps: u32, path: MmaPath, vectorized: &[usize], num_stages: Option<u32>) -> LaidOut {
        let mut f = Func {
            name: func.name.clone(),
            params: func.params.clone(),
            values: func.values.clone(),
            body: func.body.clone(),
            num_warps,
        };
        let layouts = layout::assign_layouts(&mut f, path, vectorized);
        simplify::remove_dead(&mut f);
        LaidOut {
            func: f,
            layouts,
            path,
            vectorized: vectorized.to_vec(),
            num_stages,
        }
    }

    /// The context the plan and the lowering read.
    pub fn context(&self) -> Context<'_> {
        Context::new(&self.func, &self.layouts, &self.vectorized, self.path, self.num_stages)
    }

    /// The plan of this mapping: warp-specialized where `specialize`
    /// allows ((ping-pong, clusters), the `wgmma` path), two tiles per
    /// persistent block where `persistent` does.
    fn plan(&self, specialize: Option<(bool, bool)>, persistent: bool) -> Result<Plan> {
        place(&self.context(), specialize, persistent)
    }
}

/// One variant to lower: the entry name's suffix, the target it is for
/// (`None`: portable), its thread mapping and its plan.
pub struct VariantPlan {
    pub kind: String,
    pub target: Option<Target>,
    pub laid_out: Rc<LaidOut>,
    pub plan: Plan,
}

/// Every variant of the specialization `func` (its warps chosen), in the
/// order the runtime's selection expects.
pub fn variants(func: &Func, kernel: &ast::Kernel) -> Result<Vec<VariantPlan>> {
    let stages = kernel.num_stages;
    let tensors = tile_accessed(func);
    // Flagged tensors move in 16-byte lines in every variant.
    let lines = flagged(func);
    let with_lines = |vectorized: &[usize]| -> Vec<usize> {
        let mut all: Vec<usize> = vectorized.iter().chain(&lines).copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let mut out = Vec::new();
    // A portable variant for `vectorized`, and its persistent form where
    // it has one; the tensors its pipelines copy.
    let mut portable = |vectorized: &[usize], kind: &str| -> Result<Vec<usize>> {
        let keep = !vectorized.is_empty() || kernel.num_warps.is_some();
        let laid_out = Rc::new(LaidOut::new(
            func,
            scalar_warps(func, keep),
            MmaPath::Portable,
            &with_lines(vectorized),
            stages,
        ));
        let plan = laid_out.plan(None, false)?;
        let operands = plan.pipelined.clone();
        let persistent = laid_out.plan(None, true)?;
        out.push(VariantPlan {
            kind: kind.to_string(),
            target: None,
            laid_out: laid_out.clone(),
            plan,
        });
        // A block of a cluster that gathers computes one tile: no
        // persistent two-tile form.
        if persistent.persistent.is_some() && func.cluster_blocks() == 1 {
            out.push(VariantPlan {
                kind: format!("{kind}_persistent"),
                target: None,
                laid_out,
                plan: persistent,
            });
        }
        Ok(operands)
    };
    if !tensors.is_empty() {
        let operands = portable(&tensors, "v")?;
        if !operands.is_empty() && operands != tensors {
            portable(&operands, "vs")?;
        }
    }
    portable(&[], "s")?;

    // `wgmma`: the first warp count whose plan takes the path (four warps
    // only when two consumer warpgroups can take turns, if more are offered).
    if func.cluster_blocks() > 1 {
        // Every thread of a cluster that gathers meets at its barriers:
        // no warp-specialized `wgmma` form, whose producer warps run apart.
        return Ok(out);
    }
    let warp_choices = wgmma_warps(func, kernel.num_warps);
    let sm90a = Some(Target::Sm90a);
    let wgmma = |num_warps: u32, vectorized: &[usize], clusters: bool| -> Result<Option<(Rc<LaidOut>, Plan)>> {
        let laid_out = Rc::new(LaidOut::new(
            func,
            num_warps,
            MmaPath::Wgmma,
            &with_lines(vectorized),
            stages,
        ));
        let plan = laid_out.plan(Some((true, clusters)), false)?;
        let takes_path = plan.unsupported.is_none() && !plan.products.is_empty();
        Ok(takes_path.then_some((laid_out, plan)))
    };
    // Operands read in f32 (tf32): `wgmma` variants whose blocks run in
    // 2-CTA clusters too, which the launch may ask for.
    let f32_operands = |pipelined: &[usize]| {
        pipelined
            .iter()
            .all(|&p| matches!(&func.params[p], Param::Tensor(t) if t.dtype == DType::F32))
    };
    for (choice, &num_warps) in warp_choices.iter().enumerate() {
        let planned = wgmma(num_warps, &tensors, false)?;
        let ping_pong = |plan: &Plan| plan.specialization.as_ref().is_some_and(|s| s.consumer_groups > 1);
        if planned
            .as_ref()
            .is_some_and(|(_, p)| num_warps == 4 && !ping_pong(p) && choice + 1 < warp_choices.len())
        {
            continue;
        }
        let Some((laid_out, plan)) = planned else { break };
        // As above: a second variant with vectors (TMA) for the operands only.
        let operands = plan.pipelined.clone();
        let clustered = plan.specialization.is_some() && f32_operands(&operands);
        out.push(VariantPlan {
            kind: "wgmma".to_string(),
            target: sm90a,
            laid_out,
            plan,
        });
        let mut sets = vec![(tensors.clone(), "wgmma")];
        if operands != tensors
            && let Some((laid_out, plan)) = wgmma(num_warps, &operands, false)?
        {
            out.push(VariantPlan {
                kind: "wgmma_s".to_string(),
                target: sm90a,
                laid_out,
                plan,
            });
            sets.push((operands, "wgmma_s"));
        }
        for (vectorized, kind) in sets.into_iter().filter(|_| clustered) {
            let planned = wgmma(num_warps, &vectorized, true)?;
            if let Some((laid_out, plan)) =
                planned.filter(|(_, p)| p.specialization.as_ref().is_some_and(|s| s.clustered))
            {
                out.push(VariantPlan {
                    kind: format!("{kind}_cluster"),
                    target: sm90a,
                    laid_out,
                    plan,
                });
            }
        }
        break;
    }
    Ok(out)
}

/// The tensor parameters `func` moves as flagged tiles (`store_flagged`,
/// `load_flagged`), in order.
fn flagged(func: &Func) -> Vec<usize> {
    tensors_where(func, &|op| match op.kind {
        OpKind::StoreFlagged { tensor, .. } | OpKind::LoadFlagged { tensor, .. } => Some(tensor),
        _ => None,
    })
}

/// The tensor parameters `func` loads or stores as tiles of rows of more
/// than one element, in order: those vectors can serve. (A tile of
/// one-element rows, a `[1]` counter reset, say, moves element by element
/// in any variant.)
fn tile_accessed(func: &Func) -> Vec<usize> {
    let row = |v: usize| {
        func.values[v]
            .shape
            .as_ref()
            .and_then(|s| s.last())
            .copied()
            .unwrap_or(1)
    };
    tensors_where(func, &|op| match op.kind {
        OpKind::Load { tensor, .. } if row(op.results[0]) > 1 => Some(tensor),
        OpKind::Store { tensor, value, .. } if row(value) > 1 => Some(tensor),
        _ => None,
    })
}

/// The tensor parameters that `pick` names for some op of `func`, nested
/// bodies included, in order.
fn tensors_where(func: &Func, pick: &dyn Fn(&Op) -> Option<usize>) -> Vec<usize> {
    fn visit(ops: &[Op], pick: &dyn Fn(&Op) -> Option<usize>, seen: &mut Vec<bool>) {
        for op in ops {
            if let Some(t) = pick(op) {
                seen[t] = true;
            }
            for body in op.kind.bodies() {
                visit(body, pick, seen);
            }
        }
    }
    let mut seen = vec![false; func.params.len()];
    visit(&func.body, pick, &mut seen);
    func.tensor_params().into_iter().filter(|&t| seen[t]).collect()
}
