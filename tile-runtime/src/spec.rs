//! What the compiler tells the runtime about a kernel: parameters, const
//! specializations and the PTX of every variant. Built as `static` data by
//! `#[tile::kernel]`; registered with `inventory` so tools can list every kernel.

use crate::DType;

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

/// A tensor map a variant takes: a box of one tensor parameter, copied by
/// TMA into shared memory with a swizzle.
#[derive(Debug)]
pub struct TensorMapSpec {
    /// Index of the tensor among the kernel's parameters.
    pub param: usize,
    /// The box, innermost dimension first, in elements.
    pub box_dims: &'static [u32],
    /// Shared-memory swizzle span in bytes: 32, 64 or 128.
    pub swizzle_bytes: u32,
}

/// One compiled PTX entry.
#[derive(Debug)]
pub struct VariantSpec {
    /// Element types of the kernel's type parameters, in declaration order.
    pub types: &'static [DType],
    /// Values of the kernel's const parameters, in declaration order.
    pub consts: &'static [i64],
    /// Uses 16-byte vector accesses: valid only when every tensor argument is
    /// 16-byte aligned with a contiguous last dimension whose length and the
    /// other strides are multiples of 16 bytes (the launcher checks).
    pub vectorized: bool,
    /// The `.entry` name.
    pub entry: &'static str,
    /// Threads per block.
    pub threads: u32,
    /// Static shared memory the entry declares.
    pub shared_bytes: usize,
    /// Dynamic shared memory to launch with (pipeline stages).
    pub dynamic_shared_bytes: usize,
    /// The only target this variant runs on (`wgmma` needs sm_90a), or
    /// `None` for portable PTX.
    pub target: Option<Target>,
    /// Tensor maps (TMA copies) the launcher encodes and passes after the
    /// regular parameters, in order.
    pub tensor_maps: &'static [TensorMapSpec],
    /// Warp-specialized on a persistent grid: the launcher starts at most
    /// as many blocks along x as fit on the GPU at once and passes the
    /// requested count last; each block loops over its share.
    pub persistent: bool,
    /// The `.entry` text, without the module header (see [`Target::module`]).
    pub ptx: &'static str,
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
    pub variants: &'static [VariantSpec],
}

impl KernelSpec {
    /// The portable variant for these type and const values, vectorized or not.
    pub fn variant(&self, types: &[DType], consts: &[i64], vectorized: bool) -> Option<&'static VariantSpec> {
        self.variants
            .iter()
            .find(|v| v.types == types && v.consts == consts && v.vectorized == vectorized && v.target.is_none())
    }

    /// The variant to run on `target`: one made for that target where there
    /// is one (sm_90a: `wgmma` + TMA), else the portable one.
    pub fn variant_for(
        &self,
        types: &[DType],
        consts: &[i64],
        vectorized: bool,
        target: Target,
    ) -> Option<&'static VariantSpec> {
        let matching = || {
            self.variants
                .iter()
                .filter(move |v| v.types == types && v.consts == consts && v.vectorized == vectorized)
        };
        matching()
            .find(|v| v.target == Some(target))
            .or_else(|| matching().find(|v| v.target.is_none()))
    }

    /// A readable name for a variant: `softmax[T=f32, BLOCK=1024, vectorized]`.
    pub fn describe(&self, v: &VariantSpec) -> String {
        let mut parts: Vec<String> = self
            .types
            .iter()
            .zip(v.types)
            .map(|(n, d)| format!("{n}={d}"))
            .collect();
        parts.extend(self.consts.iter().zip(v.consts).map(|(n, x)| format!("{n}={x}")));
        parts.push(if v.vectorized { "vectorized" } else { "scalar" }.to_string());
        if let Some(t) = v.target {
            parts.push(t.name().to_string());
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

/// A PTX target: the portable sm_90 baseline (JIT-compiled forward by the
/// driver on sm_100 and sm_120) and the architecture-specific targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Sm90,
    Sm90a,
    Sm100a,
    Sm120a,
}

impl Target {
    pub const ALL: [Target; 4] = [Target::Sm90, Target::Sm90a, Target::Sm100a, Target::Sm120a];

    pub fn name(self) -> &'static str {
        match self {
            Target::Sm90 => "sm_90",
            Target::Sm90a => "sm_90a",
            Target::Sm100a => "sm_100a",
            Target::Sm120a => "sm_120a",
        }
    }

    /// The lowest PTX ISA version that knows the target.
    pub fn ptx_version(self) -> &'static str {
        match self {
            Target::Sm90 => "7.8",
            Target::Sm90a => "8.0",
            Target::Sm100a => "8.6",
            Target::Sm120a => "8.7",
        }
    }

    /// A complete PTX module holding `variant` for this target.
    pub fn module(self, variant: &VariantSpec) -> String {
        format!(
            "//\n// Generated by tile (#[tile::kernel]) for {}\n//\n.version {}\n.target {}\n.address_size 64\n\n{}",
            self.name(),
            self.ptx_version(),
            self.name(),
            variant.ptx
        )
    }
}
