//! The compiler's stages seen from outside: what the IR holds after
//! simplification, and what the PTX does (vector accesses, shuffles,
//! barriers, conversions) for representative kernels.

use tile_compiler::{CompiledKernel, Target, Variant, compile_str, ir::OpKind};

fn compile(attr: &str, src: &str) -> CompiledKernel {
    match compile_str(attr, src) {
        Ok(k) => k,
        Err(e) => panic!("{}", e.message),
    }
}

/// The portable variant with every tensor accessed with vectors, or none.
fn ptx(k: &CompiledKernel, vectorized: bool) -> &str {
    text(
        k.variants
            .iter()
            .find(|v| v.target.is_none() && v.vectorized.is_empty() != vectorized)
            .expect("variant"),
    )
}

/// Each variant's entry and the tensor parameters it moves in vectors.
fn vectorized(k: &CompiledKernel) -> Vec<(&str, &[usize])> {
    k.variants.iter().map(|v| (&*v.entry, &*v.vectorized)).collect()
}

/// A variant's PTX entry, as the compiler writes it: text.
fn text(v: &Variant) -> &str {
    v.ptx.text().expect("the compiler's PTX is text")
}

fn count_ops(ops: &[tile_compiler::ir::Op], pred: &dyn Fn(&OpKind) -> bool) -> usize {
    ops.iter()
        .map(|op| pred(&op.kind) as usize + op.kind.bodies().iter().map(|b| count_ops(b, pred)).sum::<usize>())
        .sum()
}

const SOFTMAX: &str = "fn softmax<const B: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let t = x.load([r, 0], [1, B]).pad(f32::NEG_INFINITY);
    let e = exp(t - t.max(1));
    y.store([r, 0], e / e.sum(1));
}";

#[test]
fn every_specialization_gets_a_vector_and_a_scalar_entry() {
    let k = compile("B = [256, 4096]", SOFTMAX);
    assert_eq!(k.funcs.len(), 2);
    let entries: Vec<&str> = k.variants.iter().map(|v| &*v.entry).collect();
    assert_eq!(
        entries,
        ["softmax_256_v", "softmax_256_s", "softmax_4096_v", "softmax_4096_s"]
    );
    // An entry is the same on every target: the module header names one.
    assert!(k.variants.iter().all(|v| !text(v).contains(".target")));
    for t in Target::ALL {
        let h = t.header();
        assert!(h.contains(&format!(".target {}", t.name())));
        assert!(h.contains(&format!(".version {}", t.ptx_version())));
    }
}

#[test]
fn vector_variant_moves_16_bytes_per_access_and_scalar_variant_does_not() {
    let k = compile("B = [1024]", SOFTMAX);
    let (v, s) = (ptx(&k, true), ptx(&k, false));
    assert!(v.contains("ld.global.nc.v4.f32") && v.contains("st.global.v4.f32"));
    assert!(!s.contains(".v4.") && !s.contains(".v2."));
    // Out-of-bounds elements are predicated off and padded.
    assert!(v.contains("0fFF800000"), "the -inf padding");
    assert!(
        v.lines()
            .any(|l| l.trim_start().starts_with("@%p") && l.contains("ld.global"))
    );
}

#[test]
fn reductions_use_shuffles_then_shared_memory_only_across_warps() {
    // One warp: shuffles only.
    let k = compile("B = [256]", SOFTMAX);
    assert_eq!(k.variants[0].threads, 32);
    assert!(ptx(&k, true).contains("shfl.sync.bfly.b32"));
    assert!(!ptx(&k, true).contains("bar.sync"));
    assert_eq!(k.variants[0].shared_bytes, 0);
    // Several warps on one row: a shared-memory step with barriers.
    let k = compile("B = [8192]", SOFTMAX);
    assert_eq!(k.variants[0].threads, 512);
    assert!(ptx(&k, true).contains("bar.sync 0;"));
    assert!(k.variants[0].shared_bytes > 0);
}

/// The destination register of the first PTX line starting with `op`.
fn first_result<'a>(ptx: &'a str, op: &str) -> &'a str {
    let line = ptx.lines().map(str::trim).find(|l| l.starts_with(op)).expect(op);
    line[op.len()..].split(',').next().expect("a destination").trim()
}

#[test]
fn tile_origins_are_clamped_before_they_are_scaled() {
    let k = compile(
        "B = [4096]",
        "fn k<const B: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let i = block_id(0);
            y.store([i], x.load([i], [B]) + 1.0);
        }",
    );
    for vectorized in [true, false] {
        let p = ptx(&k, vectorized);
        // The first index whose origin reaches the sign bit.
        assert!(p.contains(&format!(", {};", (1u32 << 31) / 4096)), "{p}");
        let clamped = first_result(p, "min.u32");
        assert!(
            p.contains(&format!(", {clamped}, 12;")),
            "the clamped index is scaled:\n{p}"
        );
    }
}

#[test]
fn integer_division_by_zero_gives_what_the_cpu_version_gives() {
    let k = compile(
        "",
        "fn k(a: &Tensor<i32>, b: &Tensor<i32>, q: &mut Tensor<i32>, r: &mut Tensor<i32>) {
            let x = a.load([0], [32]);
            let y = b.load([0], [32]);
            q.store([0], x / y);
            r.store([0], x % y);
        }",
    );
    let p = ptx(&k, false);
    let lines: Vec<&str> = p.lines().map(str::trim).collect();
    // Each quotient, and each remainder, picked against a divisor of zero.
    for (op, by_zero) in [("div.s32", "4294967295"), ("rem.s32", "")] {
        let at = lines.iter().position(|l| l.starts_with(op)).expect(op);
        let [result, dividend, divisor] =
            [0, 1, 2].map(|i| lines[at][op.len()..].split([',', ';']).nth(i).unwrap().trim());
        let by_zero = if by_zero.is_empty() { dividend } else { by_zero };
        let zero = first_result(lines[at + 1], "setp.eq.u32");
        assert_eq!(lines[at + 1], format!("setp.eq.u32 {zero}, {divisor}, 0;"), "{p}");
        assert!(
            lines[at + 2].ends_with(&format!(", {by_zero}, {result}, {zero};")),
            "{p}"
        );
    }
}

#[test]
fn simplify_folds_constants_shares_equal_ops_and_drops_dead_code() {
    let k = compile(
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let i = block_id(0) + (2 * 3 - 6);
            let a = x.load([i], [64]);
            let unused = exp(a) * 2.0;
            let s1 = a * a;
            let s2 = a * a;
            y.store([i], s1 + s2);
        }",
    );
    let f = &k.funcs[0].func;
    let muls = count_ops(&f.body, &|k| {
        matches!(k, OpKind::Binary(tile_compiler::ir::BinaryOp::Mul, ..))
    });
    assert_eq!(muls, 1, "a * a computed once:\n{f}");
    assert_eq!(
        count_ops(&f.body, &|k| matches!(k, OpKind::Unary(..))),
        0,
        "the unused exp is gone:\n{f}"
    );
    // `block_id(0) + 0` leaves one add of a folded constant 0.
    assert!(f.to_string().contains("Const(Int(0))"), "{f}");
}

/// A tiling parameter of 1 (`gemv_layer_norm`'s `R`) writes a reduction
/// over an axis of size 1 between reshapes: simplification leaves the
/// kernel written without them, to the byte, while the sum over a longer
/// axis, and an argmax over one of size 1, stay.
#[test]
fn a_reduction_over_a_size_1_axis_between_reshapes_is_no_op() {
    let plain = compile(
        "",
        "fn k(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
            let a = x.load([0, 0], [4, 64]).reshape([4, 1, 64]) * w.load([0, 0], [2, 64]).reshape([1, 2, 64]);
            y.store([0, 0], a.sum(2).reshape([4, 2]));
        }",
    );
    let folded = compile(
        "",
        "fn k(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
            let a = x.load([0, 0], [4, 64]).reshape([4, 1, 64]) * w.load([0, 0], [2, 64]).reshape([1, 2, 64]);
            let a = a.reshape([4, 2, 64, 1]).max(3).reshape([4, 2, 64]);
            y.store([0, 0], a.sum(2).reshape([4, 2]));
        }",
    );
    for vectorized in [true, false] {
        assert_eq!(ptx(&plain, vectorized), ptx(&folded, vectorized));
    }
    let f = &folded.funcs[0].func;
    let reduces = count_ops(&f.body, &|k| matches!(k, OpKind::Reduce { .. }));
    assert_eq!(reduces, 1, "only the sum over 64 stays:\n{f}");
    let index = compile(
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<i32>) {
            y.store([0, 0], x.load([0, 0], [4, 1]).argmax(1));
        }",
    );
    let f = &index.funcs[0].func;
    assert_eq!(count_ops(&f.body, &|k| matches!(k, OpKind::Reduce { .. })), 1, "{f}");
}

#[test]
fn a_transposed_tile_is_stored_in_16_byte_runs_through_shared_memory() {
    let k = compile(
        "",
        "fn t(x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let i = block_id(0);
            y.store([0, i], x.load([i, 0], [32, 32]).transpose());
        }",
    );
    // The transpose relabels the layout (its runs go down columns); the
    // store converts it to rows of 16-byte runs through shared memory.
    let p = ptx(&k, true);
    assert!(p.contains("st.global.v4.f32") && !p.contains("st.global.f32"));
    assert_eq!(p.matches("bar.sync").count(), 2);
    assert!(p.contains("st.shared") && p.contains("ld.shared.v4.f32"));
}

#[test]
fn broadcasting_a_row_statistic_needs_no_data_movement() {
    let k = compile(
        "",
        "fn center(x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let r = block_id(0);
            let t = x.load([r, 0], [4, 1024]);
            y.store([r, 0], t - t.sum(1) / 1024.0);
        }",
    );
    // Rows map to warps, so the row sums stay in registers: no shared memory.
    assert_eq!(k.variants[0].shared_bytes, 0);
    assert!(!ptx(&k, true).contains("st.shared"));
}

#[test]
fn loops_carry_registers_and_branch_on_uniform_scalars() {
    let k = compile(
        "",
        "fn l(x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let r = block_id(0);
            let mut acc = zeros([1, 256]);
            for j in 0..cdiv(x.shape(1), 256) {
                acc = acc + x.load([r, j], [1, 256]);
            }
            y.store([r, 0], acc);
        }",
    );
    let p = ptx(&k, true);
    assert!(p.contains("$Lloop") && p.contains("bra $Lloop"));
    assert_eq!(
        count_ops(&k.funcs[0].func.body, &|k| matches!(k, OpKind::For { .. })),
        1
    );
}

#[test]
fn half_precision_is_computed_in_f32_and_rounded() {
    let k = compile(
        "",
        "fn h(x: &Tensor<bf16>, y: &mut Tensor<bf16>) {
            let i = block_id(0);
            let t = x.load([i], [1024]);
            y.store([i], t * t);
        }",
    );
    let p = ptx(&k, true);
    assert!(p.contains("cvt.f32.bf16") && p.contains("cvt.rn.bf16.f32"));
    // Eight bf16 per thread move as one 16-byte vector.
    assert!(p.contains("ld.global.nc.v4.b32"));
}

#[test]
fn a_matmul_loop_is_pipelined_with_cp_async_and_ldmatrix() {
    let k = compile("BM = [128], BN = [128], BK = [32]", MATMUL);
    let v = ptx(&k, true);
    assert!(v.contains("cp.async.cg.shared.global") && v.contains("cp.async.wait_group"));
    assert!(v.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
    assert!(
        v.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
        "B is read transposed"
    );
    assert!(v.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    // The epilogue's 32 KiB conversion tile takes the place of the stages
    // (four of 16 KiB), free once the loop has drained: no static shared
    // memory beside them.
    let vector = k
        .variants
        .iter()
        .find(|v| v.target.is_none() && !v.vectorized.is_empty())
        .expect("variant");
    assert_eq!((vector.shared_bytes, vector.dynamic_shared_bytes), (0, 4 * 16 * 1024));
    assert!(!v.contains(".shared .align 1024 .b8 smem["));
    // The scalar variant can't use 16-byte copies: it stages through registers.
    assert!(!ptx(&k, false).contains("cp.async"));
}

/// A K-loop over a computed range (a split of K) whose tile index holds a
/// constant: the constant is loop-invariant, so the loads are pipelined
/// (TMA and `wgmma` on sm_90a) as in a loop from 0, whether or not the
/// kernel used the same constant before the loop.
#[test]
fn a_constant_tile_index_in_a_loop_over_a_computed_range_is_pipelined() {
    let src = "fn first_rows<T, const BM: usize, const BN: usize, const BK: usize>(
        x: &Tensor<T, { [M, K] }>,
        w: &Tensor<T, { [N, K] }>,
        y: &mut Tensor<f32, { [S, M, N] }>,
    ) {
        let n = block_id(0);
        let split = block_id(1);
        let steps = cdiv(cdiv(K, BK), S);
        let mut acc = zeros([BM, BN]);
        for k in split * steps..min(split * steps + steps, cdiv(K, BK)) {
            acc = mma(x.load([0, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
        }
        y.store([split, 0, n], acc.reshape([1, BM, BN]));
    }";
    let k = compile("T = [bf16], BM = [64], BN = [64], BK = [64], num_warps = 4", src);
    assert!(ptx(&k, true).contains("cp.async.cg.shared.global"));
    let wgmma = k
        .variants
        .iter()
        .find(|v| v.entry.ends_with("_wgmma"))
        .expect("a wgmma variant");
    assert!(text(wgmma).contains("cp.async.bulk.tensor"));
}

/// An f32 128x256 accumulator stored element by element (a misaligned
/// output) goes through shared memory in two parts of 64 KiB, in turns on
/// the same place, so the block fits sm_120's 99 KiB: halves of rows that
/// both the `mma` layout and the store's hold in registers.
#[test]
fn large_portable_conversions_go_through_shared_memory_in_parts() {
    let k = compile("BM = [128], BN = [256], BK = [32]", &MATMUL.replace("bf16", "f32"));
    let scalar = k
        .variants
        .iter()
        .find(|v| v.target.is_none() && v.vectorized.is_empty())
        .expect("scalar variant");
    assert_eq!(scalar.shared_bytes + scalar.dynamic_shared_bytes, 64 * 1024);
    // Twice: write the part's registers, synchronize, read them back in
    // the store's layout (16-byte loads, a quarter of the part's 128 f32
    // registers per thread each).
    let loads = text(scalar).matches("ld.shared.v4.f32").count();
    assert_eq!(loads, 128 * 256 / 256 / 4);
    let convert = &text(scalar)[text(scalar).find("st.shared").expect("conversion")..];
    let first_load = convert.find("ld.shared.v4.f32").expect("reads");
    let second_write = convert[first_load..].find("st.shared").expect("second part") + first_load;
    assert!(convert[first_load..second_write].matches("ld.shared.v4.f32").count() == loads / 2);
    assert!(convert[..first_load].contains("bar.sync") && convert[first_load..second_write].contains("bar.sync"));
}

#[test]
fn two_blocks_that_fit_an_sm_also_run_as_the_two_halves_of_one_persistent_block() {
    let k = compile("BM = [128], BN = [128], BK = [64]", MATMUL);
    let variant = |suffix: &str| {
        k.variants
            .iter()
            .find(|v| v.target.is_none() && v.entry.ends_with(suffix))
            .unwrap_or_else(|| panic!("no variant {suffix}"))
    };
    let (plain, v) = (variant("_v"), variant("_v_persistent"));
    assert_eq!((plain.threads, plain.persistent), (128, false));
    assert!(text(plain).contains("bar.sync 0;"));
    assert_eq!(
        (v.threads, v.persistent, v.vectorized.clone()),
        (256, true, plain.vectorized.clone())
    );
    assert_eq!(v.dynamic_shared_bytes, 2 * plain.dynamic_shared_bytes);
    assert!(text(v).contains(".minnctapersm 1") && text(v).contains(&format!("{}_grid", v.entry)));
    let lines: Vec<&str> = text(v).lines().map(str::trim).collect();
    let operands = |l: &str| -> Vec<String> {
        let rest = l.split_once(' ').map_or("", |(_, r)| r).trim_end_matches(';');
        rest.split(", ").map(str::to_string).collect()
    };
    // The half: the thread index over 128, which then counts within it.
    let half_index = lines
        .iter()
        .find(|l| l.starts_with("shr.u32") && l.ends_with(", 7;"))
        .map(|l| operands(l)[0].clone())
        .expect("half index");
    // Its half of dynamic shared memory, added to every address in it.
    let half = v.dynamic_shared_bytes / 2;
    let offset = lines
        .iter()
        .find(|l| l.starts_with("mul.lo.u32") && l.ends_with(&format!(", {half_index}, {half};")))
        .map(|l| operands(l)[0].clone())
        .expect("half offset");
    let bases: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].ends_with("_dyn_smem;")).collect();
    assert!(!bases.is_empty());
    for i in bases {
        let a = operands(lines[i])[0].clone();
        assert!(
            lines[i + 1..i + 3].contains(&format!("add.s32 {a}, {a}, {offset};").as_str()),
            "shared address at line {i} without the half's offset"
        );
    }
    // Half t of block b computes blocks b + t·G, b + (t + 2)·G, ..
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("mad.lo.u32") && l.contains(&format!(", {half_index}, %r")))
    );
    assert!(lines.iter().any(|l| l.starts_with("mad.lo.u32") && l.contains(", 2, ")));
    // Each half synchronizes on its own named barrier, never the block's.
    let barriers: Vec<&&str> = lines.iter().filter(|l| l.starts_with("bar.sync")).collect();
    assert!(
        !barriers.is_empty()
            && barriers
                .iter()
                .all(|l| l.ends_with(", 128;") && !l.starts_with("bar.sync 0"))
    );
    // 128x256x64 takes eight warps whose registers fill an SM: one block
    // per SM, no persistent two-tile variant.
    let big = compile("BM = [128], BN = [256], BK = [64]", MATMUL);
    assert!(big.variants.iter().all(|v| !v.entry.contains("persistent")));
}

/// The registers between braces after `marker` on each line that has it.
fn braced_registers<'a>(ptx: &'a str, marker: &str, group: usize) -> Vec<&'a str> {
    ptx.lines()
        .filter(|l| l.contains(marker))
        .flat_map(|l| l.split('{').nth(group).and_then(|g| g.split('}').next()))
        .flat_map(|g| g.split(", "))
        .collect()
}

#[test]
fn mma_operands_are_the_registers_ldmatrix_wrote() {
    // Halves split from a word and packed again were moved between
    // registers by ptxas: operands go to `mma` as `ldmatrix` read them.
    let k = compile("BM = [128], BN = [128], BK = [64]", MATMUL);
    let v = ptx(&k, true);
    let read: std::collections::HashSet<&str> = braced_registers(v, "ldmatrix", 1).into_iter().collect();
    let (a, b) = (braced_registers(v, "mma.sync", 2), braced_registers(v, "mma.sync", 3));
    // A warp's 64x64 tile: four K-steps of 16, each four rows of 16 by
    // eight columns of 8 products, on four and two registers.
    assert_eq!((a.len(), b.len()), (128 * 4, 128 * 2));
    assert!(a.iter().chain(&b).all(|r| read.contains(r)), "an operand was repacked");
}

#[test]
fn a_pipelined_loop_carries_its_copy_addresses_from_one_tile_to_the_next() {
    let k = compile("BM = [128], BN = [128], BK = [32]", MATMUL);
    let v = ptx(&k, true);
    // The K-loop's copies: from the wait for the current tile to the commit.
    let body = &v[v.find("cp.async.wait_group").expect("a pipelined loop")..];
    let body = &body[..body.find("cp.async.commit_group").expect("a commit")];
    // 128x32 of `a` and 32x128 of `b` in 16-byte chunks: four each per thread.
    assert_eq!(body.matches("cp.async.cg.shared.global").count(), 8);
    // No address is rebuilt from the tile index: each copy adds a
    // loop-invariant step to the one before it, and each tile's first
    // address moves on by one tile.
    assert!(!body.contains("mul.lo") && !body.contains("mad.wide"), "{body}");
    assert_eq!(body.matches("add.s64").count(), 6 + 2);
    // Bounds along the loop: one comparison per distinct offset along K
    // (one chunk column of `a`, four rows of `b`), against a counter.
    assert_eq!(body.matches("setp.lt.s32").count(), 1 + 4);
    // Each copy lands at an immediate past one register per tile.
    assert_eq!(body.matches("cp.async.cg.shared.global [%r").count(), 8);
    for at in ["+2048]", "+4096]", "+6144]"] {
        assert!(body.contains(at), "rows 32 apart of `a`: 64-byte rows");
    }
    for at in ["+8192]", "+9216]", "+10240]", "+11264]"] {
        assert!(body.contains(at), "rows 8 apart of `b`, 8 KiB past `a`: 128-byte lines");
    }
}

#[test]
fn portable_tf32_rounds_each_operand_once_and_declares_its_occupancy() {
    let k = compile("BM = [128], BN = [128], BK = [32]", &MATMUL.replace("bf16", "f32"));
    let v = ptx(&k, true);
    // Eight warps of 32x64 each: per 8-deep K-step two `a` fragments of
    // four registers and eight `b` fragments of two, each register rounded
    // to nearest once, in one instruction; four K-steps a tile.
    assert_eq!(v.matches("cvt.rn.tf32.f32").count(), 4 * (2 * 4 + 8 * 2));
    assert!(!v.contains("cvt.rna"));
    // `a`'s rows run along K: `ldmatrix` reads its 32 registers four at a
    // time, from four row addresses and immediates. `b`'s run along N,
    // across the fragments' K, which `ldmatrix.trans` cannot transpose in
    // 32-bit elements: read element by element.
    let reads: Vec<&str> = v.lines().filter(|l| l.contains("ldmatrix")).collect();
    assert_eq!(reads.len(), 8);
    assert!(
        reads
            .iter()
            .all(|l| l.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"))
    );
    let rows: std::collections::HashSet<&str> = reads
        .iter()
        .map(|l| l.split('[').nth(1).unwrap().split('+').next().unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(v.matches("ld.shared.f32").count(), 64, "b's 32x64 warp tile");
    // Three 32 KiB stages: shared memory holds two blocks per SM, and 128
    // registers hold a thread's 64 accumulators, two K-steps' fragments
    // and its copies' addresses; so ptxas is asked for two blocks.
    assert!(v.contains(".minnctapersm 2"), "{v}");
    // 128 accumulators a thread: two blocks' 128 registers could not hold
    // them, so one block, whatever shared memory would allow.
    let k = compile("BM = [128], BN = [256], BK = [32]", MATMUL);
    assert!(ptx(&k, true).contains(".minnctapersm 1"));
}

const MATMUL: &str = "fn matmul<const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<bf16>) {
    let m = block_id(1);
    let n = block_id(0);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<bf16>());
}";

#[test]
fn on_sm_90a_a_matmul_loop_runs_wgmma_on_tma_loaded_stages() {
    let k = compile("BM = [128], BN = [256], BK = [64]", MATMUL);
    let w = k
        .variants
        .iter()
        .find(|v| v.target == Some(Target::Sm90a))
        .expect("a wgmma variant");
    assert!(*w.vectorized == [0, 1, 2] && w.entry.ends_with("_wgmma"));
    assert_eq!(w.threads, 384, "two warpgroups, each a 64x256 slab, and the producer's");
    let p = text(w);
    // One thread copies each stage's tiles by TMA and counts them on an mbarrier.
    assert!(p.contains("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"));
    assert!(p.contains("mbarrier.arrive.expect_tx.shared::cta.b64") && p.contains("mbarrier.try_wait.parity"));
    assert!(!p.contains("cp.async.cg") && !p.contains("ldmatrix") && !p.contains("mma.sync"));
    // B (K x N, N contiguous) is read transposed; A is K-major. Four K-steps of 16.
    assert_eq!(
        p.matches("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16")
            .count(),
        4
    );
    assert!(p.contains(", 1, 1, 0, 1;"), "trans-a 0, trans-b 1");
    // The previous K-step's group stays in flight; none after the loop.
    assert!(p.contains("wgmma.wait_group.sync.aligned 1;") && p.contains("wgmma.wait_group.sync.aligned 0;"));
    // Tensor maps: A's 128x64 box and B in four 64-column panels of 64 rows, 128-byte swizzle.
    let maps: Vec<(usize, Vec<u32>, u32)> = w
        .tensor_maps
        .iter()
        .map(|m| (m.param, m.box_dims.to_vec(), m.swizzle_bytes))
        .collect();
    assert_eq!(maps, [(0, vec![64, 128], 128), (1, vec![64, 64], 128)]);
    assert_eq!(p.matches(".param .align 64 .b8").count(), 2);
    // Stages: (128x64 + 64x256) bf16 = 48 KiB each, their full and empty
    // mbarriers, then the 64 KiB tile the accumulator is stored through:
    // three stages leave room for it.
    assert_eq!(
        w.dynamic_shared_bytes,
        (3 * 48 * 1024 + 3 * 16usize).next_multiple_of(1024) + 128 * 256 * 2
    );
    assert_eq!(p.matches("st.global.v4.b32").count(), 16, "16-byte stores");
    // The portable variants are still there for every other GPU.
    assert!(ptx(&k, true).contains("mma.sync") && ptx(&k, false).contains("mma.sync"));
}

#[test]
fn on_sm_90a_a_matmul_is_warp_specialized_on_a_persistent_grid() {
    let k = compile("BM = [128], BN = [256], BK = [64]", MATMUL);
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    let p = text(w);
    assert!(
        w.persistent && p.contains("_grid\n)"),
        "the launched block count comes last"
    );
    // Consumers (two warpgroups) take registers from the producer's warpgroup.
    assert_eq!(w.threads, 3 * 128);
    assert!(p.contains("setmaxnreg.inc.sync.aligned.u32 232;") && p.contains("setmaxnreg.dec.sync.aligned.u32 40;"));
    // One block-wide barrier (after the mbarriers are set up), none per
    // K-step; the epilogue's conversion synchronizes the consumers alone.
    assert_eq!(p.matches("bar.sync 0;").count(), 1);
    assert_eq!(p.matches("bar.sync 1, 256;").count(), 2);
    // Each consumer warp releases a stage; the producer waits for that.
    assert!(p.contains("mbarrier.init.shared::cta.b64") && p.contains("], 8;"));
    assert_eq!(p.matches("mbarrier.arrive.shared::cta.b64").count(), 1);
    assert_eq!(p.matches("mbarrier.try_wait.parity").count(), 2);
    // Blocks of the launch are taken in steps of the blocks running.
    assert!(p.contains("%nctaid.x"));
}

#[test]
fn on_sm_90a_pairs_of_blocks_share_f32_operand_tiles_by_multicast() {
    let k = compile("BM = [128], BN = [256], BK = [32]", &MATMUL.replace("bf16", "f32"));
    let entries: Vec<(&str, u32)> = k
        .variants
        .iter()
        .filter(|v| v.target.is_some())
        .map(|v| (&*v.entry, v.cluster))
        .collect();
    // Each `wgmma` variant, and the same in 2-CTA clusters, which a launch asks for.
    assert_eq!(
        entries,
        [
            ("matmul_128_256_32_wgmma", 1),
            ("matmul_128_256_32_wgmma_s", 1),
            ("matmul_128_256_32_wgmma_cluster", 2),
            ("matmul_128_256_32_wgmma_s_cluster", 2)
        ]
    );
    let w = k.variants.iter().find(|v| v.cluster > 1).expect("paired variant");
    let p = text(w);
    // Launched in clusters of two blocks, which take consecutive blocks.
    assert!(p.contains(".reqnctapercluster 2, 1, 1") && p.contains("%cluster_ctarank"));
    // Per tile, all of it copied here, or this block's half multicast into
    // both blocks when the pair loads the tile alike: A's one panel in
    // halves of its rows, B's eight (32 columns each) four by four.
    let local = p.matches("complete_tx::bytes [").count();
    let multicast = p.matches("complete_tx::bytes.multicast::cluster [").count();
    assert_eq!((local, multicast), (2 + 8, 1 + 4));
    let maps: Vec<Vec<u32>> = w.tensor_maps.iter().map(|m| m.box_dims.to_vec()).collect();
    assert_eq!(maps, [vec![32, 64], vec![32, 2, 4, 4]]);
    // Consumers release each stage in both blocks (8 warps each), the
    // other's through its cluster address, in the loop and after the
    // blocks; the blocks meet after the mbarriers' setup and at exit.
    assert!(p.contains("], 16;"));
    assert_eq!(p.matches("mapa.shared::cluster.u32").count(), 2);
    assert_eq!(p.matches("mbarrier.arrive.shared::cluster.b64 _,").count(), 2);
    assert_eq!(p.matches("barrier.cluster.arrive.release;").count(), 2);
    assert_eq!(p.matches("barrier.cluster.wait.acquire;").count(), 2);
    assert_eq!(p.matches("bar.sync 0;").count(), 0);

    // 16-bit operands: the pair's coupling costs more than the L2 reads it
    // saves (see `lower/cluster.rs`), so no paired variant.
    let k = compile("BM = [128], BN = [256], BK = [64]", MATMUL);
    assert!(
        k.variants
            .iter()
            .all(|v| v.cluster == 1 && !text(v).contains("multicast"))
    );

    // Loop bounds that depend on the block would put the two blocks' stages
    // out of step: no clusters either.
    let causal = compile(
        "BM = [128], BN = [256], BK = [32]",
        "fn lower<const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
            let m = block_id(0);
            let mut acc = zeros([BM, BN]);
            for k in 0..m + 1 {
                acc = mma(a.load([m, k], [BM, BK]), b.load([k, 0], [BK, BN]), acc);
            }
            c.store([m, 0], acc);
        }",
    );
    assert!(
        causal
            .variants
            .iter()
            .all(|v| v.cluster == 1 && !text(v).contains("barrier.cluster"))
    );
}

const LINEAR_F32: &str = "fn linear<const BM: usize, const BN: usize, const BK: usize>(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
    let m = block_id(1);
    let n = block_id(0);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(x.shape(1), BK) {
        acc = mma(x.load([m, k], [BM, BK]), w.load([n, k], [BN, BK]).transpose(), acc);
    }
    y.store([m, n], acc);
}";

#[test]
fn on_sm_90a_an_f32_tile_is_stored_through_tma_a_panel_at_a_time() {
    let k = compile("BM = [128], BN = [128], BK = [32]", LINEAR_F32);
    let sm90a: Vec<_> = k
        .variants
        .iter()
        .filter(|v| v.target.is_some() && v.cluster == 1)
        .collect();
    let (all, copied) = (sm90a[0], sm90a[1]);
    assert!(*all.vectorized == [0, 1, 2] && *copied.vectorized == [0, 1]);
    // Y's box: a 128-byte panel (32 columns) of the tile's 128 rows, 128-byte swizzle.
    let store_map = |v: &tile_compiler::Variant| {
        v.tensor_maps
            .iter()
            .find(|m| m.param == 2)
            .map(|m| (m.box_dims.to_vec(), m.swizzle_bytes, m.tf32))
    };
    // The output keeps its f32 values; the operands' copies round to tf32.
    assert_eq!(store_map(all), Some((vec![32, 128], 128, false)));
    assert!(all.tensor_maps.iter().filter(|m| m.param != 2).all(|m| m.tf32));
    let p = text(all);
    assert!(!p.contains("st.global"));
    // Two ping-pong consumers take turns (on the same code), each storing its
    // tile's four panels through its own 16 KiB of scratch (1024-byte aligned, as the
    // swizzle needs): written (8-byte runs of the accumulator), fenced for
    // the async proxy, copied by the consumer's first thread, whose copy has
    // read the panel before the next is written.
    let stores = p
        .matches("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group")
        .count();
    assert_eq!(stores, 4);
    assert_eq!(p.matches("fence.proxy.async.shared::cta;").count(), stores);
    assert_eq!(p.matches("cp.async.bulk.commit_group;").count(), stores);
    assert_eq!(p.matches("cp.async.bulk.wait_group.read 0;").count(), stores);
    assert!(p.contains(".shared .align 1024 .b8 smem[32768];") && p.contains(", 16384;"));
    assert_eq!(p.matches("st.shared.v2.b32").count(), 64);
    // Six stages of 32 KiB and their mbarriers still fit beside the two panels.
    assert_eq!(all.dynamic_shared_bytes, 6 * 32 * 1024 + 2 * 6 * 8);
    // Where Y's rows may not be 16-byte aligned, the other variant stores
    // element by element from the accumulator.
    assert_eq!(store_map(copied), None);
    assert!(text(copied).contains("st.global.f32") && !text(copied).contains("bulk_group"));

    // Batched, on [1, rows, cols] tiles: 3-d boxes, the batch index outermost.
    let k = compile(
        "BM = [128], BN = [128], BK = [32]",
        "fn batched_linear<const BM: usize, const BN: usize, const BK: usize>(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
            let batch = block_id(1);
            let m = block_id(0);
            let mut acc = zeros([BM, BN]);
            for k in 0..cdiv(x.shape(2), BK) {
                let xk = x.load([batch, m, k], [1, BM, BK]).reshape([BM, BK]);
                let wk = w.load([batch, 0, k], [1, BN, BK]).reshape([BN, BK]);
                acc = mma(xk, wk.transpose(), acc);
            }
            y.store([batch, m, 0], acc.reshape([1, BM, BN]));
        }",
    );
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    assert_eq!(store_map(w), Some((vec![32, 128, 1], 128, false)));
    assert_eq!(
        text(w)
            .matches("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group")
            .count(),
        4
    );

    // An accumulator computed transposed (`a @ b`, b row-major, in tf32)
    // has its columns spread over more threads than a panel's: stored
    // from registers.
    let k = compile("BM = [128], BN = [128], BK = [32]", &MATMUL.replace("bf16", "f32"));
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    assert_eq!(store_map(w), None);
    assert!(text(w).contains("st.global.f32") && !text(w).contains("bulk_group"));

    // A 16-bit tile is converted into 16-byte runs for its store, which
    // then writes whole sectors: no second staging through TMA.
    let k = compile("BM = [128], BN = [128], BK = [64]", MATMUL);
    assert!(k.variants.iter().all(|v| !text(v).contains("bulk_group")));
}

#[test]
fn one_warpgroups_tiles_get_two_consumer_warpgroups_taking_turns() {
    let k = compile("BM = [128], BN = [128], BK = [64]", MATMUL);
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    let p = text(w);
    // One warpgroup computes a 128x128 tile (two 64-row slabs); a second
    // takes every other block; the producer's warpgroup gives them registers.
    assert_eq!(w.threads, 3 * 128);
    assert_eq!(p.matches("wgmma.mma_async.sync.aligned.m64n128k16").count(), 2 * 4);
    assert!(p.contains("setmaxnreg.inc.sync.aligned.u32 232;") && p.contains(".maxnreg 168"));
    // Each team synchronizes alone (named barriers 1 and 2, 128 threads),
    // and stores through its own 32 KiB tile, after the other's.
    assert_eq!(p.matches("bar.sync 0;").count(), 1);
    assert!(!p.contains("bar.sync 1,"));
    let barriers = |what: &str, threads: &str| p.lines().filter(|l| l.contains(what) && l.ends_with(threads)).count();
    assert_eq!(barriers("bar.sync %r", ", 128;"), 2);
    assert!(p.contains(", 32768;"), "the second team's scratch offset");
    // A stage is read by one team's four warps, and the last one of a
    // loop goes back as it ends: released in the loop and after it.
    assert!(p.contains("], 4;"));
    assert_eq!(p.matches("mbarrier.arrive.shared::cta.b64").count(), 2);
    // Each consumer skips the other's blocks: the read stage moves on by
    // their K-steps, modulo the stages, the phase flipping on each wrap.
    assert_eq!(p.matches("rem.u32").count(), 2);
    assert_eq!(p.matches("div.u32").count(), 2);
    // A consumer's K-loop waits for its turn (but its first), which the other
    // consumer passes it after its own K-loop, both consumers' threads counted.
    assert_eq!(barriers("bar.sync %r", ", 256;"), 1);
    assert_eq!(barriers("bar.arrive %r", ", 256;"), 1);
}

#[test]
fn two_mma_loops_keep_wgmma_without_warp_specialization() {
    let k = compile(
        "BM = [64], BN = [64], BK = [64]",
        "fn twice<const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
            let mut x = zeros([BM, BN]);
            for k in 0..cdiv(a.shape(1), BK) {
                x = mma(a.load([0, k], [BM, BK]), b.load([k, 0], [BK, BN]), x);
            }
            let mut y = zeros([BM, BN]);
            for k in 0..cdiv(a.shape(1), BK) {
                y = mma(a.load([1, k], [BM, BK]), b.load([k, 1], [BK, BN]), y);
            }
            c.store([0, 0], x + y);
        }",
    );
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    assert!(!w.persistent && w.threads == 128 && !text(w).contains("setmaxnreg"));
    assert_eq!(text(w).matches("wgmma.commit_group").count(), 2);
}

#[test]
fn a_kernel_wgmma_cannot_serve_keeps_only_portable_variants() {
    // 32 rows: a warpgroup's `wgmma` computes 64.
    let k = compile(
        "BM = [32], BN = [64], BK = [32]",
        "fn thin<const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
            let mut acc = zeros([BM, BN]);
            for k in 0..cdiv(a.shape(1), BK) {
                acc = mma(a.load([0, k], [BM, BK]), b.load([k, 0], [BK, BN]), acc);
            }
            c.store([0, 0], acc);
        }",
    );
    assert!(k.variants.iter().all(|v| v.target.is_none()));
}

#[test]
fn an_accumulator_read_in_the_loop_is_awaited_at_once() {
    // `total` reads each product: its `wgmma`s must be done by then, so
    // the loop waits for all of them (none left running into the next
    // iteration).
    let k = compile(
        "BM = [64], BN = [64], BK = [32]",
        "fn peek<const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
            let mut acc = zeros([BM, BN]);
            let mut total = zeros([BM, BN]);
            for k in 0..cdiv(a.shape(1), BK) {
                acc = mma(a.load([0, k], [BM, BK]), b.load([k, 0], [BK, BN]), acc);
                total = total + acc;
            }
            c.store([0, 0], total);
        }",
    );
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("a wgmma variant");
    let body = loop_body(text(w));
    let commit = body.find("wgmma.commit_group").expect("a product");
    assert!(body[commit..].contains("wgmma.wait_group.sync.aligned 0;"));
    assert!(!body.contains("wgmma.wait_group.sync.aligned 1;"));
}

#[test]
fn tf32_wgmma_reads_a_row_major_b_into_registers() {
    // tf32 `wgmma` reads shared-memory operands K-major only: with a
    // row-major `b` ([K, N]) it computes `b^T a^T`, `b` read from its stage
    // into registers as the A operand, `a` through a descriptor. Both
    // stages' TMA copies round f32 to tf32.
    let k = compile("BM = [128], BN = [128], BK = [32]", &MATMUL.replace("bf16", "f32"));
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    let p = text(w);
    assert!(w.persistent && w.threads == 384);
    let product = "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32";
    assert_eq!(p.matches(product).count(), 4);
    assert!(p.lines().filter(|l| l.contains(product)).all(|l| l.contains("}, {%r")));
    assert!(!p.contains("bar.sync 2, 96;") && !p.contains("cvt.rna"));
    // The stage's values are tf32 already; one mask per register keeps an
    // ALU operation between each load and the `wgmma` that reads it.
    assert_eq!(
        p.matches(", -8192;").count(),
        16,
        "four 8-deep K-steps of four registers"
    );
    assert!(w.tensor_maps.len() == 2 && w.tensor_maps.iter().all(|m| m.tf32));
    // Two groups per K-step, the second half's registers read once the
    // previous iteration's group on them is done; one group left running.
    assert_eq!(p.matches("wgmma.commit_group.sync.aligned;").count(), 2);
    assert_eq!(p.matches("wgmma.wait_group.sync.aligned 1;").count(), 2);
    // No transposing producer: it keeps few registers.
    assert!(p.contains("setmaxnreg.dec.sync.aligned.u32 40;") && p.contains("setmaxnreg.inc.sync.aligned.u32 232;"));
    // `b`'s 32 rows are stored interleaved, by a 4-D box (k / 4 % 2, k % 4,
    // k / 8 innermost first, after 32 columns), so that a warp's reads of
    // four consecutive rows meet no bank conflicts.
    let maps: Vec<(usize, Vec<u32>, bool)> = w
        .tensor_maps
        .iter()
        .filter(|m| m.param < 2)
        .map(|m| (m.param, m.box_dims.to_vec(), m.interleaved_rows))
        .collect();
    assert_eq!(maps, [(0, vec![32, 128], false), (1, vec![32, 2, 4, 4], true)]);
    assert!(p.contains("cp.async.bulk.tensor.4d") && p.contains("cp.async.bulk.tensor.2d"));
}

#[test]
fn tf32_wgmma_reads_an_m_major_a_that_the_producer_transposes() {
    // An `a` loaded M-major (`a^T @ b`) is transposed in its stage by the
    // producer's other warps.
    let k = compile(
        "BM = [128], BN = [128], BK = [32]",
        "fn at_b<const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
            let mut acc = zeros([BM, BN]);
            for k in 0..cdiv(a.shape(0), BK) {
                acc = mma(a.load([k, 0], [BK, BM]).transpose(), b.load([k, 0], [BK, BN]), acc);
            }
            c.store([0, 0], acc);
        }",
    );
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    let p = text(w);
    assert!(w.persistent && w.threads == 384);
    // Three warps transpose: they read every block before any is overwritten,
    // then hand the stage to wgmma's async proxy and arrive on its ready barrier.
    assert!(p.contains("bar.sync 2, 96;") && p.contains("fence.proxy.async.shared::cta;"));
    assert!(p.contains("ld.shared.v4.b32") && p.contains("st.shared.v4.b32"));
    assert!(p.contains("], 96;"), "ready barriers count the 96 transposing threads");
    // The transposers keep more registers than a copying producer, and the
    // consumers ask for no more than it gives up.
    assert!(p.contains("setmaxnreg.dec.sync.aligned.u32 96;") && p.contains("setmaxnreg.inc.sync.aligned.u32 200;"));
}

#[test]
fn tf32_wgmma_serves_x_times_w_transposed() {
    let k = compile(
        "BM = [128], BN = [128], BK = [32]",
        "fn linear<const BM: usize, const BN: usize, const BK: usize>(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
            let mut acc = zeros([BM, BN]);
            for k in 0..cdiv(x.shape(1), BK) {
                acc = mma(x.load([0, k], [BM, BK]), w.load([0, k], [BN, BK]).transpose(), acc);
            }
            y.store([0, 0], acc);
        }",
    );
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
    // Four K-steps of 8 on each of the tile's two 64-row slabs, no
    // transposition flags (tf32 takes none).
    let p = text(w);
    assert_eq!(
        p.matches("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32")
            .count(),
        8
    );
    assert!(p.contains(", 1, 1;") && !p.contains(", 1, 1, 0"));
    assert!(w.persistent && p.contains("setmaxnreg.inc"));
    // On the portable path both operands' rows run along K: `ldmatrix`
    // reads them both.
    let v = ptx(&k, true);
    assert_eq!(v.matches("ldmatrix.sync.aligned.m8n8.x4.shared.b16").count(), 8 + 16);
    assert!(!v.contains("ld.shared.f32"));
}

#[test]
fn num_stages_sets_the_pipeline_depth() {
    let stage = (128 * 64 + 64 * 128) * 2;
    for (stages, wait) in [(2, "cp.async.wait_group 0;"), (5, "cp.async.wait_group 3;")] {
        let k = compile(
            &format!("BM = [128], BN = [128], BK = [64], num_stages = {stages}"),
            MATMUL,
        );
        let v = k
            .variants
            .iter()
            .find(|v| !v.vectorized.is_empty() && v.target.is_none())
            .expect("vector variant");
        assert_eq!(v.dynamic_shared_bytes, stages * stage);
        assert!(
            text(v).contains(wait),
            "{stages} stages: copies run {} ahead",
            stages - 1
        );
        // Two stages leave room for a second block on an SM, so for a
        // variant that runs two as the halves of one persistent block; five do not.
        let persistent = k.variants.iter().find(|v| v.entry.ends_with("_v_persistent"));
        assert_eq!(
            persistent.map(|t| t.dynamic_shared_bytes),
            (stages == 2).then_some(2 * stages * stage)
        );
        // On sm_90a the full and empty mbarriers follow the stages, then
        // the two consumer teams' 32 KiB tiles the accumulator is stored
        // through (past what static shared memory takes).
        let w = k.variants.iter().find(|v| v.target.is_some()).expect("wgmma variant");
        assert_eq!(
            w.dynamic_shared_bytes,
            (stages * stage + 16 * stages).next_multiple_of(1024) + 2 * 128 * 128 * 2
        );
    }
}

#[test]
fn second_variants_copy_aligned_operands_and_store_element_by_element() {
    // For an output whose rows are not 16-byte aligned (an LM head's
    // 50257 columns): TMA still copies `a` and `b`, `c` takes scalar stores.
    let k = compile("BM = [128], BN = [128], BK = [64]", MATMUL);
    let sm90a: Vec<_> = k.variants.iter().filter(|v| v.target.is_some()).collect();
    assert_eq!(sm90a.len(), 2);
    let (all, copied) = (sm90a[0], sm90a[1]);
    assert!(*all.vectorized == [0, 1, 2] && *copied.vectorized == [0, 1]);
    assert!(copied.entry.ends_with("_wgmma_s") && copied.persistent);
    assert_eq!(copied.tensor_maps.len(), 2);
    // Both read `a` and `b` through TMA alone (the launcher may copy them
    // into rows 16 bytes apart); `c` is stored, not copied.
    assert!(*all.tma_only == [0, 1] && *copied.tma_only == [0, 1]);
    assert!(text(all).contains("st.global.v4.b32"));
    assert!(!text(copied).contains("st.global.v") && text(copied).contains("st.global.b16"));
    // The portable path has the same middle variant: `cp.async` copies, element-wise stores.
    let vs = k
        .variants
        .iter()
        .find(|v| v.entry.ends_with("_vs"))
        .expect("portable variant for misaligned outputs");
    assert!(vs.target.is_none() && *vs.vectorized == [0, 1] && vs.tma_only.is_empty());
    assert!(text(vs).contains("cp.async.cg.shared.global") && text(vs).contains("ldmatrix"));
    assert!(!text(vs).contains("st.global.v") && text(vs).contains("st.global.b16"));
}

/// The PTX of the first loop's body: from its label to the branch back.
/// The body of the first loop in `ptx`, from its label to its branch back.
fn loop_body(ptx: &str) -> &str {
    let start = ptx.find("$Lloop").expect("loop");
    let label = &ptx[start..start + ptx[start..].find(':').expect("label")];
    let end = ptx.find(&format!("bra {label};")).expect("branch back");
    &ptx[start..end]
}

/// The library's flash attention (`tile-kernels/src/attention.rs`), as
/// written there: `q`, `k` and `v` from one `[B, T, 3C]` tensor, the causal
/// mask on diagonal steps only, behind a block-uniform `if`.
fn library_attention(consts: &str) -> CompiledKernel {
    let file = include_str!("../../tile-kernels/src/attention.rs");
    let start = file.find("pub fn causal_attention").expect("the kernel");
    let end = start + file[start..].find("\n}\n").expect("its end") + 2;
    compile(
        &format!("T = [bf16], {consts}, num_warps = 4"),
        &file[start..end].replacen("pub fn", "fn", 1),
    )
}

/// Flash attention's loop: the row statistics it carries (`m`, `l`) stay
/// in the layout of the scores they are reduced from, and the queries are
/// converted into `mma` fragments once, before the loop; so the body moves
/// nothing through shared memory but the pipeline's staged keys and values.
/// With heads of 128 (64 queries) that holds because the warps split both
/// products along rows: by the longer side, `acc` would be split along its
/// 128 columns, and each warp would need `p` rows that another computed.
#[test]
fn an_attention_loop_carries_statistics_in_place_and_converts_its_queries_once() {
    for consts in ["BQ = [128], BK = [64], D = [64]", "BQ = [64], BK = [64], D = [128]"] {
        let k = library_attention(consts);
        let body = loop_body(ptx(&k, true));
        assert!(body.contains("cp.async") && body.contains("mma.sync"), "{consts}");
        assert!(
            !body.contains("st.shared") && !body.contains("ld.shared"),
            "{consts}: {body}"
        );
        assert_eq!(
            body.matches("bar.sync").count(),
            1,
            "{consts}: one barrier, the pipeline's"
        );
    }
}

/// On sm_90a both of attention's products run on `wgmma`, the
/// accumulators fresh (`zeros`) or rescaled (`acc * alpha`) and awaited at
/// once; every warp is a consumer (no producer warpgroup, no persistent
/// grid). `p`, computed in the loop, is read from registers; `q`, computed
/// before it, is stored once, swizzled, and read through a descriptor, not
/// held in registers: ptxas 13.0 gave such registers to a tile computed
/// later in a body that branches (the mask's `if`), and the next
/// iteration's `q @ k^T` read that tile (wrong rows on an H100). `q` is
/// stored as loaded, swizzled, without the conversion into the fragment
/// layout. A warpgroup takes 64 queries (`wgmma`'s M), whatever
/// `num_warps` says.
#[test]
fn attention_runs_both_products_on_wgmma_with_q_staged_once() {
    for consts in ["BQ = [128], BK = [64], D = [64]", "BQ = [64], BK = [32], D = [32]"] {
        let k = library_attention(consts);
        let w = k.variants.iter().find(|v| v.target.is_some()).expect("a wgmma variant");
        assert!(
            !w.persistent && !text(w).contains("setmaxnreg"),
            "{consts}: not warp-specialized"
        );
        let body = loop_body(text(w));
        let before = &text(w)[..text(w).find(body).expect("the body")];
        assert!(
            before.contains("fence.proxy.async.shared::cta;"),
            "{consts}: q stored for wgmma"
        );
        // As loaded, not converted first (a round trip through shared
        // memory), and after the first stages' copies are issued.
        assert!(
            !before.contains("ldmatrix") && !before.contains("ld.shared"),
            "{consts}: q not converted before it is stored"
        );
        let first_copy = before.find("cp.async.bulk.tensor").expect("the first stages' copies");
        assert!(
            before.find("st.shared.v4").is_some_and(|q| q > first_copy),
            "{consts}: q stored, 16 bytes at a time, after the copies are issued"
        );
        let products: Vec<&str> = body.lines().filter(|l| l.contains("wgmma.mma_async")).collect();
        let (scores, values): (Vec<&str>, Vec<&str>) = products.iter().partition(|l| l.ends_with(", 0, 0;"));
        assert!(!scores.is_empty() && !values.is_empty(), "{consts}: {products:?}");
        assert!(
            scores.iter().all(|l| l.matches('{').count() == 1),
            "{consts}: q through a descriptor"
        );
        assert!(
            values.iter().all(|l| l.matches('{').count() == 2),
            "{consts}: p from registers"
        );
        let awaited = body.matches("wgmma.wait_group.sync.aligned 0;").count();
        assert_eq!(awaited, 2, "{consts}: both products awaited at once");
        // A warpgroup per 64 queries on `wgmma`, each warp 16 rows; the
        // hint's four warps (32 rows each for 128 queries) on `mma.sync`.
        let queries = if consts.starts_with("BQ = [128]") { 128 } else { 64 };
        assert_eq!(w.threads, 2 * queries, "{consts}: a warpgroup per 64 queries");
        let portable = k
            .variants
            .iter()
            .find(|v| v.target.is_none())
            .expect("a portable variant");
        assert_eq!(portable.threads, 128, "{consts}: four warps on mma.sync");
    }
}

/// Warps that split rows hold every product's accumulator rows: with 128
/// queries, heads of 128 and 128 keys per step, four warps would hold 256
/// accumulator registers a thread (they spilled), so the portable variant
/// takes eight, 16 rows each, as `wgmma`'s two warpgroups do. Its stages
/// (64 KiB each, keys and values) are as many as fit beside `q` and the
/// scratch area: two, not the three the pipeline's budget alone allows.
#[test]
fn attention_warps_split_rows_until_their_accumulators_fit() {
    let k = library_attention("BQ = [128], BK = [128], D = [128]");
    for v in &k.variants {
        assert_eq!(v.threads, 256, "{}: eight warps", v.entry);
    }
    let w = k.variants.iter().find(|v| v.target.is_some()).expect("a wgmma variant");
    let stages = text(w).matches("mbarrier.init").count();
    assert_eq!(stages, 2, "two stages of keys and values");
    assert!(w.dynamic_shared_bytes + w.shared_bytes <= 227 * 1024);
    // Four warps where the accumulators fit: 128 queries, heads of 64.
    let k = library_attention("BQ = [128], BK = [64], D = [64]");
    let portable = k
        .variants
        .iter()
        .find(|v| v.target.is_none())
        .expect("a portable variant");
    assert_eq!(portable.threads, 128);
}

#[test]
fn prefetches_run_before_the_wait_for_the_previous_kernel_and_loads_after() {
    let k = compile(
        "BK = [256]",
        "fn dot<const BK: usize>(x: &Tensor<f32>, w: &Tensor<f32>, y: &mut Tensor<f32>) {
            let n = block_id(0);
            for k in 0..cdiv(x.shape(1), BK) {
                w.prefetch([n, k], [1, BK]);
            }
            let mut acc = zeros([1, BK]);
            for k in 0..cdiv(x.shape(1), BK) {
                acc = acc + x.load([0, k], [1, BK]) * w.load([n, k], [1, BK]);
            }
            y.store([0, n], acc.sum(1));
        }",
    );
    for vectorized in [true, false] {
        let p = ptx(&k, vectorized);
        let at = |what: &str| p.find(what).unwrap_or_else(|| panic!("no `{what}` in\n{p}"));
        assert!(at("prefetch.global.L2") < at("griddepcontrol.wait;"));
        assert!(at("griddepcontrol.wait;") < at("griddepcontrol.launch_dependents;"));
        assert!(at("griddepcontrol.launch_dependents;") < at("ld.global"));
        assert_eq!(p.matches("griddepcontrol.wait;").count(), 1);
    }
    // Without a prefetch, the kernel waits before its first instruction
    // after the parameters: a load comes first.
    let softmax = compile("B = [256]", SOFTMAX);
    let p = ptx(&softmax, true);
    assert!(p.find("griddepcontrol.wait;") < p.find("ld.global"));
}

/// A `get` whose value only addresses prefetches (a hint read) runs
/// before the wait, through L2 alone; the same element read for the
/// result waits, through the non-coherent path as before.
#[test]
fn a_get_only_prefetches_read_runs_before_the_wait() {
    let k = compile(
        "BK = [64]",
        "fn tail<const BK: usize>(len: &Tensor<i32>, x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let early = len.get([0]);
            if early > 0 {
                x.prefetch([0, (early - 1) / BK], [1, BK]);
            }
            let n = len.get([0]);
            y.store([0, 0], x.load([0, max(n - 1, 0) / BK], [1, BK]));
        }",
    );
    for vectorized in [true, false] {
        let p = ptx(&k, vectorized);
        let at = |what: &str| p.find(what).unwrap_or_else(|| panic!("no `{what}` in\n{p}"));
        assert!(at("ld.global.cg.s32") < at("prefetch.global.L2"));
        assert!(at("prefetch.global.L2") < at("griddepcontrol.wait;"));
        assert!(at("griddepcontrol.wait;") < at("ld.global.nc.s32"));
        assert_eq!(p.matches("ld.global.cg").count(), 1, "one hint read");
    }
    // Read for anything else too, the element is no hint: the wait comes first.
    let k = compile(
        "BK = [64]",
        "fn tail<const BK: usize>(len: &Tensor<i32>, x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let n = len.get([0]);
            x.prefetch([0, n / BK], [1, BK]);
            y.store([0, 0], x.load([0, n / BK], [1, BK]));
        }",
    );
    let p = ptx(&k, false);
    assert!(p.find("griddepcontrol.wait;") < p.find("ld.global"));
    assert!(!p.contains("ld.global.cg"));
}

#[test]
fn tensors_read_element_by_element_do_not_hold_back_the_vector_variant() {
    // `len` (one element a sequence, say) is read with `get`, `hits` is
    // scattered into, and `count` counted with `fetch_add` and stored a
    // one-element tile: none of them can take vectors, so the vector
    // variant asks alignment of `x` and `y` alone.
    let k = compile(
        "B = [256]",
        "fn scale<const B: usize>(
            x: &Tensor<f32>,
            len: &Tensor<i32>,
            hits: &mut Tensor<i32>,
            count: &mut Tensor<i32>,
            y: &mut Tensor<f32>,
        ) {
            let r = block_id(0);
            let n = len.get([r]);
            let t = x.load([r, 0], [1, B]);
            hits.scatter([arange(4)], full([4], n));
            let before = count.fetch_add([0], 1);
            count.store([1], zeros::<i32>([1]));
            y.store([r, 0], t * (n + before).cast::<f32>());
        }",
    );
    assert_eq!(vectorized(&k), [("scale_256_v", &[0, 4][..]), ("scale_256_s", &[][..])]);
    assert!(ptx(&k, true).contains("ld.global.nc.v4.f32"));
}

#[test]
fn flagged_tensors_move_in_lines_in_every_variant() {
    // `inbox` and `peer` hold flagged tiles: both variants ask them 16-byte
    // aligned and move them in 16-byte lines (data word, flag, data word,
    // flag), stored once and polled with a warp vote; `x` and `y` take
    // vectors in the first variant only.
    let k = compile(
        "B = [1024]",
        "fn swap<const B: usize>(
            x: &Tensor<f32>,
            inbox: &Tensor<f32>,
            peer: &mut Tensor<f32>,
            y: &mut Tensor<f32>,
            round: u32,
        ) {
            let b = block_id(0);
            peer.store_flagged([0, b], x.load([0, b], [1, B]), round);
            y.store([0, b], inbox.load_flagged([0, b], [1, B], round));
        }",
    );
    assert_eq!(
        vectorized(&k),
        [("swap_1024_v", &[0, 1, 2, 3][..]), ("swap_1024_s", &[1, 2][..])]
    );
    for v in &k.variants {
        let p = text(v);
        assert!(p.contains("st.volatile.global.v4.b32"), "{}", v.entry);
        assert!(p.contains("ld.volatile.global.v4.b32"), "{}", v.entry);
        assert!(p.contains("vote.sync.all.pred"), "{}", v.entry);
        assert!(!p.contains("fence") && !p.contains("membar"), "{}: no fence", v.entry);
    }
    let scalar = k
        .variants
        .iter()
        .find(|v| v.entry.ends_with("_s"))
        .expect("the s variant");
    assert!(!text(scalar).contains("ld.global.nc.v4.f32"));
}

#[test]
fn gathers_that_follow_one_another_share_one_meeting_of_the_cluster() {
    let src = "fn combine(x: &Tensor<f32>, y: &mut Tensor<f32>) {
        let t = x.load([block_id(0), 0], [1, 64]);
        let parts = t.cluster_gather(4);
        let sums = t.sum(1).cluster_gather(4);
        let again = parts.sum(0).cluster_gather(4);
        y.store([0, 0], parts + again + sums.sum(0));
    }";
    let k = compile("", src);
    for v in &k.variants {
        let p = text(v);
        // Every block in clusters of 4, with one buffer per gather.
        assert_eq!((v.cluster, v.gathers, v.persistent), (4, true, false), "{}", v.entry);
        assert!(p.contains(".reqnctapercluster 4, 1, 1"), "{}", v.entry);
        assert_eq!(p.matches(".b8 cluster_buffer").count(), 3, "{}", v.entry);
        // The start's arrival, then two meetings: `parts` and `sums` share
        // the first; `again` reads `parts`, so it stores after it.
        assert_eq!(p.matches("barrier.cluster.arrive.aligned;").count(), 3, "{}", v.entry);
        assert_eq!(p.matches("barrier.cluster.wait.aligned;").count(), 3, "{}", v.entry);
        let first_meeting = p
            .find("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait")
            .expect("a meeting");
        let buffer1 = p.find(", cluster_buffer1;").expect("buffer 1");
        let buffer2 = p.find(", cluster_buffer2;").expect("buffer 2");
        assert!(buffer1 < first_meeting && first_meeting < buffer2, "{}", v.entry);
    }
}

/// A matrix–vector product's K loop, as `tile-kernels`' `gemv` writes it:
/// `[1, BN, BK]` products of a broadcast row of `x` and `BN` rows of `w`,
/// summed along K `R` at a time.
fn gemv(consts: &str) -> CompiledKernel {
    compile(
        &format!("num_warps = 4, {consts}"),
        "fn gemv<const BN: usize, const BK: usize, const R: usize>(
            x: &Tensor<f32, { [1, K] }>,
            w: &Tensor<f32, { [N, K] }>,
            y: &mut Tensor<f32, { [1, N] }>,
        ) {
            let n = block_id(0);
            let mut acc = zeros([1, BN, BK / R]);
            for k in 0..cdiv(K, BK) {
                let xs = x.load([0, k], [1, BK]).reshape([1, 1, BK]);
                let ws = w.load([n, k], [BN, BK]).reshape([1, BN, BK]);
                acc = acc + (xs * ws).reshape([1, BN, BK / R, R]).sum(3).reshape([1, BN, BK / R]);
            }
            y.store([0, n], acc.sum(2).reshape([1, BN]));
        }",
    )
}

#[test]
fn a_matrix_vector_loop_loads_its_vector_once_a_block() {
    // `[1, 4, 512]` f32: a thread's 4 elements along K, 32 lanes along K,
    // and the warps moved off the rows onto K, so that the row of `x` is
    // loaded once a block (1 piece a thread), not once a warp (4), and
    // each thread holds its piece of all 4 rows of `w`.
    let k = gemv("BN = [4], BK = [512], R = [1]");
    let v = ptx(&k, true);
    let body = loop_body(v);
    assert_eq!(body.matches("ld.global.nc.v4.f32").count(), 1 + 4, "{body}");
    // The sum along K then crosses the warps once, after the loop.
    assert_eq!(v.matches("bar.sync").count(), 2, "{v}");
}

#[test]
fn a_streaming_loop_declares_the_occupancy_that_holds_its_loads_in_flight() {
    // 4 rows of 1,024 f32 a step (32 registers of loads a thread, beside
    // the row of `x` and the per-step sums): more than ptxas keeps
    // undeclared, so the entry asks for the blocks that leave room for
    // them all, at 128 threads a block.
    let declared = |consts: &str| {
        let k = gemv(consts);
        let v = ptx(&k, true);
        assert!(v.contains(".maxntid 128, 1, 1"), "{v}");
        v.split(".minnctapersm ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .map(|n| n.parse::<u32>().expect("a count"))
    };
    assert_eq!(declared("BN = [4], BK = [1024], R = [4]"), Some(5));
    // A step of few registers needs no declaration.
    assert_eq!(declared("BN = [2], BK = [512], R = [1]"), None);
    // Twice the loads would leave an SM fewer than 16 warps: none either.
    assert_eq!(declared("BN = [4], BK = [2048], R = [4]"), None);
    assert_eq!(declared("BN = [8], BK = [1024], R = [4]"), None);
}
