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
    /// The tensor's rows (second-innermost dimension) are split into
    /// (k / 4 % 2, k % 4, k / 8), innermost first, so that a box stores
    /// them interleaved; the rows must be a multiple of 8.
    pub interleaved_rows: bool,
    /// The copy rounds f32 elements to tf32 (to nearest), for the tensor
    /// cores: `CU_TENSOR_MAP_DATA_TYPE_TFLOAT32`.
    pub tf32: bool,
}

/// One compiled PTX entry.
#[derive(Debug)]
pub struct VariantSpec {
    /// Element types of the kernel's type parameters, in declaration order.
    pub types: &'static [DType],
    /// Values of the kernel's const parameters, in declaration order.
    pub consts: &'static [i64],
    /// The tensor parameters (indices among all parameters) this variant
    /// accesses with 16-byte vectors: valid only when each of those
    /// arguments is 16-byte aligned with a contiguous last dimension whose
    /// length and the other strides are multiples of 16 bytes (the
    /// launcher checks). All tensors, none, or those an `mma` kernel's
    /// pipelines copy (`cp.async`, TMA).
    pub vectorized: &'static [usize],
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
    /// The tensor parameters read only by TMA copies (among `vectorized`):
    /// their arguments need a 16-byte aligned address and strides that are
    /// multiples of 16 bytes, but no particular shape, and a read-only one
    /// whose rows are not 16 bytes apart may be copied into rows that are
    /// (see `launch`).
    pub tma_only: &'static [usize],
    /// On a persistent grid (warp-specialized on sm_90a; portable: two
    /// teams per block): the launcher starts at most as many blocks along x
    /// as fit on the GPU at once and passes the requested count last; each
    /// block loops over its share.
    pub persistent: bool,
    /// Blocks per cluster along x (1: none): the entry requires clusters of
    /// that many blocks (`.reqnctapercluster`), so the launcher starts a
    /// multiple of it, and no more clusters than fit on the GPU at once.
    pub cluster: u32,
    /// The `.entry` text, without the module header (see [`Target::module`]).
    pub ptx: &'static str,
}

impl VariantSpec {
    /// Shared memory a block takes, static and dynamic.
    pub fn block_shared_bytes(&self) -> usize {
        self.shared_bytes + self.dynamic_shared_bytes
    }
}

/// What a launch may run: the device's target, whether the grid asks for
/// blocks in pairs (see [`crate::Grid::in_pairs`]), and the shared memory
/// the device gives one block (a variant that needs more is passed over).
#[derive(Clone, Copy, Debug)]
pub struct Site {
    pub target: Target,
    pub pairs: bool,
    pub block_shared_bytes: usize,
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
    /// The const parameters' values (in [`KernelSpec::consts`] order) of
    /// every specialization built for the element types `types`, each once,
    /// in the attribute's order: what a generated `launch_with` takes.
    pub fn specializations(&self, types: &[DType]) -> Vec<&'static [i64]> {
        let mut built: Vec<&'static [i64]> = Vec::new();
        for v in self.variants.iter().filter(|v| v.types == types) {
            if !built.contains(&v.consts) {
                built.push(v.consts);
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

    /// This specialization's variants made for `target` (`None`: portable)
    /// that `site` can run: paired ones only where it asks for pairs, and
    /// none that needs more shared memory than a block gets there.
    fn runnable(
        &self,
        types: &[DType],
        consts: &[i64],
        target: Option<Target>,
        site: Site,
    ) -> impl Iterator<Item = &'static VariantSpec> {
        self.variants
            .iter()
            .filter(move |v| v.types == types && v.consts == consts && v.target == target)
            .filter(move |v| v.cluster == 1 || site.pairs)
            .filter(move |v| v.block_shared_bytes() <= site.block_shared_bytes)
    }

    /// The best variant made for `target` (`None`: portable) that `site`
    /// can run for these type and const values whose vector-accessed
    /// tensors are all among those `aligned` allows (indexed by parameter):
    /// the one with the most; of those, one whose blocks run in pairs
    /// (clusters), if any; then a persistent one (portable: two teams per
    /// block), if any.
    fn best(
        &self,
        types: &[DType],
        consts: &[i64],
        aligned: &[bool],
        (target, site): (Option<Target>, Site),
    ) -> Option<&'static VariantSpec> {
        self.runnable(types, consts, target, site)
            .filter(|v| v.vectorized.iter().all(|&p| aligned.get(p) == Some(&true)))
            .max_by_key(|v| (v.vectorized.len(), v.cluster, v.persistent))
    }

    /// The portable variant for these type and const values that the
    /// arguments' alignment allows on a GPU that gives a block all the
    /// shared memory it asks for (see [`KernelSpec::variant_for`]).
    pub fn variant(&self, types: &[DType], consts: &[i64], aligned: &[bool]) -> Option<&'static VariantSpec> {
        let anywhere = Site {
            target: Target::Sm90,
            pairs: false,
            block_shared_bytes: usize::MAX,
        };
        self.best(types, consts, aligned, (None, anywhere))
    }

    /// The variant to run at `site`: one made for its target where there
    /// is one (sm_90a: `wgmma` + TMA), else a portable one; of those, the
    /// one with the most tensors accessed with vectors among those whose
    /// arguments allow it (`aligned[p]` for parameter `p`), then one whose
    /// blocks run in pairs if the site asks for them (see
    /// [`crate::Grid::in_pairs`]), then a persistent one; never one that
    /// needs more shared memory than a block gets at `site`.
    pub fn variant_for(
        &self,
        types: &[DType],
        consts: &[i64],
        aligned: &[bool],
        site: Site,
    ) -> Option<&'static VariantSpec> {
        self.best(types, consts, aligned, (Some(site.target), site))
            .or_else(|| self.best(types, consts, aligned, (None, site)))
    }

    /// A variant made for the site's target that reads through TMA alone
    /// some of the tensors `copyable` marks (read-only, rows evenly spaced,
    /// but not 16 bytes apart), which the launcher then copies into rows
    /// that are (see `repitch`): of those whose other vector-accessed
    /// tensors `aligned` allows, the one with the most (and as
    /// [`KernelSpec::variant_for`] for the rest). With the parameters to copy.
    pub fn variant_copying(
        &self,
        types: &[DType],
        consts: &[i64],
        (aligned, copyable): (&[bool], &[bool]),
        site: Site,
    ) -> Option<(&'static VariantSpec, Vec<usize>)> {
        let copied = |v: &VariantSpec| -> Option<Vec<usize>> {
            let mut copies = Vec::new();
            for &p in v.vectorized {
                match (aligned.get(p), copyable.get(p)) {
                    (Some(true), _) => {}
                    (_, Some(true)) if v.tma_only.contains(&p) => copies.push(p),
                    _ => return None,
                }
            }
            (!copies.is_empty()).then_some(copies)
        };
        self.runnable(types, consts, Some(site.target), site)
            .filter_map(|v| Some((v, copied(v)?)))
            .max_by_key(|(v, _)| (v.vectorized.len(), v.cluster, v.persistent))
    }

    /// For a portable variant that runs two teams per block, the plain
    /// variant it was made from: same types, consts and vector accesses,
    /// one team per block.
    pub fn single_team(&self, v: &VariantSpec) -> Option<&'static VariantSpec> {
        if v.target.is_some() || !v.persistent {
            return None;
        }
        self.variants.iter().find(|p| {
            p.types == v.types
                && p.consts == v.consts
                && p.target.is_none()
                && p.vectorized == v.vectorized
                && !p.persistent
        })
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
        let tensors = self
            .params
            .iter()
            .filter(|p| matches!(p, ParamSpec::Tensor { .. }))
            .count();
        parts.push(match v.vectorized {
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

#[cfg(test)]
mod tests {
    use super::*;

    const fn variant(entry: &'static str, vectorized: &'static [usize], target: Option<Target>) -> VariantSpec {
        paired(entry, vectorized, target, 1)
    }

    const fn paired(
        entry: &'static str,
        vectorized: &'static [usize],
        target: Option<Target>,
        cluster: u32,
    ) -> VariantSpec {
        // The `wgmma` variants read the operands (parameters 0 and 1) by TMA.
        let tma_only: &'static [usize] = match target {
            Some(_) => &[0, 1],
            None => &[],
        };
        VariantSpec {
            types: &[DType::BF16],
            consts: &[],
            vectorized,
            entry,
            threads: 128,
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            target,
            tensor_maps: &[],
            tma_only,
            persistent: false,
            cluster,
            ptx: "",
        }
    }

    /// A portable variant whose blocks need `kib` KiB of shared memory,
    /// and with `twins` one running two of them as the teams of one
    /// persistent block.
    const fn portable(entry: &'static str, vectorized: &'static [usize], kib: usize, twins: bool) -> VariantSpec {
        let plain = variant(entry, vectorized, None);
        let teams = if twins { 2 } else { 1 };
        VariantSpec {
            threads: teams * 128,
            dynamic_shared_bytes: teams as usize * kib * 1024,
            persistent: twins,
            ..plain
        }
    }

    static MATMUL: KernelSpec = KernelSpec {
        name: "matmul",
        module_path: "tests",
        params: &[
            ParamSpec::Tensor {
                name: "a",
                elem: "T",
                rank: 2,
                mutable: false,
            },
            ParamSpec::Tensor {
                name: "b",
                elem: "T",
                rank: 2,
                mutable: false,
            },
            ParamSpec::Scalar {
                name: "alpha",
                dtype: DType::F32,
            },
            ParamSpec::Tensor {
                name: "c",
                elem: "T",
                rank: 2,
                mutable: true,
            },
        ],
        types: &["T"],
        consts: &[],
        variants: &[
            portable("v", &[0, 1, 3], 96, false),
            portable("vs", &[0, 1], 96, false),
            portable("s", &[], 64, false),
            variant("wgmma", &[0, 1, 3], Some(Target::Sm90a)),
            variant("wgmma_s", &[0, 1], Some(Target::Sm90a)),
            paired("wgmma_pairs", &[0, 1, 3], Some(Target::Sm90a), 2),
            portable("v_twins", &[0, 1, 3], 96, true),
            portable("s_twins", &[], 64, true),
        ],
    };

    #[test]
    fn operands_read_through_tma_alone_may_be_copied_into_aligned_rows() {
        let copying = |aligned: [bool; 4], copyable: [bool; 4], target| {
            MATMUL
                .variant_copying(&[DType::BF16], &[], (&aligned, &copyable), site(target, false))
                .map(|(v, copies)| (v.entry, copies))
        };
        // An LM head in `matmul` form: b's rows, and c's, not 16 bytes apart.
        let lm_head = copying([true, false, false, false], [true, true, false, false], Target::Sm90a);
        assert_eq!(lm_head, Some(("wgmma_s", vec![1])));
        // Both operands copied; with an aligned output, the full variant.
        let both = copying([false, false, false, true], [true, true, false, false], Target::Sm90a);
        assert_eq!(both, Some(("wgmma", vec![0, 1])));
        // Nothing to copy, or only portable variants (which read with vectors, not TMA).
        assert_eq!(
            copying([true, true, false, true], [true, true, false, false], Target::Sm90a),
            None
        );
        assert_eq!(
            copying([true, false, false, false], [true, true, false, false], Target::Sm90),
            None
        );
        // An output is never copied.
        assert_eq!(
            copying([true, true, false, false], [true, true, false, false], Target::Sm90a),
            None
        );
    }

    /// A Hopper's site: 227 KiB of shared memory per block.
    fn site(target: Target, pairs: bool) -> Site {
        Site {
            target,
            pairs,
            block_shared_bytes: 227 * 1024,
        }
    }

    fn chosen(aligned: [bool; 4], target: Target) -> &'static str {
        chosen_at(aligned, site(target, false))
    }

    fn chosen_in(aligned: [bool; 4], (target, pairs): (Target, bool)) -> &'static str {
        chosen_at(aligned, site(target, pairs))
    }

    fn chosen_at(aligned: [bool; 4], site: Site) -> &'static str {
        MATMUL
            .variant_for(&[DType::BF16], &[], &aligned, site)
            .expect("a variant")
            .entry
    }

    #[test]
    fn two_teams_per_block_run_where_a_block_may_have_their_shared_memory() {
        let all = [true, true, false, true];
        assert_eq!(chosen(all, Target::Sm90), "v_twins");
        assert_eq!(chosen([false, false, false, false], Target::Sm90), "s_twins");
        // No two-team variant for these arguments: the plain one.
        assert_eq!(chosen([true, true, false, false], Target::Sm90), "vs");
        // sm_120 gives a block 99 KiB: the plain variants, which fit.
        let sm120 = Site {
            block_shared_bytes: crate::testing::SM120_BLOCK_SHARED_BYTES,
            ..site(Target::Sm90, false)
        };
        assert_eq!(chosen_at(all, sm120), "v");
        assert_eq!(chosen_at([false, false, false, false], sm120), "s");
        // A block of 64 KiB: only the scalar variant fits.
        let small = Site {
            block_shared_bytes: 64 * 1024,
            ..sm120
        };
        assert_eq!(chosen_at(all, small), "s");
        let none = Site {
            block_shared_bytes: 32 * 1024,
            ..sm120
        };
        assert!(MATMUL.variant_for(&[DType::BF16], &[], &all, none).is_none());
        assert_eq!(
            MATMUL.describe(&MATMUL.variants[6]),
            "matmul[T=bf16, vectorized, two teams]"
        );
        // Each two-team variant's plain one, for grids too long for teams.
        let v = &MATMUL.variants;
        assert_eq!(MATMUL.single_team(&v[6]).map(|p| p.entry), Some("v"));
        assert_eq!(MATMUL.single_team(&v[7]).map(|p| p.entry), Some("s"));
        assert!(MATMUL.single_team(&v[0]).is_none() && MATMUL.single_team(&v[3]).is_none());
    }

    #[test]
    fn a_launch_in_pairs_takes_the_paired_variant_where_there_is_one() {
        let all = [true, true, false, true];
        assert_eq!(chosen_in(all, (Target::Sm90a, true)), "wgmma_pairs");
        assert_eq!(chosen_in(all, (Target::Sm90a, false)), "wgmma");
        // None with the arguments' alignment: the unpaired one that allows it.
        assert_eq!(chosen_in([true, true, false, false], (Target::Sm90a, true)), "wgmma_s");
        assert_eq!(chosen_in(all, (Target::Sm90, true)), "v_twins");
        assert_eq!(
            MATMUL.describe(&MATMUL.variants[5]),
            "matmul[T=bf16, vectorized, sm_90a, in pairs]"
        );
    }

    #[test]
    fn the_variant_with_the_most_vector_tensors_that_the_arguments_allow_runs() {
        assert_eq!(chosen([true, true, false, true], Target::Sm90a), "wgmma");
        // An output with rows that are not 16-byte aligned: TMA still copies the operands.
        assert_eq!(chosen([true, true, false, false], Target::Sm90a), "wgmma_s");
        assert_eq!(chosen([false, true, false, true], Target::Sm90a), "s_twins");
        assert_eq!(chosen([true, true, false, true], Target::Sm90), "v_twins");
        assert_eq!(chosen([true, true, false, false], Target::Sm90), "vs");
        assert_eq!(chosen([true, false, false, true], Target::Sm90), "s_twins");
        let v = &MATMUL.variants;
        assert_eq!(MATMUL.describe(&v[0]), "matmul[T=bf16, vectorized]");
        assert_eq!(MATMUL.describe(&v[1]), "matmul[T=bf16, vectorized a b]");
        assert_eq!(MATMUL.describe(&v[2]), "matmul[T=bf16, scalar]");
        assert_eq!(MATMUL.describe(&v[4]), "matmul[T=bf16, vectorized a b, sm_90a]");
    }
}
