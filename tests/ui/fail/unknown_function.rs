// A kernel calls only DSL operations.
#[tile::kernel]
fn activation(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], sigmoid(x.load([i], [64])));
}

fn main() {}
