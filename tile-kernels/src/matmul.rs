//! Matrix products on the tensor cores: `c = a @ b` with `a: [M, K]`,
//! `b: [K, N]`, row-major, accumulated in f32 (`mma`), stored as `T`.

/// `c = a @ b`. Grid: `(cdiv(N, BN), cdiv(M, BM))`.
#[tile::kernel(T = [f16, bf16, f32], BM = [64, 128], BN = [64, 128], BK = [32])]
pub fn matmul<T, const BM: usize, const BN: usize, const BK: usize>(a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) {
    let m = block_id(1);
    let n = block_id(0);
    let mut acc = zeros([BM, BN]);
    for k in 0..cdiv(a.shape(1), BK) {
        acc = mma(a.load([m, k], [BM, BK]), b.load([k, n], [BK, BN]), acc);
    }
    c.store([m, n], acc.cast::<T>());
}

/// The grid for `c: [m, n]` with `BM x BN` tiles.
pub fn grid(m: usize, n: usize, bm: usize, bn: usize) -> (u32, u32) {
    (n.div_ceil(bn) as u32, m.div_ceil(bm) as u32)
}
