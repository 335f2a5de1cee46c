//! The `k` largest of each row and their columns, largest first
//! (`torch.topk`): in passes, each cutting chunks of its input to their
//! best 64 with the DSL's `topk`. The first pass reads the row, a block
//! of one warp a chunk of 1,024 columns; the next ones cut the candidates
//! the same way, until one chunk holds them all. Ties go to the lower column,
//! NaN is the largest value (as in `sort_desc`).

use tile::{Backend, Element, TensorView};

/// Each chunk of `C` columns of a row (a block, one warp), cut to its
/// best `K` values (as f32) and their columns, at the chunk's place in
/// `values`/`columns` (`K` a chunk).
#[tile::kernel(T = [f32, f16, bf16], C = [1024], K = [64], num_warps = 1)]
pub fn topk_columns<T, const C: usize, const K: usize>(
    x: &Tensor<T, { [M, N] }>,
    values: &mut Tensor<f32, { [M, P] }>,
    columns: &mut Tensor<i32, { [M, P] }>,
) {
    let parts = cdiv(N, C);
    let row = block_id(0) / parts;
    let part = block_id(0) % parts;
    let t = x.load([row, part], [1, C]).pad(f32::NEG_INFINITY);
    values.store([row, part], t.topk(1, K).cast::<f32>());
    columns.store([row, part], t.argtopk(1, K) + part * C as i32);
}

/// [`topk_columns`] over candidates: the best `K` of each chunk of `C`
/// candidates in `values`/`columns` (rows of `Q`), their columns carried.
#[tile::kernel(T = [f32, f16, bf16], C = [1024], K = [64], num_warps = 1)]
pub fn topk_candidates<T, const C: usize, const K: usize>(
    values: &Tensor<f32, { [M, Q] }>,
    columns: &Tensor<i32, { [M, Q] }>,
    best: &mut Tensor<T, { [M, P] }>,
    at: &mut Tensor<i32, { [M, P] }>,
) {
    let parts = cdiv(Q, C);
    let row = block_id(0) / parts;
    let part = block_id(0) % parts;
    let t = values.load([row, part], [1, C]).pad(f32::NEG_INFINITY);
    best.store([row, part], t.topk(1, K).cast::<T>());
    at.store(
        [row, part],
        columns.gather([row, part * C as i32 + t.argtopk(1, K)]).pad(-1),
    );
}

/// Columns a chunk holds (a warp's), and what a chunk keeps.
const CHUNK: usize = 1024;
const KEEP: usize = 64;

/// [`run`]'s scratch for rows of `[rows, cols]`: each pass's candidates
/// but the last's (at least one pass before it). Make it once for a shape
/// and reuse it.
pub struct TopkScratch<B: Backend> {
    passes: Vec<(B::Tensor<f32>, B::Tensor<i32>)>,
    cols: usize,
}

impl<B: Backend> TopkScratch<B> {
    /// Scratch for rows of `[rows, cols]`.
    pub fn new(on: &B, rows: usize, cols: usize) -> tile::Result<Self> {
        let mut passes = Vec::new();
        let mut len = cols;
        while passes.is_empty() || len > CHUNK {
            len = len.div_ceil(CHUNK) * KEEP;
            passes.push((on.zeros(&[rows, len])?, on.zeros(&[rows, len])?));
        }
        Ok(TopkScratch { passes, cols })
    }
}

/// The `k` largest of each row of `x: [rows, cols]` into `values: [rows, k]`
/// and their columns into `columns: [rows, k]`, largest first, for `k` from
/// 1 to 64 and at most `cols`; `scratch` made for `x`'s shape.
pub fn run<T: Element, B: Backend>(
    on: &B,
    x: &B::Tensor<T>,
    scratch: &mut TopkScratch<B>,
    values: &mut B::Tensor<T>,
    columns: &mut B::Tensor<i32>,
) -> tile::Result<()> {
    let (rows, cols) = crate::softmax::rows_cols(x.shape())?;
    let k = values.shape().get(1).copied().unwrap_or(0);
    if k == 0 || k > KEEP || k > cols {
        return Err(tile::Error::Shape(format!(
            "topk keeps 1 to {KEEP} columns of rows of {cols}: `values` is {:?}",
            values.shape()
        )));
    }
    if values.shape() != [rows, k] || columns.shape() != [rows, k] {
        return Err(tile::Error::Shape(format!(
            "topk of {:?} writes values and columns of [{rows}, {k}], not {:?} and {:?}",
            x.shape(),
            values.shape(),
            columns.shape()
        )));
    }
    if scratch.cols != cols || scratch.passes.first().is_some_and(|(v, _)| v.shape()[0] != rows) {
        return Err(tile::Error::Shape(format!(
            "topk of {:?} needs scratch made for that shape",
            x.shape()
        )));
    }
    let Some(((first_v, first_c), rest)) = scratch.passes.split_first_mut() else {
        return Err(tile::Error::Shape("topk scratch holds no pass".into()));
    };
    let consts = [CHUNK, KEEP];
    let grid = |len: usize| (rows * len.div_ceil(CHUNK)) as u32;
    topk_columns::launch_with(on, &consts, grid(cols), x, first_v, first_c)?;
    let mut from = (&*first_v, &*first_c);
    for (v, c) in rest.iter_mut() {
        topk_candidates::launch_with(on, &consts, grid(from.0.shape()[1]), from.0, from.1, v, c)?;
        from = (&*v, &*c);
    }
    topk_candidates::launch_with(on, &consts, grid(from.0.shape()[1]), from.0, from.1, values, columns)
}
