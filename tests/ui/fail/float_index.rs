// Indices are integers.
#[tile::kernel]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([1.0], [64]));
}

fn main() {}
