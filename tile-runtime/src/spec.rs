//! What the compiler tells the runtime about a kernel: parameters, const
//! specializations and the PTX of every variant. Built as `static` data by
//! `#[tile::kernel]`; registered with `inventory` so tools can list every kernel.

use crate::select::{ArgFacts, Site, select};
use tile_spec::{DType, Variant};

/// A kernel parameter as the launcher checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamSpec {
    Tensor {
        name: &'static str,
        /// The element type as written: `f32`, or a type parameter such as `T`.
        elem: &'static str,
        rank: usize,
        mutable: bool,
    },
    Scalar {
        name: &'static str,
        dtype: DType,
    },
}

impl ParamSpec {
    pub fn name(&self) -> &'static str {
        match self {
            ParamSpec::Tensor { name, .. } | ParamSpec::Scalar { name, .. } => name,
        }
    }
}

/// Everything generated for one `#[tile::kernel]`.
#[derive(Debug)]
pub struct KernelSpec {
    pub name: &'static str,
    /// The Rust module path the kernel was declared in.
    pub module_path: &'static str,
    pub params: &'static [ParamSpec],
    /// Names of the type parameters.
    pub types: &'static [&'static str],
    /// Names of the const parameters.
    pub consts: &'static [&'static str],
    pub variants: &'static [Variant],
}

impl KernelSpec {
    /// The const parameters' values (in [`KernelSpec::consts`] order) of
    /// every specialization built for the element types `types`, each once,
    /// in the attribute's order: what a generated `launch_with` takes.
    pub fn specializations(&self, types: &[DType]) -> Vec<&'static [i64]> {
        let mut built: Vec<&'static [i64]> = Vec::new();
        for v in self.variants.iter().filter(|v| v.types == types) {
            if !built.contains(&&v.consts[..]) {
                built.push(&v.consts);
            }
        }
        built
    }

    /// Whether the specialization has a variant whose blocks run in pairs
    /// (see [`crate::Grid::in_pairs`]).
    pub fn pairs_blocks(&self, types: &[DType], consts: &[i64]) -> bool {
        self.variants
            .iter()
            .any(|v| v.types == types && v.consts == consts && v.cluster > 1)
    }

    /// The portable variant for these type and const values that the
    /// arguments' alignment allows (`aligned[p]`: parameter `p` is a tensor
    /// that allows 16-byte vectors) on a GPU that gives a block all the
    /// shared memory it asks for: [`select`] at [`Site::anywhere`].
    pub fn variant(&self, types: &[DType], consts: &[i64], aligned: &[bool]) -> Option<&'static Variant> {
        let facts = ArgFacts::aligned(aligned);
        select(self, types, consts, &facts, Site::anywhere())
            .ok()
            .map(|s| s.variant)
    }

    /// A readable name for a variant: `softmax[T=f32, BLOCK=1024, vectorized]`.
    pub fn describe(&self, v: &Variant) -> String {
        let mut parts: Vec<String> = self
            .types
            .iter()
            .zip(v.types.iter())
            .map(|(n, d)| format!("{n}={d}"))
            .collect();
        parts.extend(self.consts.iter().zip(v.consts.iter()).map(|(n, x)| format!("{n}={x}")));
        let tensors = self
            .params
            .iter()
            .filter(|p| matches!(p, ParamSpec::Tensor { .. }))
            .count();
        parts.push(match &v.vectorized[..] {
            [] => "scalar".to_string(),
            all if all.len() == tensors => "vectorized".to_string(),
            some => {
                let names: Vec<&str> = some.iter().map(|&p| self.params[p].name()).collect();
                format!("vectorized {}", names.join(" "))
            }
        });
        if let Some(t) = v.target {
            parts.push(t.name().to_string());
        }
        if v.cluster > 1 {
            parts.push("in pairs".to_string());
        }
        if v.persistent && v.target.is_none() {
            parts.push("two teams".to_string());
        }
        format!("{}[{}]", self.name, parts.join(", "))
    }
}

/// A registry entry: one per kernel in the program.
pub struct KernelRef(pub &'static KernelSpec);

inventory::collect!(KernelRef);

/// Every kernel linked into this program, sorted by module path and name.
pub fn registered_kernels() -> Vec<&'static KernelSpec> {
    let mut v: Vec<&'static KernelSpec> = inventory::iter::<KernelRef>.into_iter().map(|k| k.0).collect();
    v.sort_by_key(|k| (k.module_path, k.name));
    v
}
