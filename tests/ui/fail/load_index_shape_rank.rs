// A load names one coordinate per dimension of its tile shape.
#[tile::kernel]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i, 0], x.load([i], [1, 64]));
}

fn main() {}
