//! What the compiler tells the runtime about a kernel: parameters, const
//! specializations and the PTX of every variant. Built as `static` data by
//! `#[tile::kernel]`; registered with `inventory` so tools can list every kernel.

use tile_spec::{DType, Target, Variant};

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

    /// This specialization's variants made for `target` (`None`: portable)
    /// that `site` can run: paired ones only where it asks for pairs, and
    /// none that needs more shared memory than a block gets there.
    fn runnable(
        &self,
        types: &[DType],
        consts: &[i64],
        target: Option<Target>,
        site: Site,
    ) -> impl Iterator<Item = &'static Variant> {
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
    ) -> Option<&'static Variant> {
        self.runnable(types, consts, target, site)
            .filter(|v| v.vectorized.iter().all(|&p| aligned.get(p) == Some(&true)))
            .max_by_key(|v| (v.vectorized.len(), v.cluster, v.persistent))
    }

    /// The portable variant for these type and const values that the
    /// arguments' alignment allows on a GPU that gives a block all the
    /// shared memory it asks for (see [`KernelSpec::variant_for`]).
    pub fn variant(&self, types: &[DType], consts: &[i64], aligned: &[bool]) -> Option<&'static Variant> {
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
    ) -> Option<&'static Variant> {
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
    ) -> Option<(&'static Variant, Vec<usize>)> {
        let copied = |v: &Variant| -> Option<Vec<usize>> {
            let mut copies = Vec::new();
            for &p in v.vectorized.iter() {
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
    pub fn single_team(&self, v: &Variant) -> Option<&'static Variant> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A bf16 variant of a matmul whose blocks run `teams` teams (two:
    /// persistent) that need `kib` KiB of shared memory each.
    const fn spec(
        entry: &'static str,
        vectorized: &'static [usize],
        (target, cluster): (Option<Target>, u32),
        (teams, kib): (u32, usize),
    ) -> Variant {
        // The `wgmma` variants read the operands (parameters 0 and 1) by TMA.
        let tma_only: &'static [usize] = match target {
            Some(_) => &[0, 1],
            None => &[],
        };
        Variant {
            types: Cow::Borrowed(&[DType::BF16]),
            consts: Cow::Borrowed(&[]),
            vectorized: Cow::Borrowed(vectorized),
            entry: Cow::Borrowed(entry),
            threads: teams * 128,
            shared_bytes: 0,
            dynamic_shared_bytes: teams as usize * kib * 1024,
            target,
            tensor_maps: Cow::Borrowed(&[]),
            tma_only: Cow::Borrowed(tma_only),
            persistent: teams == 2,
            cluster,
            ptx: Cow::Borrowed(""),
        }
    }

    const fn variant(entry: &'static str, vectorized: &'static [usize], target: Option<Target>) -> Variant {
        paired(entry, vectorized, target, 1)
    }

    const fn paired(
        entry: &'static str,
        vectorized: &'static [usize],
        target: Option<Target>,
        cluster: u32,
    ) -> Variant {
        spec(entry, vectorized, (target, cluster), (1, 0))
    }

    /// A portable variant whose blocks need `kib` KiB of shared memory,
    /// and with `twins` one running two of them as the teams of one
    /// persistent block.
    const fn portable(entry: &'static str, vectorized: &'static [usize], kib: usize, twins: bool) -> Variant {
        let teams = if twins { 2 } else { 1 };
        spec(entry, vectorized, (None, 1), (teams, kib))
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
                .map(|(v, copies)| (&*v.entry, copies))
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
            .as_ref()
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
        assert_eq!(MATMUL.single_team(&v[6]).map(|p| &*p.entry), Some("v"));
        assert_eq!(MATMUL.single_team(&v[7]).map(|p| &*p.entry), Some("s"));
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
