//! The layout pass: gives every tile value of a function a layout and
//! inserts the conversions between layouts that remain. Splats, aranges and
//! broadcasts are re-created at each use in the layout the use needs; a
//! first pass finds the conversions, and where one converts a loaded tile
//! the second pass loads it in the wanted layout. Where a loop's loaded
//! tile meets another broadcast across the warps (a matrix–vector product's
//! vector, which every warp would load), the warps are moved off the
//! broadcast dimensions, if that costs the loop no conversion and no
//! reduction across warps.

use super::*;
use crate::dtype::DType;

/// Gives every tile value a layout and inserts the ops that move tiles
/// between layouts. Splats, aranges and broadcasts are not placed where they
/// are written but re-created at each use, in the layout the use needs, so
/// they never cost a conversion. A first pass finds the conversions that
/// remain; where one converts a loaded tile (through casts, element-wise
/// functions and reshapes), the second pass loads it in the wanted layout.
pub fn assign_layouts(func: &mut Func, path: MmaPath, vectorized: &[usize]) -> Layouts {
    let min_bytes = func
        .params
        .iter()
        .filter_map(|p| match p {
            Param::Tensor(t) => Some(t.dtype.bytes()),
            Param::Scalar { .. } => None,
        })
        .min()
        .unwrap_or(4);
    let run = |preferred: &HashMap<ValueId, Layout>| {
        let mut pass = Pass {
            values: func.values.clone(),
            num_warps: func.num_warps,
            split: WarpSplit::of(func),
            path,
            vectorized,
            vec: 16 / min_bytes,
            layouts: HashMap::new(),
            flexible: HashMap::new(),
            provisional: HashSet::new(),
            loops: Vec::new(),
            cache: vec![HashMap::new()],
            preferred: preferred.clone(),
            conversions: Vec::new(),
            operand_layouts: Vec::new(),
            warps_off_broadcasts: Vec::new(),
            loop_cost: 0,
        };
        let body = pass.block(func.body.clone());
        (pass, body)
    };
    let mut defs = HashMap::new();
    collect_defs(&func.body, &mut defs);
    // Loads in the layouts a run's conversions wanted, beside `given`.
    let preferring = |given: HashMap<ValueId, Layout>| {
        let (first, _) = run(&given);
        let mut preferred = given;
        // Tensor-core operands are not loaded in their fragment layouts: they
        // go through shared memory from coalesced 16-byte loads instead.
        for (v, l) in first
            .conversions
            .iter()
            .filter(|(_, l)| !first.operand_layouts.contains(l))
        {
            if let Some((load, layout)) = trace_to_load(*v, l.clone(), &defs, &func.values) {
                preferred.entry(load).or_insert(layout);
            }
        }
        (first, preferred)
    };
    let (first, preferred) = preferring(HashMap::new());
    let mut chosen = run(&preferred);
    let moved: HashMap<ValueId, Layout> = first
        .warps_off_broadcasts
        .iter()
        .filter_map(|(v, l)| trace_to_load(*v, l.clone(), &defs, &func.values))
        .collect();
    if !moved.is_empty() {
        let (_, preferred) = preferring(moved);
        let candidate = run(&preferred);
        if candidate.0.loop_cost <= chosen.0.loop_cost {
            chosen = candidate;
        }
    }
    let (pass, body) = chosen;
    func.body = body;
    func.values = pass.values;
    pass.layouts
}

fn collect_defs(ops: &[Op], defs: &mut HashMap<ValueId, OpKind>) {
    for op in ops {
        if let [r] = op.results[..] {
            defs.insert(r, op.kind.clone());
        }
        for b in op.kind.bodies() {
            collect_defs(b, defs);
        }
    }
}

/// Follows `v` back through layout-preserving single-operand ops to a load:
/// the load, and the layout that makes `v` come out in `l`.
fn trace_to_load(
    v: ValueId,
    l: Layout,
    defs: &HashMap<ValueId, OpKind>,
    values: &[crate::dtype::Ty],
) -> Option<(ValueId, Layout)> {
    match defs.get(&v)? {
        OpKind::Load { .. } => Some((v, l)),
        OpKind::Cast(a) | OpKind::Unary(_, a) => trace_to_load(*a, l, defs, values),
        OpKind::Reshape(a) => {
            let shape = values[*a].shape.as_ref()?;
            trace_to_load(*a, l.reshape(shape), defs, values)
        }
        _ => None,
    }
}

/// A loop whose body is being laid out.
struct LoopScope {
    /// Values the body (and the loop itself) defines, and the first value
    /// id the pass created for it: every later one is the body's too.
    inside: HashSet<ValueId>,
    first_new: ValueId,
    /// Conversions of loop-invariant tiles, to go before the loop.
    hoisted: Vec<Op>,
}

impl LoopScope {
    fn defines(&self, v: ValueId) -> bool {
        v >= self.first_new || self.inside.contains(&v)
    }
}

struct Pass<'a> {
    values: Vec<crate::dtype::Ty>,
    num_warps: u32,
    split: WarpSplit,
    path: MmaPath,
    /// The tensor parameters accessed with 16-byte vectors.
    vectorized: &'a [usize],
    vec: usize,
    layouts: Layouts,
    /// Definitions re-created at each use.
    flexible: HashMap<ValueId, OpKind>,
    /// Loop-carried tiles whose layout is a first guess (the initial value
    /// could be made in any): element-wise ops take their other operand's
    /// layout, which the loop then carries ([`Pass::for_loop`]).
    provisional: HashSet<ValueId>,
    /// The loops being laid out, innermost last: conversions of tiles
    /// computed before a loop go before it, not into its body.
    loops: Vec<LoopScope>,
    /// Re-created or converted copies, per scope: (value, layout) -> copy.
    cache: Vec<HashMap<(ValueId, Layout), ValueId>>,
    /// Layouts to load some tiles in (from the first pass).
    preferred: HashMap<ValueId, Layout>,
    /// Every conversion inserted: (value, wanted layout).
    conversions: Vec<(ValueId, Layout)>,
    /// The fragment layouts of `mma` operands.
    operand_layouts: Vec<Layout>,
    /// Loop-body tiles whose warps split a dimension along which a loaded
    /// operand is broadcast (each warp loads a copy of it), each with its
    /// layout, the warps moved off those dimensions.
    warps_off_broadcasts: Vec<(ValueId, Layout)>,
    /// Conversions and reductions across warps in loop bodies: what each
    /// iteration pays in shared memory and barriers.
    loop_cost: usize,
}

impl Pass<'_> {
    fn blocked(&self, shape: &[usize]) -> Layout {
        Layout::blocked(shape, self.num_warps, self.vec)
    }

    fn is_tile(&self, v: ValueId) -> bool {
        !self.values[v].is_scalar()
    }

    /// The layout a value has or, for a flexible one, the default.
    fn natural(&self, v: ValueId) -> Layout {
        match self.layouts.get(&v) {
            Some(l) => l.clone(),
            None => self.blocked(self.values[v].shape.as_ref().expect("tile")),
        }
    }

    fn cached(&self, key: &(ValueId, Layout)) -> Option<ValueId> {
        self.cache.iter().rev().find_map(|c| c.get(key).copied())
    }

    /// `v` in layout `l`, emitting whatever is needed into `out`.
    fn materialize(&mut self, v: ValueId, l: &Layout, out: &mut Vec<Op>, span: proc_macro2::Span) -> ValueId {
        if !self.is_tile(v) || self.layouts.get(&v) == Some(l) {
            return v;
        }
        let key = (v, l.clone());
        if let Some(c) = self.cached(&key) {
            return c;
        }
        let kind = match self.flexible.get(&v).cloned() {
            Some(OpKind::Broadcast(a)) => {
                let from = self.values[a].shape.clone().expect("tile");
                let a2 = self.materialize(a, &l.project(&from), out, span);
                OpKind::Broadcast(a2)
            }
            Some(OpKind::Reshape(a)) => {
                let from = self.values[a].shape.clone().expect("tile");
                let a2 = self.materialize(a, &l.reshape(&from), out, span);
                OpKind::Reshape(a2)
            }
            Some(mut k @ (OpKind::Unary(..) | OpKind::Binary(..) | OpKind::Select(..) | OpKind::Cast(_))) => {
                let mut mapped = HashMap::new();
                for o in k.operands() {
                    let m = self.materialize(o, l, out, span);
                    mapped.insert(o, m);
                }
                k.map_operands(|o| mapped[&o]);
                k
            }
            Some(k) => k,
            None => {
                self.conversions.push((v, l.clone()));
                OpKind::Convert(v)
            }
        };
        let ty = self.values[v].clone();
        self.values.push(ty);
        let nv = self.values.len() - 1;
        self.layouts.insert(nv, l.clone());
        let op = Op {
            kind,
            results: vec![nv],
            span,
        };
        // A loop-invariant tile is converted once, before the loop
        // (attention's queries, an `mma` operand in every iteration).
        match self.loops.last_mut() {
            Some(scope) if matches!(op.kind, OpKind::Convert(_)) && !scope.defines(v) => scope.hoisted.push(op),
            Some(_) if matches!(op.kind, OpKind::Convert(_)) => {
                self.loop_cost += 1;
                out.push(op)
            }
            _ => out.push(op),
        }
        self.cache.last_mut().expect("scope").insert(key, nv);
        nv
    }

    fn block(&mut self, ops: Vec<Op>) -> Vec<Op> {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            self.op(op, &mut out);
        }
        out
    }

    fn scoped_block(&mut self, ops: Vec<Op>) -> Vec<Op> {
        self.cache.push(HashMap::new());
        let b = self.block(ops);
        self.cache.pop();
        b
    }

    fn op(&mut self, mut op: Op, out: &mut Vec<Op>) {
        let span = op.span;
        let result = op.results.first().copied();
        let result_is_tile = result.is_some_and(|r| self.is_tile(r));
        let all_flexible = op
            .kind
            .operands()
            .iter()
            .all(|v| !self.is_tile(*v) || self.flexible.contains_key(v));
        let flagged_store = matches!(op.kind, OpKind::StoreFlagged { .. });
        match &mut op.kind {
            OpKind::Splat(_) | OpKind::Arange | OpKind::Broadcast(_) if result_is_tile => {
                self.flexible.insert(result.expect("result"), op.kind.clone());
                return;
            }
            // Computed only from flexible tiles: flexible too (cheap to recompute per use).
            OpKind::Reshape(_) | OpKind::Unary(..) | OpKind::Binary(..) | OpKind::Select(..) | OpKind::Cast(_)
                if result_is_tile && all_flexible =>
            {
                self.flexible.insert(result.expect("result"), op.kind.clone());
                return;
            }
            OpKind::Load { .. } => {
                let r = result.expect("load result");
                let l = match self.preferred.get(&r) {
                    Some(l) => l.clone(),
                    None => self.blocked(self.values[r].shape.as_ref().expect("tile")),
                };
                self.layouts.insert(r, l);
            }
            OpKind::Store { tensor, value, .. } | OpKind::StoreFlagged { tensor, value, .. } => {
                // Stores move 16-byte runs of a row: a tile held in shorter
                // runs along its last dimension (an `mma` accumulator, a
                // transpose) is stored from the blocked layout instead, the
                // conversion going through shared memory.
                // Unless the tensor is stored with vectors and a warp's store
                // still writes whole 32-byte sectors (an f32 accumulator:
                // 8 bytes a thread, 4 lanes along a row). Flagged lines
                // always take the blocked runs: whole 4-byte words of a
                // thread's (the check asks rows of a word or more).
                let mut l = self.natural(*value);
                let blocked = self.blocked(&l.shape);
                let last = l.shape.len() - 1;
                let sector = 32 / smem_bytes(self.values[*value].dtype);
                let whole_sectors = !flagged_store && self.vectorized.contains(tensor) && l.warp_run(last) >= sector;
                if l.contiguous_run(last) < blocked.contiguous_run(last) && !whole_sectors {
                    l = blocked;
                }
                *value = self.materialize(*value, &l, out, span);
            }
            OpKind::LoadFlagged { .. } => {
                let r = result.expect("load result");
                let l = self.blocked(self.values[r].shape.as_ref().expect("tile"));
                self.layouts.insert(r, l);
            }
            OpKind::Gather { index, .. } => {
                let r = result.expect("gather result");
                let l = self.blocked(self.values[r].shape.as_ref().expect("tile"));
                for i in index.iter_mut() {
                    *i = self.materialize(*i, &l, out, span);
                }
                self.layouts.insert(r, l);
            }
            OpKind::Scatter { index, value, .. } => {
                let l = self.natural(*value);
                *value = self.materialize(*value, &l, out, span);
                for i in index.iter_mut() {
                    *i = self.materialize(*i, &l, out, span);
                }
            }
            // The old values come back in the values' layout.
            OpKind::Atomic {
                index, value, compare, ..
            } => {
                let l = self.natural(*value);
                *value = self.materialize(*value, &l, out, span);
                if let Some(c) = compare {
                    *c = self.materialize(*c, &l, out, span);
                }
                for i in index.iter_mut() {
                    *i = self.materialize(*i, &l, out, span);
                }
                if let Some(r) = result {
                    self.layouts.insert(r, l);
                }
            }
            OpKind::Unary(_, _) | OpKind::Binary(..) | OpKind::Select(..) | OpKind::Cast(_) if result_is_tile => {
                let operands = op.kind.operands();
                let anchor = operands
                    .iter()
                    .filter(|v| self.is_tile(**v) && !self.flexible.contains_key(v))
                    .min_by_key(|v| self.provisional.contains(v))
                    .copied();
                let l = match anchor {
                    Some(a) => self.layouts[&a].clone(),
                    None => self.blocked(self.values[result.expect("result")].shape.as_ref().expect("tile")),
                };
                if let Some(a) = anchor
                    && !self.loops.is_empty()
                    && let Some(moved) = self.warps_off_broadcast_loads(&operands, &l)
                {
                    self.warps_off_broadcasts.push((a, moved));
                }
                let mut mapped = HashMap::new();
                for v in operands {
                    let m = self.materialize(v, &l, out, span);
                    mapped.insert(v, m);
                }
                op.kind.map_operands(|v| mapped[&v]);
                self.layouts.insert(result.expect("result"), l);
            }
            OpKind::Mma { a, b, acc } => {
                let r = result.expect("mma result");
                let (sa, sb) = (
                    self.values[*a].shape.clone().expect("tile"),
                    self.values[*b].shape.clone().expect("tile"),
                );
                let (m, k, n) = (sa[0], sa[1], sb[1]);
                let tf32 = self.values[*a].dtype == crate::dtype::DType::F32;
                let w = self.num_warps;
                // tf32 `wgmma` reads shared-memory operands K-major only: with
                // `a` K-major and `b` N-major (a row-major `[K, N]` tile) it
                // computes `b^T a^T`, `b` read into registers as its A operand.
                let k_major = |l: &Layout, k_dim: usize| l.contiguous_run(k_dim) > l.contiguous_run(1 - k_dim);
                let swapped = tf32 && k_major(&self.natural(*a), 1) && !k_major(&self.natural(*b), 0);
                let wgmma = match self.path {
                    MmaPath::Wgmma if swapped => Layout::wgmma_acc_swapped(m, n, w),
                    MmaPath::Wgmma => Layout::wgmma_acc(m, n, w),
                    MmaPath::Portable => None,
                };
                // With `wgmma` the operands stay in shared memory: their
                // fragment layouts only mark the conversions the pipeline
                // serves. Where rows stay within warps (attention), a 16-bit
                // `a` is read from registers in `wgmma`'s A fragment instead:
                // computed, or loaded before the loop.
                let register_a = (wgmma.is_some() && !swapped && !tf32 && self.split == WarpSplit::Rows)
                    .then(|| Layout::wgmma_a(m, k, n, w))
                    .flatten();
                let (la, lb, lc) = (
                    register_a.unwrap_or_else(|| Layout::mma_a(m, k, n, w, self.split, tf32)),
                    Layout::mma_b(k, n, m, w, self.split, tf32),
                    wgmma.unwrap_or_else(|| Layout::mma_acc(m, n, w, self.split)),
                );
                self.operand_layouts.extend([la.clone(), lb.clone()]);
                *a = self.materialize(*a, &la, out, span);
                *b = self.materialize(*b, &lb, out, span);
                *acc = self.materialize(*acc, &lc, out, span);
                self.layouts.insert(r, lc);
            }
            OpKind::Reduce { arg, axis, .. } => {
                let l = self.natural(*arg);
                if !self.loops.is_empty() && l.warp.iter().flatten().any(|b| b.0 == *axis) {
                    self.loop_cost += 1;
                }
                *arg = self.materialize(*arg, &l, out, span);
                let mut to = l.shape.clone();
                to[*axis] = 1;
                self.layouts.insert(result.expect("result"), l.project(&to));
            }
            OpKind::Scan { arg, axis, .. } | OpKind::Sort { arg, axis, .. } => {
                // Scans and sorts exchange along their axis across lanes and
                // warps alike; a `topk`, cut to its first positions, keeps
                // the axis within warps (`head` drops lane bits only).
                let r = result.expect("result");
                let len = self.values[r].shape.as_ref().expect("tile")[*axis];
                let mut l = self.natural(*arg);
                if len < l.shape[*axis] {
                    l = l.within_warps(*axis);
                }
                *arg = self.materialize(*arg, &l, out, span);
                self.layouts.insert(r, l.head(*axis, len));
            }
            // Each block stores its tile as it lies; the gathered tile is
            // read back in the default layout.
            OpKind::ClusterGather { arg, .. } => {
                let l = self.natural(*arg);
                *arg = self.materialize(*arg, &l, out, span);
                let r = result.expect("result");
                let to = self.values[r].shape.clone().expect("tile");
                self.layouts.insert(r, self.blocked(&to));
            }
            OpKind::Reshape(arg) => {
                let l = self.natural(*arg);
                *arg = self.materialize(*arg, &l, out, span);
                let r = result.expect("result");
                let to = self.values[r].shape.clone().expect("tile");
                self.layouts.insert(r, l.reshape(&to));
            }
            OpKind::Permute { arg, perm } => {
                let l = self.natural(*arg);
                *arg = self.materialize(*arg, &l, out, span);
                self.layouts.insert(result.expect("result"), l.permute(perm));
            }
            OpKind::For { .. } => {
                self.for_loop(op, out);
                return;
            }
            OpKind::If { .. } => {
                self.if_op(op, out);
                return;
            }
            _ => {}
        }
        out.push(op);
    }

    /// `l` with its warps moved off the dimensions along which one of
    /// `operands`, a broadcast of a tile that is not re-created per use (a
    /// load), is broadcast, where `l`'s warps split some and registers of
    /// another dimension can take their place without narrowing a thread's
    /// vector access; `None` otherwise.
    fn warps_off_broadcast_loads(&self, operands: &[ValueId], l: &Layout) -> Option<Layout> {
        let mut moved = l.clone();
        for v in operands {
            let Some(OpKind::Broadcast(a)) = self.flexible.get(v) else {
                continue;
            };
            if self.flexible.contains_key(a) {
                continue;
            }
            let from = self.values[*a].shape.as_ref()?;
            for (d, (&f, &n)) in from.iter().zip(&l.shape).enumerate() {
                if f == 1 && n > 1 {
                    moved = moved.within_warps(d);
                }
            }
        }
        let copies = |l: &Layout| l.warp.iter().filter(|b| b.is_none()).count();
        // A thread's run along the last dimension is its vector access.
        let last = l.shape.len() - 1;
        let vector = |l: &Layout| l.contiguous_run(last);
        (moved != *l && copies(&moved) <= copies(l) && vector(&moved) == vector(l)).then_some(moved)
    }

    fn for_loop(&mut self, op: Op, out: &mut Vec<Op>) {
        let span = op.span;
        let OpKind::For {
            lo,
            hi,
            var,
            inits,
            args,
            body,
            yields,
        } = op.kind
        else {
            unreachable!()
        };
        // Carried tiles start in their initial value's layout; when the body
        // produces another layout and the initial value could be made in any,
        // carry the body's layout instead.
        let mut carried: Vec<Option<Layout>> = inits
            .iter()
            .map(|&v| self.is_tile(v).then(|| self.natural(v)))
            .collect();
        let mut inside = defined_in(&body);
        inside.insert(var);
        inside.extend(&args);
        let mut attempt = 0;
        // Only the attempt kept counts.
        let cost_before = self.loop_cost;
        let (new_body, new_yields, hoisted) = loop {
            attempt += 1;
            self.loop_cost = cost_before;
            self.loops.push(LoopScope {
                inside: inside.clone(),
                first_new: self.values.len(),
                hoisted: Vec::new(),
            });
            for ((a, l), init) in args.iter().zip(&carried).zip(&inits) {
                if let Some(l) = l {
                    self.layouts.insert(*a, l.clone());
                }
                if attempt == 1 && l.is_some() && self.flexible.contains_key(init) {
                    self.provisional.insert(*a);
                } else {
                    self.provisional.remove(a);
                }
            }
            self.cache.push(HashMap::new());
            let mut b = self.block(body.clone());
            let mut changed = false;
            let mut ys = Vec::new();
            for (i, &y) in yields.iter().enumerate() {
                let Some(l) = carried[i].clone() else {
                    ys.push(y);
                    continue;
                };
                let yl = self.natural(y);
                if attempt < 3 && yl != l && self.flexible.contains_key(&inits[i]) && !self.flexible.contains_key(&y) {
                    carried[i] = Some(yl);
                    changed = true;
                }
                ys.push(self.materialize(y, &l, &mut b, span));
            }
            self.cache.pop();
            let scope = self.loops.pop().expect("loop scope");
            if !changed {
                break (b, ys, scope.hoisted);
            }
        };
        out.extend(hoisted);
        for a in &args {
            self.provisional.remove(a);
        }
        let new_inits: Vec<ValueId> = inits
            .iter()
            .zip(&carried)
            .map(|(&v, l)| match l {
                Some(l) => self.materialize(v, l, out, span),
                None => v,
            })
            .collect();
        for (r, l) in op.results.iter().zip(&carried) {
            if let Some(l) = l {
                self.layouts.insert(*r, l.clone());
            }
        }
        out.push(Op {
            kind: OpKind::For {
                lo,
                hi,
                var,
                inits: new_inits,
                args,
                body: new_body,
                yields: new_yields,
            },
            results: op.results,
            span,
        });
    }

    fn if_op(&mut self, op: Op, out: &mut Vec<Op>) {
        let span = op.span;
        let OpKind::If {
            cond,
            then_body,
            then_yields,
            else_body,
            else_yields,
        } = op.kind
        else {
            unreachable!()
        };
        let mut tb = self.scoped_block(then_body);
        let mut eb = self.scoped_block(else_body);
        let mut ty = Vec::new();
        let mut ey = Vec::new();
        for (i, (&t, &e)) in then_yields.iter().zip(&else_yields).enumerate() {
            if !self.is_tile(t) {
                ty.push(t);
                ey.push(e);
                continue;
            }
            // Prefer the layout of a branch that computed its value.
            let l = if !self.flexible.contains_key(&t) {
                self.natural(t)
            } else {
                self.natural(e)
            };
            for (y, body, ys) in [(t, &mut tb, &mut ty), (e, &mut eb, &mut ey)] {
                self.cache.push(HashMap::new());
                ys.push(self.materialize(y, &l, body, span));
                self.cache.pop();
            }
            self.layouts.insert(op.results[i], l);
        }
        out.push(Op {
            kind: OpKind::If {
                cond,
                then_body: tb,
                then_yields: ty,
                else_body: eb,
                else_yields: ey,
            },
            results: op.results,
            span,
        });
    }
}

/// The element type a tile is moved through shared memory as.
fn smem_bytes(dtype: DType) -> usize {
    match dtype {
        DType::F16 | DType::BF16 => 2,
        _ => 4,
    }
}
