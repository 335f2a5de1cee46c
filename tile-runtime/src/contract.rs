//! Shape contracts: the shapes a kernel declares for its tensors
//! (`&Tensor<T, { [M, N] }>`), checked at launch on either backend before
//! anything runs. Accesses past a tensor are masked, so a tensor of the
//! wrong size would otherwise give a wrong answer, not an error.

use crate::arg::{Arg, TensorView};
use crate::spec::{KernelSpec, ParamSpec, ShapeDim};
use crate::{Error, Result};

/// A symbol's size and where it was taken from: a tensor and its dimension.
struct Bound<'a> {
    name: &'a str,
    size: usize,
    tensor: &'a str,
    axis: usize,
}

/// Checks every tensor argument with a declared shape against it: a
/// literal or a const parameter is that size, and a symbol is the size of
/// the first dimension, in parameter order, declared with it alone.
/// `Error::ShapeContract` names the first dimension that differs. A
/// tensor of another rank than declared is left to the rank check, and
/// const values the kernel was not built for (or not yet chosen: none are
/// given) to the launch.
pub(crate) fn check<O: TensorView + ?Sized>(kernel: &KernelSpec, consts: &[i64], args: &[Arg<'_, O>]) -> Result<()> {
    let declared: Vec<(&str, &[ShapeDim], &[usize])> = kernel
        .params
        .iter()
        .zip(args)
        .filter_map(|(p, a)| match (p, a.tensor_view()) {
            (
                ParamSpec::Tensor {
                    name,
                    shape: Some(dims),
                    ..
                },
                Some(t),
            ) if t.rank() == dims.len() => Some((*name, *dims, t.shape())),
            _ => None,
        })
        .collect();
    let mut bound: Vec<Bound> = Vec::new();
    for &(tensor, dims, shape) in &declared {
        for (axis, (dim, &size)) in dims.iter().zip(shape).enumerate() {
            if let ShapeDim::Symbol { name, times: 1 } = *dim
                && !bound.iter().any(|b| b.name == name)
            {
                bound.push(Bound {
                    name,
                    size,
                    tensor,
                    axis,
                });
            }
        }
    }
    for &(tensor, dims, shape) in &declared {
        for (axis, (dim, &found)) in dims.iter().zip(shape).enumerate() {
            let (expected, because) = match *dim {
                ShapeDim::Any => continue,
                ShapeDim::Fixed(n) => (n, "a literal".to_string()),
                ShapeDim::Const { index, times } => match consts.get(index).and_then(|&v| usize::try_from(v).ok()) {
                    Some(v) => (
                        times * v,
                        format!("the const parameter `{}` is {v}", kernel.consts[index]),
                    ),
                    None => continue,
                },
                // Unbound only where the tensor that binds it has another
                // rank, which the rank check reports.
                ShapeDim::Symbol { name, times } => match bound.iter().find(|b| b.name == name) {
                    Some(b) => (
                        times * b.size,
                        format!("`{name}` is `{}`'s dimension {}", b.tensor, b.axis),
                    ),
                    None => continue,
                },
            };
            if found != expected {
                return Err(Error::ShapeContract {
                    kernel: kernel.name,
                    param: tensor,
                    declared: written(kernel, dims),
                    axis,
                    found,
                    expected,
                    because,
                });
            }
        }
    }
    Ok(())
}

/// A declared shape as the kernel writes it: `[B, T, 3 * C, _]`.
fn written(kernel: &KernelSpec, dims: &[ShapeDim]) -> String {
    let name = |n: &str, times: usize| match times {
        1 => n.to_string(),
        k => format!("{k} * {n}"),
    };
    let dims: Vec<String> = dims
        .iter()
        .map(|d| match *d {
            ShapeDim::Any => "_".to_string(),
            ShapeDim::Fixed(n) => n.to_string(),
            ShapeDim::Const { index, times } => name(kernel.consts[index], times),
            ShapeDim::Symbol { name: n, times } => name(n, times),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}
