// A stored tile fits the sizes its tensor declares: a `[4, 1]` column of
// row sums can't land in a tensor declared one row high.
#[tile::kernel]
fn row_sums(x: &Tensor<f32, { [M, N] }>, sums: &mut Tensor<f32, { [1, M] }>) {
    let i = block_id(0);
    sums.store([0, i], x.load([i, 0], [4, 64]).sum(1));
}

fn main() {}
