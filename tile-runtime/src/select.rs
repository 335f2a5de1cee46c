//! Which variant a launch runs, and which operands it copies first: the
//! runtime's whole variant policy, as pure functions of the kernel, the
//! facts about the arguments and the site.
//!
//! The launcher gathers the facts ([`ArgFacts`]: per parameter, whether
//! the argument allows 16-byte vectors and whether it could be copied into
//! rows TMA reads), calls [`select`], makes the copies the [`Selection`]
//! names and encodes the variant's tensor maps. Two things it learns only
//! then feed back as facts: copies that find no memory (it selects again
//! with nothing copyable) and tensor maps the driver refuses (again with
//! `maps_encode: false`); each turns a fact off, so selection settles
//! within three calls. Once the function is loaded, the launcher knows
//! how many of its blocks the GPU holds at once, and [`for_grid`], the
//! second step, may swap a persistent two-tile variant for its plain one.

use crate::spec::KernelSpec;
use crate::{Error, Grid, Result};
use tile_spec::{DType, Target, Variant};

/// What a launch may run: the device's target, whether the grid asks for
/// blocks in 2-CTA clusters (see [`Grid::in_clusters`]), and the shared memory the
/// device gives one block (a variant that needs more is passed over).
#[derive(Clone, Copy, Debug)]
pub struct Site {
    /// The PTX target whose variants the device runs (see `Device::target`).
    pub target: Target,
    /// Whether the grid asks for blocks in 2-CTA clusters.
    pub clusters: bool,
    /// Shared memory one block may have, static and dynamic.
    pub block_shared_bytes: usize,
}

impl Site {
    /// A GPU that runs only portable PTX and gives a block all the shared
    /// memory it asks for: where the variant depends on the arguments alone.
    pub fn anywhere() -> Site {
        Site {
            target: Target::Sm90,
            clusters: false,
            block_shared_bytes: usize::MAX,
        }
    }
}

/// What the launcher knows about a launch's arguments, each list indexed
/// by parameter (scalars, and indices past the end, count as `false`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgFacts {
    /// A tensor that allows 16-byte vector accesses: 16-byte aligned,
    /// contiguous in its last dimension with a length that is a multiple
    /// of 16 bytes, and other strides that are multiples of 16 bytes.
    pub aligned: Vec<bool>,
    /// A read-only tensor whose rows are evenly spaced (but maybe not 16
    /// bytes apart): the launcher can copy it into rows 16 bytes apart,
    /// which TMA reads.
    pub copyable: Vec<bool>,
    /// Whether the driver encodes tensor maps for these arguments: `true`
    /// until it refused one of the selected variant's, then `false`, and
    /// only variants without tensor maps run.
    pub maps_encode: bool,
}

impl ArgFacts {
    /// Facts with the arguments' alignment alone: nothing to copy, maps encode.
    pub fn aligned(aligned: &[bool]) -> ArgFacts {
        ArgFacts {
            aligned: aligned.to_vec(),
            copyable: Vec::new(),
            maps_encode: true,
        }
    }

    fn aligned_at(&self, p: usize) -> bool {
        self.aligned.get(p) == Some(&true)
    }

    fn copyable_at(&self, p: usize) -> bool {
        self.copyable.get(p) == Some(&true)
    }
}

/// What [`select`] chose: the variant, and the read-only tensor
/// parameters to copy into rows 16 bytes apart before launching it (it
/// reads those copies through TMA; empty for most launches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The variant to launch.
    pub variant: &'static Variant,
    /// The tensor parameters to copy into rows 16 bytes apart first.
    pub copies: Vec<usize>,
}

/// The variant to launch for these type and const values, with the
/// operands to copy first.
///
/// Of the variants `site` can run (clustered ones only where it asks for
/// clusters, none needing more shared memory than a block gets there, none
/// with tensor maps unless they encode), those made for the site's target
/// come first (sm_90a: `wgmma` + TMA), else the portable ones; of those,
/// the one with the most tensors accessed with vectors among those the
/// arguments allow (`facts.aligned`), then a clustered one, then a persistent
/// one (portable: two tiles per persistent block). When copying some `copyable`
/// operands lets a variant made for the target read more tensors with
/// vectors than that one, the one reading the most that way, and those
/// operands to copy.
///
/// `Error::SharedMemory` when every variant the arguments allow needs more
/// shared memory than a block gets at `site`; `Error::NotBuilt` when there
/// is none.
pub fn select(kernel: &KernelSpec, types: &[DType], consts: &[i64], facts: &ArgFacts, site: Site) -> Result<Selection> {
    let specialization = Specialization { kernel, types, consts };
    let Some(best) = specialization.best(facts, site) else {
        let anywhere = Site {
            block_shared_bytes: usize::MAX,
            ..site
        };
        return Err(match specialization.best(facts, anywhere) {
            Some(v) => Error::SharedMemory {
                kernel: kernel.name,
                needs: v.block_shared_bytes(),
                device: site.block_shared_bytes,
            },
            None => Error::NotBuilt {
                kernel: kernel.name,
                consts: consts.to_vec(),
            },
        });
    };
    Ok(match specialization.copying(facts, site) {
        Some((variant, copies)) if variant.vectorized.len() > best.vectorized.len() => Selection { variant, copies },
        _ => Selection {
            variant: best,
            copies: Vec::new(),
        },
    })
}

impl KernelSpec {
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
}

/// The most rounds of tiles (each persistent block's two halves taking one tile each)
/// a grid may need for two tiles per persistent block to run: on short grids the
/// persistent block hides one tile's epilogue behind the other's K-loop; on long
/// ones plain blocks match it, and on a weight matrix larger than L2 they win
/// (bench-results/LOG.md has the rounds measured).
const MAX_PERSISTENT_ROUNDS: u64 = 8;

/// The second step, once `variant` (chosen by [`select`]) is loaded and
/// the launcher knows how many of its blocks the GPU holds at once
/// (`resident_blocks`): a portable variant that runs two tiles per persistent block
/// gains where the last round of tiles is a large part of the work, so on
/// a grid of more than `MAX_PERSISTENT_ROUNDS` (8) rounds the plain variant it
/// was made from (same types, consts and vector accesses, one tile per
/// block) runs instead. Any other variant stays.
pub fn for_grid(kernel: &KernelSpec, variant: &'static Variant, grid: Grid, resident_blocks: u32) -> &'static Variant {
    if variant.target.is_some() || !variant.persistent {
        return variant;
    }
    let blocks = grid.x as u64 * grid.y as u64 * grid.z as u64;
    let rounds = blocks.div_ceil(2 * resident_blocks.max(1) as u64);
    let plain = kernel.variants.iter().find(|p| {
        p.types == variant.types
            && p.consts == variant.consts
            && p.target.is_none()
            && p.vectorized == variant.vectorized
            && !p.persistent
    });
    match plain {
        Some(plain) if rounds > MAX_PERSISTENT_ROUNDS => plain,
        _ => variant,
    }
}

/// One specialization (type and const values) of a kernel, whose variants
/// [`select`] ranks.
struct Specialization<'a> {
    kernel: &'a KernelSpec,
    types: &'a [DType],
    consts: &'a [i64],
}

impl Specialization<'_> {
    /// The variants made for `target` (`None`: portable) that `site` can
    /// run with these facts: clustered ones only where it asks for clusters
    /// (or the kernel gathers across its own),
    /// none that needs more shared memory than a block gets there, none
    /// with tensor maps that do not encode.
    fn runnable(&self, target: Option<Target>, facts: &ArgFacts, site: Site) -> impl Iterator<Item = &'static Variant> {
        let maps_encode = facts.maps_encode;
        self.kernel
            .variants
            .iter()
            .filter(move |v| *v.types == *self.types && *v.consts == *self.consts && v.target == target)
            .filter(move |v| v.cluster == 1 || v.gathers || site.clusters)
            .filter(move |v| v.block_shared_bytes() <= site.block_shared_bytes)
            .filter(move |v| maps_encode || v.tensor_maps.is_empty())
    }

    /// The best variant for the site's target, else the best portable one,
    /// of those whose vector-accessed tensors are all `facts.aligned`.
    fn best(&self, facts: &ArgFacts, site: Site) -> Option<&'static Variant> {
        [Some(site.target), None].into_iter().find_map(|target| {
            self.runnable(target, facts, site)
                .filter(|v| v.vectorized.iter().all(|&p| facts.aligned_at(p)))
                .max_by_key(|v| rank(v))
        })
    }

    /// The best variant made for the site's target that reads through TMA
    /// alone some `copyable` tensors that are not `aligned`, with those
    /// tensors (its other vector-accessed tensors all `aligned`).
    fn copying(&self, facts: &ArgFacts, site: Site) -> Option<(&'static Variant, Vec<usize>)> {
        let copied = |v: &Variant| -> Option<Vec<usize>> {
            let mut copies = Vec::new();
            for &p in v.vectorized.iter() {
                if facts.aligned_at(p) {
                    continue;
                }
                if !(facts.copyable_at(p) && v.tma_only.contains(&p)) {
                    return None;
                }
                copies.push(p);
            }
            (!copies.is_empty()).then_some(copies)
        };
        self.runnable(Some(site.target), facts, site)
            .filter_map(|v| Some((v, copied(v)?)))
            .max_by_key(|(v, _)| rank(v))
    }
}

/// How [`select`] orders variants that can run: the most tensors accessed
/// with vectors, then blocks in 2-CTA clusters, then persistent.
fn rank(v: &Variant) -> (usize, u32, bool) {
    (v.vectorized.len(), v.cluster, v.persistent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParamSpec;
    use std::borrow::Cow;
    use tile_spec::Ptx;

    /// A bf16 variant of a matmul whose blocks run `tiles` tiles (two:
    /// persistent) that need `kib` KiB of shared memory each.
    const fn spec(
        entry: &'static str,
        vectorized: &'static [usize],
        (target, cluster): (Option<Target>, u32),
        (tiles, kib): (u32, usize),
    ) -> Variant {
        // The `wgmma` variants read the operands (parameters 0 and 1) by
        // TMA, through tensor maps.
        let (tma_only, tensor_maps): (&'static [usize], &'static [tile_spec::TensorMap]) = match target {
            Some(_) => (&[0, 1], OPERAND_MAPS),
            None => (&[], &[]),
        };
        Variant {
            types: Cow::Borrowed(&[DType::BF16]),
            consts: Cow::Borrowed(&[]),
            vectorized: Cow::Borrowed(vectorized),
            entry: Cow::Borrowed(entry),
            threads: tiles * 128,
            shared_bytes: 0,
            dynamic_shared_bytes: tiles as usize * kib * 1024,
            target,
            tensor_maps: Cow::Borrowed(tensor_maps),
            tma_only: Cow::Borrowed(tma_only),
            persistent: tiles == 2,
            cluster,
            gathers: false,
            ptx: Ptx::Text(Cow::Borrowed("")),
        }
    }

    /// The tensor maps of the `wgmma` variants: a box of each operand.
    const OPERAND_MAPS: &[tile_spec::TensorMap] = &[operand_map(0), operand_map(1)];

    const fn operand_map(param: usize) -> tile_spec::TensorMap {
        tile_spec::TensorMap {
            param,
            box_dims: Cow::Borrowed(&[64, 128]),
            swizzle_bytes: 128,
            interleaved_rows: false,
            tf32: false,
        }
    }

    const fn variant(entry: &'static str, vectorized: &'static [usize], target: Option<Target>) -> Variant {
        clustered(entry, vectorized, target, 1)
    }

    const fn clustered(
        entry: &'static str,
        vectorized: &'static [usize],
        target: Option<Target>,
        cluster: u32,
    ) -> Variant {
        spec(entry, vectorized, (target, cluster), (1, 0))
    }

    /// A portable variant whose blocks need `kib` KiB of shared memory,
    /// and with `persistent` one running two of them as the halves of one
    /// persistent block.
    const fn portable(entry: &'static str, vectorized: &'static [usize], kib: usize, persistent: bool) -> Variant {
        let tiles = if persistent { 2 } else { 1 };
        spec(entry, vectorized, (None, 1), (tiles, kib))
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
                shape: None,
            },
            ParamSpec::Tensor {
                name: "b",
                elem: "T",
                rank: 2,
                mutable: false,
                shape: None,
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
                shape: None,
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
            clustered("wgmma_cluster", &[0, 1, 3], Some(Target::Sm90a), 2),
            portable("v_persistent", &[0, 1, 3], 96, true),
            portable("s_persistent", &[], 64, true),
        ],
        // Selection never runs the CPU version.
        cpu: |_, _, _, _| Ok(()),
        tuning: None,
    };

    /// A Hopper's site: 227 KiB of shared memory per block.
    fn site(target: Target, clusters: bool) -> Site {
        Site {
            target,
            clusters,
            block_shared_bytes: 227 * 1024,
        }
    }

    /// The selection for these facts at `site`, as the entry and the copies.
    fn selected(facts: &ArgFacts, site: Site) -> Result<(&'static str, Vec<usize>)> {
        select(&MATMUL, &[DType::BF16], &[], facts, site).map(|s| (&*s.variant.entry, s.copies))
    }

    fn chosen(aligned: [bool; 4], target: Target) -> &'static str {
        chosen_at(aligned, site(target, false))
    }

    fn chosen_in(aligned: [bool; 4], (target, clusters): (Target, bool)) -> &'static str {
        chosen_at(aligned, site(target, clusters))
    }

    fn chosen_at(aligned: [bool; 4], site: Site) -> &'static str {
        let (entry, copies) = selected(&ArgFacts::aligned(&aligned), site).expect("a variant");
        assert!(copies.is_empty(), "nothing copyable, nothing copied");
        entry
    }

    #[test]
    fn operands_read_through_tma_alone_may_be_copied_into_aligned_rows() {
        let copying = |aligned: [bool; 4], copyable: [bool; 4], target| {
            let facts = ArgFacts {
                aligned: aligned.to_vec(),
                copyable: copyable.to_vec(),
                maps_encode: true,
            };
            let (entry, copies) = selected(&facts, site(target, false)).expect("a variant");
            (!copies.is_empty()).then_some((entry, copies))
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

    #[test]
    fn copies_without_memory_or_maps_the_driver_refuses_fall_back() {
        // The LM head's selection, then what the launcher asks again after
        // the copies found no memory (nothing copyable): the variant that
        // needs none, and after the driver refused a tensor map: portable.
        let mut facts = ArgFacts {
            aligned: vec![true, false, false, false],
            copyable: vec![true, true, false, false],
            maps_encode: true,
        };
        let at = site(Target::Sm90a, false);
        assert_eq!(selected(&facts, at).unwrap(), ("wgmma_s", vec![1]));
        facts.copyable = vec![false; 4];
        assert_eq!(selected(&facts, at).unwrap(), ("s_persistent", vec![]));
        let aligned = ArgFacts::aligned(&[true, true, false, true]);
        assert_eq!(selected(&aligned, at).unwrap(), ("wgmma", vec![]));
        let refused = ArgFacts {
            maps_encode: false,
            ..aligned
        };
        assert_eq!(selected(&refused, at).unwrap(), ("v_persistent", vec![]));
        assert_eq!(
            selected(&refused, site(Target::Sm90a, true)).unwrap(),
            ("v_persistent", vec![])
        );
    }

    #[test]
    fn variants_too_large_for_a_block_and_values_not_built_are_typed_errors() {
        let all = ArgFacts::aligned(&[true, true, false, true]);
        let tiny = Site {
            block_shared_bytes: 32 * 1024,
            ..site(Target::Sm90, false)
        };
        assert_eq!(
            select(&MATMUL, &[DType::BF16], &[], &all, tiny),
            Err(Error::SharedMemory {
                kernel: "matmul",
                needs: 192 * 1024,
                device: 32 * 1024,
            })
        );
        assert_eq!(
            select(&MATMUL, &[DType::F32], &[128], &all, tiny),
            Err(Error::NotBuilt {
                kernel: "matmul",
                consts: vec![128],
            })
        );
    }

    #[test]
    fn persistent_blocks_of_two_tiles_run_where_a_block_may_have_their_shared_memory() {
        let all = [true, true, false, true];
        assert_eq!(chosen(all, Target::Sm90), "v_persistent");
        assert_eq!(chosen([false, false, false, false], Target::Sm90), "s_persistent");
        // No persistent two-tile variant for these arguments: the plain one.
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
        assert!(select(&MATMUL, &[DType::BF16], &[], &ArgFacts::aligned(&all), none).is_err());
        assert_eq!(
            MATMUL.describe(&MATMUL.variants[6]),
            "matmul[T=bf16, vectorized, persistent]"
        );
    }

    #[test]
    fn grids_of_more_than_eight_rounds_run_the_plain_variant_of_a_persistent_one() {
        let v = &MATMUL.variants;
        let entry = |variant, blocks: u32, resident| &*for_grid(&MATMUL, variant, Grid::from(blocks), resident).entry;
        // 132 blocks fit at once: a round is 264 tiles, two per block.
        assert_eq!(entry(&v[6], 8 * 264, 132), "v_persistent");
        assert_eq!(entry(&v[6], 8 * 264 + 1, 132), "v");
        assert_eq!(entry(&v[7], 10_000, 132), "s");
        // Variants that are not persistent portable ones stay, whatever the grid.
        assert_eq!(entry(&v[0], 10_000, 132), "v");
        assert_eq!(entry(&v[3], 10_000, 132), "wgmma");
        assert_eq!(entry(&v[5], 10_000, 132), "wgmma_cluster");
    }

    #[test]
    fn a_launch_in_clusters_takes_the_clustered_variant_where_there_is_one() {
        let all = [true, true, false, true];
        assert_eq!(chosen_in(all, (Target::Sm90a, true)), "wgmma_cluster");
        assert_eq!(chosen_in(all, (Target::Sm90a, false)), "wgmma");
        // None with the arguments' alignment: the unclustered one that allows it.
        assert_eq!(chosen_in([true, true, false, false], (Target::Sm90a, true)), "wgmma_s");
        assert_eq!(chosen_in(all, (Target::Sm90, true)), "v_persistent");
        assert_eq!(
            MATMUL.describe(&MATMUL.variants[5]),
            "matmul[T=bf16, vectorized, sm_90a, in 2-CTA clusters]"
        );
    }

    #[test]
    fn the_variant_with_the_most_vector_tensors_that_the_arguments_allow_runs() {
        assert_eq!(chosen([true, true, false, true], Target::Sm90a), "wgmma");
        // An output with rows that are not 16-byte aligned: TMA still copies the operands.
        assert_eq!(chosen([true, true, false, false], Target::Sm90a), "wgmma_s");
        assert_eq!(chosen([false, true, false, true], Target::Sm90a), "s_persistent");
        assert_eq!(chosen([true, true, false, true], Target::Sm90), "v_persistent");
        assert_eq!(chosen([true, true, false, false], Target::Sm90), "vs");
        assert_eq!(chosen([true, false, false, true], Target::Sm90), "s_persistent");
        // Anywhere (the arguments alone): the portable variants.
        assert_eq!(chosen_at([true, true, false, true], Site::anywhere()), "v_persistent");
        let v = &MATMUL.variants;
        assert_eq!(MATMUL.describe(&v[0]), "matmul[T=bf16, vectorized]");
        assert_eq!(MATMUL.describe(&v[1]), "matmul[T=bf16, vectorized a b]");
        assert_eq!(MATMUL.describe(&v[2]), "matmul[T=bf16, scalar]");
        assert_eq!(MATMUL.describe(&v[4]), "matmul[T=bf16, vectorized a b, sm_90a]");
    }
}
