//! The tile IR: SSA values with structured control flow.
//!
//! A function is a list of ops; `For` and `If` own nested op lists and pass
//! loop-carried values explicitly (block arguments in, yields out). Every
//! value has a [`Ty`]: a block-uniform scalar or a tile with a static shape.

use crate::dtype::{DType, Ty};
use proc_macro2::Span;
use std::fmt;

pub type ValueId = usize;

/// A tensor parameter as the IR sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorParam {
    pub name: String,
    pub dtype: DType,
    pub mutable: bool,
    pub rank: usize,
}

/// A kernel parameter in signature order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    Tensor(TensorParam),
    Scalar { name: String, dtype: DType },
}

impl Param {
    pub fn name(&self) -> &str {
        match self {
            Param::Tensor(t) => &t.name,
            Param::Scalar { name, .. } => name,
        }
    }
}

/// One compiled specialization of a kernel (const values substituted).
pub struct Func {
    pub name: String,
    pub params: Vec<Param>,
    pub values: Vec<Ty>,
    pub body: Vec<Op>,
    pub num_warps: u32,
}

#[derive(Clone, Debug)]
pub struct Op {
    pub kind: OpKind,
    pub results: Vec<ValueId>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConstVal {
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Not,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Tanh,
    Erf,
    /// GELU in the tanh form (GPT-2's `gelu_new`):
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Gelu,
    Abs,
    /// The same 32 bits read as the result's type (f32, i32, u32).
    Bitcast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Max,
    Min,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

/// How a tile atomic (`atomic_add`, `atomic_max`, `atomic_min`,
/// `atomic_exch`, `atomic_cas`) combines a value with the element it lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Add,
    Max,
    Min,
    /// The value replaces the element.
    Exch,
    /// The value replaces the element where the element equals `compare`, bit for bit.
    Cas,
}

/// The memory ordering a tile atomic asks for, named as Rust's
/// `std::sync::atomic::Ordering`, and kept for the whole block: `Release`
/// orders the block's accesses before the atomic ahead of it, `Acquire`
/// orders the block's accesses after it behind it, at GPU scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemOrder {
    Relaxed,
    Acquire,
    Release,
    AcqRel,
}

impl MemOrder {
    /// Whether the block's accesses before the atomic are ordered ahead of it.
    pub fn releases(self) -> bool {
        matches!(self, MemOrder::Release | MemOrder::AcqRel)
    }

    /// Whether the block's accesses after the atomic are ordered behind it.
    pub fn acquires(self) -> bool {
        matches!(self, MemOrder::Acquire | MemOrder::AcqRel)
    }
}

/// The combining operation of a scan (`cumsum`, `cumprod`, `cummax`, `cummin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanOp {
    Sum,
    Prod,
    Max,
    Min,
}

#[derive(Clone, Debug)]
pub enum OpKind {
    /// The value of scalar parameter `index` (in signature order).
    ScalarParam(usize),
    BlockId(usize),
    NumBlocks(usize),
    /// `tensor.shape(axis)`; `tensor` is a parameter index.
    TensorDim {
        tensor: usize,
        axis: usize,
    },
    Const(ConstVal),
    /// One element read by every thread: a block-uniform scalar (0 when out of bounds).
    Get {
        tensor: usize,
        index: Vec<ValueId>,
    },
    /// A scalar repeated over the result's tile shape.
    Splat(ValueId),
    /// `0, 1, ..` over a 1-D tile.
    Arange,
    /// A tile at tile-grid `index` (element offset = index * shape), `pad` where out of bounds.
    Load {
        tensor: usize,
        index: Vec<ValueId>,
        pad: ValueId,
    },
    /// Writes the in-bounds elements of `value` at tile-grid `index`.
    Store {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
    },
    /// Asks L2 for the tile of `shape` at tile-grid `index`: a hint, which
    /// reads nothing into registers and writes nothing.
    Prefetch {
        tensor: usize,
        index: Vec<ValueId>,
        shape: Vec<usize>,
    },
    /// Element `e` of the result is `tensor[index[0][e], index[1][e], ..]`
    /// (`pad` where out of bounds); index tiles have the result's shape.
    Gather {
        tensor: usize,
        index: Vec<ValueId>,
        pad: ValueId,
    },
    /// Adds the scalar `value` to one element, once for the block, and
    /// gives the element's value before: a block-uniform scalar (0, and
    /// nothing added, out of bounds). Acquire-release at GPU scope, for the
    /// whole block: its accesses before are done before the add, and its
    /// accesses after see what blocks did before their own add.
    FetchAdd {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
    },
    /// Sets one element to the scalar `value`, once for the block, after
    /// the block's stores before it: a release at system scope, seen by
    /// other GPUs (peer memory) and the host. Nothing out of bounds.
    Signal {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
    },
    /// The block waits until one element has reached the scalar `value`
    /// (`element - value`, as i32, is not negative: counters may wrap),
    /// then acquires at system scope: it sees what the signaller stored
    /// before signalling. Nothing out of bounds.
    Wait {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
    },
    /// Writes the in-bounds elements of `value` at tile-grid `index` of a
    /// flagged tensor (NCCL's low-latency protocol): each 4 bytes of data
    /// followed by the scalar `flag` (u32), two such pairs a 16-byte line,
    /// each line one store, so a reader that sees a pair's flag has its
    /// data. Indices and bounds count the data's elements: the tensor's
    /// last dimension holds twice as many, flags included.
    StoreFlagged {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
        flag: ValueId,
    },
    /// The tile of the result's shape at tile-grid `index` of a flagged
    /// tensor ([`OpKind::StoreFlagged`]), each thread reading its lines
    /// again until every pair's flag equals `flag`: the data a
    /// `StoreFlagged` of that flag wrote, from this GPU or another.
    /// Out-of-bounds elements read 0 and are not waited for.
    LoadFlagged {
        tensor: usize,
        index: Vec<ValueId>,
        flag: ValueId,
    },
    /// Writes `value[e]` to `tensor[index[0][e], ..]` where in bounds.
    Scatter {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
    },
    /// Combines `value[e]` with `tensor[index[0][e], ..]` by `op`,
    /// atomically, where in bounds (`compare` is `atomic_cas`'s expected
    /// tile). The result, when the op has one, is the elements' values
    /// before (`value`'s dtype and shape; 0 out of bounds); an atomic whose
    /// old values nobody reads has none.
    Atomic {
        tensor: usize,
        index: Vec<ValueId>,
        value: ValueId,
        compare: Option<ValueId>,
        op: AtomicOp,
        order: MemOrder,
    },
    Unary(UnaryOp, ValueId),
    Binary(BinaryOp, ValueId, ValueId),
    Select(ValueId, ValueId, ValueId),
    /// Conversion to the result's dtype.
    Cast(ValueId),
    /// Reduction along `axis`; the result keeps the axis with size 1.
    Reduce {
        op: ReduceOp,
        arg: ValueId,
        axis: usize,
    },
    /// Inclusive scan along `axis` (from the last element back where
    /// `reverse`); the result has the argument's shape.
    Scan {
        op: ScanOp,
        arg: ValueId,
        axis: usize,
        reverse: bool,
    },
    /// Sorts along `axis`, ascending or `descending`: the values, or with
    /// `indices` their positions along the axis (i32). Ties keep the lower
    /// position first; NaN sorts as the largest value. The result keeps
    /// the first `keep` positions of the axis (all of them for `sort`, `k`
    /// for `topk`).
    Sort {
        arg: ValueId,
        axis: usize,
        descending: bool,
        indices: bool,
        keep: usize,
    },
    /// The `arg` tiles of a cluster's `blocks` blocks (consecutive along
    /// x), stacked along axis 0 in block order, in the cluster's first
    /// block; zeros in the others. Every block of the cluster reaches it
    /// once (it is a top-level op): each stores its tile into the first
    /// block's shared memory, then the cluster meets at a barrier.
    ClusterGather {
        arg: ValueId,
        blocks: usize,
    },
    /// Same elements in row-major order, another shape.
    Reshape(ValueId),
    /// Size-1 dimensions repeated to the result's shape (same rank).
    Broadcast(ValueId),
    Permute {
        arg: ValueId,
        perm: Vec<usize>,
    },
    /// Same tile, another layout; inserted by the layout pass.
    Convert(ValueId),
    /// `acc + a @ b` on the tensor cores: a `[M, K]`, b `[K, N]` (f16, bf16,
    /// or f32 through tf32), acc and result `[M, N]` f32.
    Mma {
        a: ValueId,
        b: ValueId,
        acc: ValueId,
    },
    /// `for var in lo..hi`, with loop-carried `args` initialised from `inits`
    /// and replaced by `yields` after each iteration; results are the final values.
    For {
        lo: ValueId,
        hi: ValueId,
        var: ValueId,
        inits: Vec<ValueId>,
        args: Vec<ValueId>,
        body: Vec<Op>,
        yields: Vec<ValueId>,
    },
    /// A block-uniform branch; results are the yields of the branch taken.
    If {
        cond: ValueId,
        then_body: Vec<Op>,
        then_yields: Vec<ValueId>,
        else_body: Vec<Op>,
        else_yields: Vec<ValueId>,
    },
}

impl OpKind {
    /// Values this op reads directly (nested bodies not included, yields included).
    pub fn operands(&self) -> Vec<ValueId> {
        use OpKind::*;
        match self {
            ScalarParam(_) | BlockId(_) | NumBlocks(_) | TensorDim { .. } | Const(_) | Arange => vec![],
            Get { index, .. } | Prefetch { index, .. } => index.clone(),
            Splat(a) | Unary(_, a) | Cast(a) | Reshape(a) | Broadcast(a) | Convert(a) => vec![*a],
            Permute { arg, .. }
            | Reduce { arg, .. }
            | Scan { arg, .. }
            | Sort { arg, .. }
            | ClusterGather { arg, .. } => vec![*arg],
            Load { index, pad, .. } | Gather { index, pad, .. } | LoadFlagged { index, flag: pad, .. } => {
                index.iter().copied().chain([*pad]).collect()
            }
            StoreFlagged { index, value, flag, .. } => index.iter().copied().chain([*value, *flag]).collect(),
            Store { index, value, .. }
            | Scatter { index, value, .. }
            | FetchAdd { index, value, .. }
            | Signal { index, value, .. }
            | Wait { index, value, .. } => index.iter().copied().chain([*value]).collect(),
            Atomic {
                index, value, compare, ..
            } => index.iter().copied().chain([*value]).chain(*compare).collect(),
            Binary(_, a, b) => vec![*a, *b],
            Select(c, a, b) | Mma { a: c, b: a, acc: b } => vec![*c, *a, *b],
            For {
                lo, hi, inits, yields, ..
            } => [*lo, *hi]
                .into_iter()
                .chain(inits.iter().copied())
                .chain(yields.iter().copied())
                .collect(),
            If {
                cond,
                then_yields,
                else_yields,
                ..
            } => std::iter::once(*cond)
                .chain(then_yields.iter().copied())
                .chain(else_yields.iter().copied())
                .collect(),
        }
    }

    /// Rewrites every operand (as listed by [`operands`](Self::operands)).
    pub fn map_operands(&mut self, mut f: impl FnMut(ValueId) -> ValueId) {
        use OpKind::*;
        match self {
            ScalarParam(_) | BlockId(_) | NumBlocks(_) | TensorDim { .. } | Const(_) | Arange => {}
            Get { index, .. } | Prefetch { index, .. } => index.iter_mut().for_each(|v| *v = f(*v)),
            Splat(a) | Unary(_, a) | Cast(a) | Reshape(a) | Broadcast(a) | Convert(a) => *a = f(*a),
            Permute { arg, .. }
            | Reduce { arg, .. }
            | Scan { arg, .. }
            | Sort { arg, .. }
            | ClusterGather { arg, .. } => *arg = f(*arg),
            Load { index, pad, .. } | Gather { index, pad, .. } | LoadFlagged { index, flag: pad, .. } => {
                index.iter_mut().for_each(|v| *v = f(*v));
                *pad = f(*pad);
            }
            StoreFlagged { index, value, flag, .. } => {
                index.iter_mut().for_each(|v| *v = f(*v));
                *value = f(*value);
                *flag = f(*flag);
            }
            Store { index, value, .. }
            | Scatter { index, value, .. }
            | FetchAdd { index, value, .. }
            | Signal { index, value, .. }
            | Wait { index, value, .. } => {
                index.iter_mut().for_each(|v| *v = f(*v));
                *value = f(*value);
            }
            Atomic {
                index, value, compare, ..
            } => {
                index.iter_mut().for_each(|v| *v = f(*v));
                *value = f(*value);
                if let Some(c) = compare {
                    *c = f(*c);
                }
            }
            Binary(_, a, b) => {
                *a = f(*a);
                *b = f(*b);
            }
            Select(c, a, b) | Mma { a: c, b: a, acc: b } => {
                *c = f(*c);
                *a = f(*a);
                *b = f(*b);
            }
            For {
                lo, hi, inits, yields, ..
            } => {
                *lo = f(*lo);
                *hi = f(*hi);
                inits.iter_mut().for_each(|v| *v = f(*v));
                yields.iter_mut().for_each(|v| *v = f(*v));
            }
            If {
                cond,
                then_yields,
                else_yields,
                ..
            } => {
                *cond = f(*cond);
                then_yields.iter_mut().for_each(|v| *v = f(*v));
                else_yields.iter_mut().for_each(|v| *v = f(*v));
            }
        }
    }

    /// True when the op acts beyond its results: it writes memory
    /// (`store`, `scatter`, atomics, `signal`, `store_flagged`), asks L2
    /// for it (`prefetch`), waits for it (`wait`, `load_flagged`) or meets
    /// the cluster's other blocks (`cluster_gather`). Such ops stay though
    /// nothing reads them, in their place.
    pub fn has_effect(&self) -> bool {
        matches!(
            self,
            OpKind::Store { .. }
                | OpKind::Scatter { .. }
                | OpKind::Atomic { .. }
                | OpKind::Prefetch { .. }
                | OpKind::FetchAdd { .. }
                | OpKind::Signal { .. }
                | OpKind::Wait { .. }
                | OpKind::StoreFlagged { .. }
                | OpKind::LoadFlagged { .. }
                | OpKind::ClusterGather { .. }
        )
    }

    /// True when the op only computes its results: no effect, no control
    /// flow. Such ops may be removed when unused, or shared when equal.
    pub fn is_pure(&self) -> bool {
        !self.has_effect() && !matches!(self, OpKind::For { .. } | OpKind::If { .. })
    }

    /// The nested op lists of control flow.
    pub fn bodies_mut(&mut self) -> Vec<&mut Vec<Op>> {
        match self {
            OpKind::For { body, .. } => vec![body],
            OpKind::If {
                then_body, else_body, ..
            } => vec![then_body, else_body],
            _ => vec![],
        }
    }

    pub fn bodies(&self) -> Vec<&Vec<Op>> {
        match self {
            OpKind::For { body, .. } => vec![body],
            OpKind::If {
                then_body, else_body, ..
            } => vec![then_body, else_body],
            _ => vec![],
        }
    }
}

/// The most blocks of a cluster `cluster_gather` gathers across: the
/// portable cluster size, which every GPU from sm_90 runs.
pub const MAX_CLUSTER_BLOCKS: usize = 8;

impl Func {
    pub fn ty(&self, v: ValueId) -> &Ty {
        &self.values[v]
    }

    /// The indices of the tensor parameters among all parameters.
    pub fn tensor_params(&self) -> Vec<usize> {
        (0..self.params.len())
            .filter(|&i| matches!(self.params[i], Param::Tensor(_)))
            .collect()
    }

    pub fn tensor(&self, index: usize) -> &TensorParam {
        match &self.params[index] {
            Param::Tensor(t) => t,
            Param::Scalar { .. } => panic!("parameter {index} is not a tensor"),
        }
    }

    /// The blocks of the clusters the kernel gathers across
    /// (`cluster_gather`, consecutive along x), or 1.
    pub fn cluster_blocks(&self) -> usize {
        self.body
            .iter()
            .find_map(|op| match op.kind {
                OpKind::ClusterGather { blocks, .. } => Some(blocks),
                _ => None,
            })
            .unwrap_or(1)
    }

    /// Every tile shape in the function, for resource decisions.
    pub fn tile_shapes(&self) -> impl Iterator<Item = &Vec<usize>> {
        self.values.iter().filter_map(|t| t.shape.as_ref())
    }
}

fn write_ops(f: &mut fmt::Formatter<'_>, func: &Func, ops: &[Op], indent: usize) -> fmt::Result {
    let pad = "  ".repeat(indent);
    for op in ops {
        write!(f, "{pad}")?;
        if !op.results.is_empty() {
            let rs: Vec<String> = op
                .results
                .iter()
                .map(|r| format!("%{r}: {}", func.values[*r]))
                .collect();
            write!(f, "{} = ", rs.join(", "))?;
        }
        match &op.kind {
            OpKind::For {
                lo,
                hi,
                var,
                inits,
                args,
                body,
                yields,
            } => {
                writeln!(f, "for %{var} in %{lo}..%{hi} carry {args:?} = {inits:?} {{")?;
                write_ops(f, func, body, indent + 1)?;
                writeln!(f, "{pad}  yield {yields:?}\n{pad}}}")?;
            }
            OpKind::If {
                cond,
                then_body,
                then_yields,
                else_body,
                else_yields,
            } => {
                writeln!(f, "if %{cond} {{")?;
                write_ops(f, func, then_body, indent + 1)?;
                writeln!(f, "{pad}  yield {then_yields:?}\n{pad}}} else {{")?;
                write_ops(f, func, else_body, indent + 1)?;
                writeln!(f, "{pad}  yield {else_yields:?}\n{pad}}}")?;
            }
            other => writeln!(f, "{other:?}")?,
        }
    }
    Ok(())
}

impl fmt::Display for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {} (num_warps = {})", self.name, self.num_warps)?;
        write_ops(f, self, &self.body, 1)
    }
}

/// Every op of `ops`, nested bodies included, in program order.
pub fn all_ops(ops: &[Op]) -> Vec<&Op> {
    let mut out = Vec::new();
    for op in ops {
        out.push(op);
        for b in op.kind.bodies() {
            out.extend(all_ops(b));
        }
    }
    out
}

/// Values defined inside `ops` (nested bodies, loop variables and carried
/// arguments included).
pub fn defined_in(ops: &[Op]) -> std::collections::HashSet<ValueId> {
    fn walk(ops: &[Op], out: &mut std::collections::HashSet<ValueId>) {
        for op in ops {
            out.extend(&op.results);
            if let OpKind::For { var, args, .. } = &op.kind {
                out.insert(*var);
                out.extend(args);
            }
            for b in op.kind.bodies() {
                walk(b, out);
            }
        }
    }
    let mut out = std::collections::HashSet::new();
    walk(ops, &mut out);
    out
}
