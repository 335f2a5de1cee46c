//! Running sums along rows: `y[r, j] = x[r, 0] + .. + x[r, j]`, each block
//! taking [`ROWS`] rows `BLOCK` columns at a time and carrying each row's
//! running total from tile to tile. Sums accumulate in f32.

use tile::{Backend, Element};

/// Rows per block of [`cumsum`].
pub const ROWS: usize = 4;

/// `y = cumsum(x, axis 1)` for `x, y: [M, N]`. Grid: `cdiv(M, ROWS)`.
#[tile::kernel(T = [f32, bf16, f16], R = [4], BLOCK = [1024])]
pub fn cumsum<T, const R: usize, const BLOCK: usize>(x: &Tensor<T, { [M, N] }>, y: &mut Tensor<T, { [M, N] }>) {
    let r = block_id(0);
    let mut carry = zeros([R, 1]);
    for j in 0..cdiv(N, BLOCK) {
        let t = x.load([r, j], [R, BLOCK]).cast::<f32>();
        y.store([r, j], (t.cumsum(1) + carry).cast::<T>());
        carry = carry + t.sum(1);
    }
}

/// The running sums along the rows of `x: [M, N]` into `y` on `on`.
pub fn run<T: Element, B: Backend>(on: &B, x: &B::Tensor<T>, y: &mut B::Tensor<T>) -> tile::Result<()> {
    let (rows, _) = crate::softmax::rows_cols(tile::TensorView::shape(x))?;
    cumsum::launch_with(on, &[ROWS, 1024], rows.div_ceil(ROWS) as u32, x, y)
}
