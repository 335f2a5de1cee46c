//! Matrix products on the tensor cores: `c = a @ b` with `a: [M, K]`,
//! `b: [K, N]`, row-major, accumulated in f32 (`mma`), stored as `T`.

/// `c = a @ b`. A 1-D grid of [`blocks`] blocks; consecutive blocks take
/// the tiles of `GROUP` block-rows column by column, so a wave of blocks
/// shares operand tiles in L2.
#[tile::kernel(T = [f16, bf16, f32], BM = [64, 128], BN = [64, 128], BK = [32])]
pub fn matmul<T, const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) {
    let group = 8;
    let tiles_m = cdiv(a.shape(0), BM);
    let width = group * cdiv(b.shape(1), BN);
    let first_m = block_id(0) / width * group;
    let rows = min(tiles_m - first_m, group);
    let m = first_m + block_id(0) % width % rows;
    let n = block_id(0) % width / rows;
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<T>());
}

/// Blocks to launch for `c: [m, n]` with `bm x bn` tiles.
pub fn blocks(m: usize, n: usize, bm: usize, bn: usize) -> u32 {
    (m.div_ceil(bm) * n.div_ceil(bn)) as u32
}
