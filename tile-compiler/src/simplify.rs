//! Clean-up on the IR before layouts are chosen: scalar constant folding,
//! constants moved out of loops and branches, common-subexpression
//! elimination of pure ops, ops that give their argument back (sums over
//! an axis of size 1, reshapes undone), and dead-code removal.

use crate::dtype::DType;
use crate::ir::*;
use std::collections::{HashMap, HashSet};

pub fn simplify(func: &mut Func) {
    let mut consts = HashMap::new();
    let mut body = std::mem::take(&mut func.body);
    fold_constants(func, &mut body, &mut consts);
    let mut hoisted = Vec::new();
    for op in &mut body {
        for b in op.kind.bodies_mut() {
            take_constants(b, &mut hoisted);
        }
    }
    body.splice(0..0, hoisted);
    let mut rename = HashMap::new();
    cse(func, &mut body, &mut HashMap::new(), &mut rename, &mut HashMap::new());
    func.body = body;
    remove_dead(func);
}

fn fold_constants(func: &mut Func, ops: &mut [Op], consts: &mut HashMap<ValueId, ConstVal>) {
    for op in ops.iter_mut() {
        for b in op.kind.bodies_mut() {
            fold_constants(func, b, consts);
        }
        let Some(&r) = op.results.first() else { continue };
        let dtype = func.values[r].dtype;
        if !func.values[r].is_scalar() {
            continue;
        }
        let folded = match &op.kind {
            OpKind::Const(c) => Some(*c),
            OpKind::Binary(bop, a, b) => match (consts.get(a), consts.get(b)) {
                (Some(x), Some(y)) => fold_binary(*bop, *x, *y, func.values[*a].dtype),
                _ => None,
            },
            OpKind::Cast(a) => consts.get(a).and_then(|c| fold_cast(*c, dtype)),
            _ => None,
        };
        if let Some(c) = folded {
            consts.insert(r, c);
            op.kind = OpKind::Const(c);
        }
    }
}

/// Moves the constants of `ops` and of the bodies nested in it into
/// `out`: a constant in a loop is the same at every iteration, so what
/// plans a loop (a pipelined tile's index, say) finds it defined before
/// the loop, as it would had the kernel written the same value there first.
fn take_constants(ops: &mut Vec<Op>, out: &mut Vec<Op>) {
    for op in ops.iter_mut() {
        for b in op.kind.bodies_mut() {
            take_constants(b, out);
        }
    }
    let (constants, rest): (Vec<Op>, Vec<Op>) = std::mem::take(ops)
        .into_iter()
        .partition(|op| matches!(op.kind, OpKind::Const(_)));
    *ops = rest;
    out.extend(constants);
}

fn wrap(v: i64, dtype: DType) -> i64 {
    match dtype {
        DType::I32 => v as i32 as i64,
        _ => v as u32 as i64,
    }
}

fn fold_binary(op: BinaryOp, a: ConstVal, b: ConstVal, dtype: DType) -> Option<ConstVal> {
    use ConstVal::*;
    Some(match (a, b) {
        (Int(x), Int(y)) => match op {
            BinaryOp::Add => Int(wrap(x + y, dtype)),
            BinaryOp::Sub => Int(wrap(x - y, dtype)),
            BinaryOp::Mul => Int(wrap(x.wrapping_mul(y), dtype)),
            BinaryOp::Div if y != 0 => Int(wrap(x / y, dtype)),
            BinaryOp::Rem if y != 0 => Int(wrap(x % y, dtype)),
            BinaryOp::Max => Int(x.max(y)),
            BinaryOp::Min => Int(x.min(y)),
            BinaryOp::Eq => Bool(x == y),
            BinaryOp::Ne => Bool(x != y),
            BinaryOp::Lt => Bool(x < y),
            BinaryOp::Le => Bool(x <= y),
            BinaryOp::Gt => Bool(x > y),
            BinaryOp::Ge => Bool(x >= y),
            _ => return None,
        },
        (Bool(x), Bool(y)) => match op {
            BinaryOp::And => Bool(x && y),
            BinaryOp::Or => Bool(x || y),
            BinaryOp::Xor | BinaryOp::Ne => Bool(x != y),
            BinaryOp::Eq => Bool(x == y),
            _ => return None,
        },
        _ => return None,
    })
}

fn fold_cast(c: ConstVal, to: DType) -> Option<ConstVal> {
    match (c, to) {
        (ConstVal::Int(i), DType::I32 | DType::U32) => Some(ConstVal::Int(wrap(i, to))),
        (ConstVal::Int(i), DType::F32) => Some(ConstVal::Float(i as f32 as f64)),
        _ => None,
    }
}

/// Replaces pure ops equal to an earlier, dominating op by that op's
/// result, and ops that give their argument back by the argument: a
/// reshape to the shape of what a chain of reshapes started from, and a
/// sum, max or min over an axis of size 1 (a tiling parameter of 1 writes
/// both, and the kernel is then the one written without them).
/// `reshaped` maps a reshape's result to the value its chain started from.
fn cse(
    func: &Func,
    ops: &mut Vec<Op>,
    seen: &mut HashMap<String, ValueId>,
    rename: &mut HashMap<ValueId, ValueId>,
    reshaped: &mut HashMap<ValueId, ValueId>,
) {
    let mut kept = Vec::with_capacity(ops.len());
    for mut op in ops.drain(..) {
        op.kind.map_operands(|v| *rename.get(&v).unwrap_or(&v));
        for b in op.kind.bodies_mut() {
            let mut inner = seen.clone();
            cse(func, b, &mut inner, rename, reshaped);
        }
        // Yields are read after the bodies were rewritten: rename them again.
        op.kind.map_operands(|v| *rename.get(&v).unwrap_or(&v));
        if let (OpKind::Reshape(a), &[r]) = (&mut op.kind, &op.results[..]) {
            *a = *reshaped.get(a).unwrap_or(a);
            if func.values[*a] == func.values[r] {
                rename.insert(r, *a);
                continue;
            }
            reshaped.insert(r, *a);
        }
        if let (
            OpKind::Reduce {
                op: ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min,
                arg,
                axis,
            },
            &[r],
        ) = (&op.kind, &op.results[..])
            && func.values[*arg] == func.values[r]
            && func.values[*arg].shape.as_ref().is_some_and(|s| s[*axis] == 1)
        {
            rename.insert(r, *arg);
            continue;
        }
        // Memory reads are not merged: a store between two equal loads changes what they read.
        let reads_memory = matches!(
            op.kind,
            OpKind::Load { .. } | OpKind::Get { .. } | OpKind::Gather { .. }
        );
        if op.kind.is_pure() && !reads_memory && op.results.len() == 1 {
            let r = op.results[0];
            let key = format!("{:?}|{}", op.kind, func.values[r]);
            if let Some(&prev) = seen.get(&key) {
                rename.insert(r, prev);
                continue;
            }
            seen.insert(key, r);
        }
        kept.push(op);
    }
    *ops = kept;
}

fn count_uses(ops: &[Op], used: &mut HashSet<ValueId>) {
    for op in ops {
        used.extend(op.kind.operands());
        for b in op.kind.bodies() {
            count_uses(b, used);
        }
    }
}

fn has_effects(ops: &[Op]) -> bool {
    ops.iter().any(|op| match &op.kind {
        k if k.has_effect() => true,
        k => k.bodies().iter().any(|b| has_effects(b)),
    })
}

fn sweep(ops: &mut Vec<Op>, used: &HashSet<ValueId>) -> bool {
    let mut changed = false;
    for op in ops.iter_mut() {
        for b in op.kind.bodies_mut() {
            changed |= sweep(b, used);
        }
    }
    // An atomic whose old values nobody reads gives none (it lowers to `red`).
    for op in ops.iter_mut() {
        if matches!(op.kind, OpKind::Atomic { .. })
            && !op.results.is_empty()
            && !op.results.iter().any(|r| used.contains(r))
        {
            op.results.clear();
            changed = true;
        }
    }
    let before = ops.len();
    ops.retain(|op| {
        let any_used = op.results.iter().any(|r| used.contains(r));
        match &op.kind {
            k if k.has_effect() => true,
            OpKind::For { body, .. } => any_used || has_effects(body),
            OpKind::If {
                then_body, else_body, ..
            } => any_used || has_effects(then_body) || has_effects(else_body),
            _ => any_used,
        }
    });
    changed || ops.len() != before
}

/// Removes ops whose results nobody reads and that write no memory.
pub fn remove_dead(func: &mut Func) {
    loop {
        let mut used = HashSet::new();
        count_uses(&func.body, &mut used);
        if !sweep(&mut func.body, &used) {
            break;
        }
    }
}
