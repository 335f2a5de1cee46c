//! The compiler behind `#[tile::kernel]`.
//!
//! Pipeline, one module per stage: [`parse`] (syn to a spanned AST) →
//! [`check`] (types, shapes, broadcasting; builds the SSA [`ir`]) →
//! [`simplify`] (constant folding, CSE, dead code) → [`layout`] (a thread
//! mapping for every tile, conversions inserted) → [`lower`] (per-thread PTX
//! instructions) → [`ptx`] (text per target); and from the same IR, [`cpu`]
//! (the reference backend as Rust). [`mod@expand`] assembles the macro output.
//!
//! Kept out of the proc-macro crate so that it can be tested directly and
//! reused by tools.

pub mod ast;
pub mod check;
pub mod cpu;
pub mod dtype;
pub mod error;
pub mod expand;
pub mod ir;
pub mod layout;
pub mod lower;
pub mod parse;
pub mod ptx;
pub mod simplify;

pub use error::{Error, Result};
pub use tile_spec::{Target, Variant};

use proc_macro2::TokenStream;

/// Registers per thread a tile may take before the kernel is rejected.
const MAX_ELEMS_PER_THREAD: usize = 128;

/// One assignment of a kernel's type and const parameters, and its IR.
pub struct Specialization {
    pub types: Vec<dtype::DType>,
    pub consts: Vec<i64>,
    /// Checked and simplified, before layouts: the CPU backend's input.
    pub func: ir::Func,
}

/// Everything the compiler produced for one kernel.
pub struct CompiledKernel {
    pub kernel: ast::Kernel,
    /// Per const assignment, the checked and simplified IR (no layouts): the
    /// CPU backend's input.
    pub funcs: Vec<Specialization>,
    pub variants: Vec<Variant>,
}

/// Every combination of listed values: each list contributes one choice.
fn combinations<T: Clone>(lists: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new()];
    for list in lists {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                list.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push(v.clone());
                    p
                })
            })
            .collect();
    }
    out
}

/// Picks `num_warps`: the hint or [`default_warps`], then as many more as
/// [`row_split_warps`] takes.
fn choose_warps(func: &ir::Func, hint: Option<u32>) -> u32 {
    row_split_warps(func, hint.unwrap_or_else(|| default_warps(func)))
}

/// Accumulator registers a thread may hold across a kernel's products
/// when its warps split their rows: half of the 255 it can have.
const ROW_SPLIT_ACCUMULATORS: usize = 128;

/// `warps`, doubled while the warps split the products' rows (their rows
/// are reduced, or feed another `mma`: attention), each thread would hold
/// more than [`ROW_SPLIT_ACCUMULATORS`] of the products' accumulators
/// together, and each warp would keep at least 16 rows (`mma`'s M).
/// Attention with 128 queries, heads of 128 and 128 keys per step holds
/// 256 a thread at four warps, which spilled (ptxas); eight hold 128.
fn row_split_warps(func: &ir::Func, warps: u32) -> u32 {
    if layout::WarpSplit::of(func) != layout::WarpSplit::Rows {
        return warps;
    }
    let accumulators = accumulator_shapes(func);
    let elements: usize = accumulators.iter().map(|s| s.iter().product::<usize>()).sum();
    let rows = accumulators.iter().map(|s| s[0]).max().unwrap_or(0);
    let mut warps = warps;
    while elements > ROW_SPLIT_ACCUMULATORS * 32 * warps as usize && 32 * warps as usize <= rows {
        warps *= 2;
    }
    warps
}

/// The shapes of the accumulators of a kernel's `mma`s.
fn accumulator_shapes(func: &ir::Func) -> Vec<Vec<usize>> {
    ir::all_ops(&func.body)
        .iter()
        .filter_map(|op| match &op.kind {
            ir::OpKind::Mma { acc, .. } => func.values[*acc].shape.clone(),
            _ => None,
        })
        .collect()
}

/// `num_warps` without a hint: one warp per 512 elements of the largest
/// tile (16 per thread: two to four 16-byte vectors), from 1 to 16 warps.
/// When the kernel reduces rows (along the last axis) and there are fewer
/// rows than that, it takes one warp per row if a warp can hold a row in at
/// most 32 registers per thread: the reductions then need no shared memory.
fn default_warps(func: &ir::Func) -> u32 {
    // Tensor-core kernels: one warp per 4096 accumulator elements (2048 for
    // f32 operands, whose fragments take twice the registers), at most 8, so
    // 16-bit warps compute 64x64 tiles (measured faster than 32x64 on an
    // H200: bf16 4096^3 at 392 TFLOP/s against 352).
    let mma_warps = ir::all_ops(&func.body)
        .iter()
        .filter_map(|op| match &op.kind {
            ir::OpKind::Mma { a, acc, .. } => {
                let elems: usize = func.values[*acc].shape.as_ref()?.iter().product();
                let (per_warp, most) = if func.values[*a].dtype == dtype::DType::F32 {
                    (2048, 8)
                } else {
                    (4096, 8)
                };
                Some((elems / per_warp).clamp(1, most))
            }
            _ => None,
        })
        .max();
    if let Some(w) = mma_warps {
        return w as u32;
    }
    let max = func
        .tile_shapes()
        .map(|s| s.iter().product::<usize>())
        .max()
        .unwrap_or(1);
    let mut warps = (max / 512).clamp(1, 16);
    let rows = ir::all_ops(&func.body)
        .iter()
        .filter_map(|op| match &op.kind {
            ir::OpKind::Reduce { arg, axis, .. } => {
                let shape = func.values[*arg].shape.as_ref()?;
                (*axis == shape.len() - 1).then(|| shape[..*axis].iter().product::<usize>())
            }
            _ => None,
        })
        .min();
    if let Some(rows) = rows {
        if rows < warps && max / (32 * rows) <= 32 {
            warps = rows;
        }
    }
    warps as u32
}

/// Warps for a kernel's `wgmma` variant, when it has `mma`s, in order of
/// preference. When the warps split its products' rows (their rows are
/// reduced, or feed another `mma`: attention), a warpgroup per 64 rows of
/// the tallest product, whatever the hint: `wgmma`'s M, so each warp holds
/// 16 rows of each tile (a hint sized for `mma.sync`, 32 rows a warp, would
/// leave each warpgroup two slabs; heads of 64 ran 4-9% faster with two
/// warpgroups than with one, H100). Otherwise the hint; or one warpgroup,
/// and two when a tile has at least 128 rows and 128 x 128 elements (each
/// warpgroup then holds a 64-row slab or more). A 128 x 128 tile prefers
/// one warpgroup, if a second one can take turns with it on the tiles (the
/// lowering's warp specialization decides): the epilogue of one then
/// overlaps the other's K-loop. Two split it otherwise.
fn wgmma_warps(func: &ir::Func, hint: Option<u32>) -> Vec<u32> {
    let accumulators = accumulator_shapes(func);
    let Some(largest) = accumulators.iter().max_by_key(|shape| (shape[0] * shape[1], shape[0])) else {
        return Vec::new();
    };
    if layout::WarpSplit::of(func) == layout::WarpSplit::Rows {
        let tallest = accumulators.iter().map(|shape| shape[0]).max().unwrap_or(largest[0]);
        return vec![4 * (tallest / 64).clamp(1, 4) as u32];
    }
    match (hint, largest[0] >= 128, largest[0] * largest[1]) {
        (Some(h), _, _) => vec![h],
        (None, true, n) if n == 128 * 128 => vec![4, 8],
        (None, true, n) if n > 128 * 128 => vec![8],
        _ => vec![4],
    }
}

/// The scalar-access variant of a tensor-core kernel stages operands through
/// registers, which needs room: it gets twice the warps (up to 8), unless
/// `keep` (the vector variant, or a kernel that fixes `num_warps`).
fn scalar_warps(func: &ir::Func, keep: bool) -> u32 {
    let has_mma = ir::all_ops(&func.body)
        .iter()
        .any(|op| matches!(op.kind, ir::OpKind::Mma { .. }));
    if keep || !has_mma {
        func.num_warps
    } else {
        (func.num_warps * 2).min(8)
    }
}

fn describe(kernel: &ast::Kernel, types: &[dtype::DType], values: &[i64]) -> String {
    let t = kernel.types.iter().zip(types).map(|(p, d)| format!("{} = {d}", p.name));
    let c = kernel
        .consts
        .iter()
        .zip(values)
        .map(|(p, v)| format!("{} = {v}", p.name));
    t.chain(c).collect::<Vec<_>>().join(", ")
}

/// The lowering's description of a tensor map as the shared type the
/// runtime reads.
fn spec_tensor_map(m: lower::TensorMap) -> tile_spec::TensorMap {
    tile_spec::TensorMap {
        param: m.param,
        box_dims: m.box_dims.into(),
        swizzle_bytes: m.swizzle_bytes,
        interleaved_rows: m.interleaved_rows,
        tf32: m.tf32,
    }
}

/// Compiles a kernel: every specialization, both access widths.
pub fn compile(attr: TokenStream, item: TokenStream) -> Result<CompiledKernel> {
    let kernel = parse::parse_kernel(attr, item)?;
    let mut funcs = Vec::new();
    let mut variants = Vec::new();
    let type_lists: Vec<Vec<dtype::DType>> = kernel.types.iter().map(|t| t.dtypes.clone()).collect();
    let const_lists: Vec<Vec<i64>> = kernel.consts.iter().map(|c| c.values.clone()).collect();
    for types in combinations(&type_lists) {
        for values in combinations(&const_lists) {
            if kernel.skips.iter().any(|s| s.matches(&types, &values)) {
                continue;
            }
            let generic = !kernel.consts.is_empty() || !kernel.types.is_empty();
            let in_variant = |e: Error| {
                if generic {
                    Error::new(
                        e.span,
                        format!("{} (building {})", e.message, describe(&kernel, &types, &values)),
                    )
                } else {
                    e
                }
            };
            let type_names: Vec<(String, dtype::DType)> = kernel
                .types
                .iter()
                .zip(&types)
                .map(|(t, d)| (t.name.to_string(), *d))
                .collect();
            let names: Vec<(String, i64)> = kernel
                .consts
                .iter()
                .zip(&values)
                .map(|(c, v)| (c.name.to_string(), *v))
                .collect();
            let mut func = check::check(&kernel, &type_names, &names).map_err(in_variant)?;
            simplify::simplify(&mut func);
            func.num_warps = choose_warps(&func, kernel.num_warps);
            check_registers(&kernel, &func).map_err(in_variant)?;
            let suffix: String = types
                .iter()
                .map(|d| format!("_{d}"))
                .chain(values.iter().map(|v| format!("_{v}")))
                .collect();
            let variant = |vectorized: Vec<usize>, entry: String, lowered: lower::Lowered, target| Variant {
                types: types.clone().into(),
                consts: values.clone().into(),
                vectorized: vectorized.into(),
                entry: entry.into(),
                ptx: lowered.text.into(),
                threads: lowered.threads,
                shared_bytes: lowered.shared_bytes,
                dynamic_shared_bytes: lowered.dynamic_shared_bytes,
                target,
                tensor_maps: lowered.tensor_maps.into_iter().map(spec_tensor_map).collect(),
                persistent: lowered.persistent,
                cluster: lowered.cluster,
                tma_only: lowered.tma_only.into(),
            };
            // Every tensor accessed with vectors; then (for an `mma` kernel
            // whose pipelines copy only some tensors) only those; then none.
            // Each variant serves arguments the one before cannot (an LM
            // head's output rows are not 16-byte aligned).
            let tensors = func.tensor_params();
            // The specialization with `num_warps` warps and layouts for
            // `path`, with the `vectorized` tensors accessed with vectors.
            let laid_out = |num_warps: u32, path: layout::MmaPath, vectorized: &[usize]| {
                let mut f = ir::Func {
                    name: func.name.clone(),
                    params: func.params.clone(),
                    values: func.values.clone(),
                    body: func.body.clone(),
                    num_warps,
                };
                let layouts = layout::assign_layouts(&mut f, path, vectorized);
                simplify::remove_dead(&mut f);
                (f, layouts)
            };
            let portable = |vectorized: &[usize]| {
                laid_out(
                    scalar_warps(&func, !vectorized.is_empty() || kernel.num_warps.is_some()),
                    layout::MmaPath::Portable,
                    vectorized,
                )
            };
            let entry = |kind: &str| format!("{}{}_{kind}", kernel.name, suffix);
            // The portable variant for `vectorized`, and where two of its
            // blocks share an SM one running them as two teams of a
            // persistent block (see `lower::lower_twins`): the tensors its
            // `mma` pipelines copy.
            let mut portable_variants = |vectorized: Vec<usize>, kind: &str| -> Result<Vec<usize>> {
                let (f, layouts) = portable(&vectorized);
                let stages = kernel.num_stages;
                let lowered = lower::lower(&f, &layouts, &vectorized, &entry(kind), stages).map_err(in_variant)?;
                let operands = lowered.pipelined.clone();
                variants.push(variant(vectorized.clone(), entry(kind), lowered, None));
                let twins_entry = entry(&format!("{kind}_twins"));
                if let Some(twins) =
                    lower::lower_twins(&f, &layouts, &vectorized, &twins_entry, stages).map_err(in_variant)?
                {
                    variants.push(variant(vectorized, twins_entry, twins, None));
                }
                Ok(operands)
            };
            let operands = portable_variants(tensors.clone(), "v")?;
            if !operands.is_empty() && operands != tensors {
                portable_variants(operands, "vs")?;
            }
            portable_variants(Vec::new(), "s")?;
            let warp_choices = wgmma_warps(&func, kernel.num_warps);
            // Operands read in f32 (tf32): `wgmma` variants whose blocks run
            // in pairs too, which the launch may ask for (see `lower::cluster`).
            let f32_operands = |pipelined: &[usize]| {
                pipelined
                    .iter()
                    .all(|&p| matches!(&func.params[p], ir::Param::Tensor(t) if t.dtype == dtype::DType::F32))
            };
            for (choice, &num_warps) in warp_choices.iter().enumerate() {
                let wgmma = |vectorized: &[usize]| laid_out(num_warps, layout::MmaPath::Wgmma, vectorized);
                let (f, layouts) = wgmma(&tensors);
                let sm90a = Some(Target::Sm90a);
                let lowered = lower::lower_wgmma(&f, &layouts, &tensors, &entry("wgmma"), (kernel.num_stages, false))
                    .map_err(in_variant)?;
                if lowered
                    .as_ref()
                    .is_some_and(|l| num_warps == 4 && !l.ping_pong && choice + 1 < warp_choices.len())
                {
                    continue;
                }
                let Some(lowered) = lowered else { break };
                // As above: a second variant with vectors (TMA) for the operands only.
                let operands = lowered.pipelined.clone();
                let paired = lowered.persistent && f32_operands(&operands);
                variants.push(variant(tensors.clone(), entry("wgmma"), lowered, sm90a));
                let mut sets = vec![(tensors.clone(), "wgmma")];
                if operands != tensors {
                    let (f, layouts) = wgmma(&operands);
                    let lowered =
                        lower::lower_wgmma(&f, &layouts, &operands, &entry("wgmma_s"), (kernel.num_stages, false));
                    if let Some(lowered) = lowered.map_err(in_variant)? {
                        variants.push(variant(operands.clone(), entry("wgmma_s"), lowered, sm90a));
                        sets.push((operands, "wgmma_s"));
                    }
                }
                for (vectorized, kind) in sets.into_iter().filter(|_| paired) {
                    let (f, layouts) = wgmma(&vectorized);
                    let name = entry(&format!("{kind}_pairs"));
                    let lowered = lower::lower_wgmma(&f, &layouts, &vectorized, &name, (kernel.num_stages, true));
                    if let Some(lowered) = lowered.map_err(in_variant)?.filter(|l| l.cluster > 1) {
                        variants.push(variant(vectorized, name, lowered, sm90a));
                    }
                }
                break;
            }
            funcs.push(Specialization {
                types: types.clone(),
                consts: values,
                func,
            });
        }
    }
    if funcs.is_empty() {
        return Err(Error::new(
            kernel.name.span(),
            "`skip` leaves no specialization to build: skip fewer combinations",
        ));
    }
    let ranks: Vec<Vec<usize>> = funcs
        .iter()
        .map(|s| {
            s.func
                .params
                .iter()
                .map(|p| match p {
                    ir::Param::Tensor(t) => t.rank,
                    ir::Param::Scalar { .. } => 0,
                })
                .collect()
        })
        .collect();
    if ranks.windows(2).any(|w| w[0] != w[1]) {
        return Err(Error::new(
            kernel.name.span(),
            "a tensor's rank differs between specializations: every specialization must index each tensor with the same number of coordinates",
        ));
    }
    Ok(CompiledKernel {
        kernel,
        funcs,
        variants,
    })
}

/// Rejects tiles too large to live in registers with the chosen warp count.
fn check_registers(kernel: &ast::Kernel, func: &ir::Func) -> Result<()> {
    let threads = 32 * func.num_warps as usize;
    for op in ir::all_ops(&func.body) {
        for &r in &op.results {
            if let Some(shape) = &func.values[r].shape {
                let per_thread = shape.iter().product::<usize>() / threads;
                if per_thread > MAX_ELEMS_PER_THREAD {
                    return Err(Error::new(
                        op.span,
                        format!(
                            "tile {shape:?} needs {per_thread} registers per thread with num_warps = {}: the limit is {MAX_ELEMS_PER_THREAD}; use a smaller tile or raise num_warps in #[tile::kernel(.., num_warps = N)] (kernel `{}`)",
                            func.num_warps, kernel.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The macro's entry point: the expansion, or a `compile_error!` at the mistake.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match compile(attr, item) {
        Ok(k) => expand::expand(&k),
        Err(e) => e.to_compile_error(),
    }
}

/// Compiles kernel source text (`attr` is what goes inside `#[tile::kernel(..)]`).
pub fn compile_str(attr: &str, item: &str) -> Result<CompiledKernel> {
    let attr: TokenStream = attr
        .parse()
        .map_err(|e| Error::new(proc_macro2::Span::call_site(), format!("attribute: {e}")))?;
    let item: TokenStream = item
        .parse()
        .map_err(|e| Error::new(proc_macro2::Span::call_site(), format!("kernel source: {e}")))?;
    compile(attr, item)
}
