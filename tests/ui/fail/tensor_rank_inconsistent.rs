// A tensor has one rank: every access uses the same number of coordinates.
#[tile::kernel]
fn two_ranks(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let a = x.load([i], [64]);
    let b = x.load([i, 0], [1, 64]);
    y.store([i], a + b.reshape([64]));
}

fn main() {}
