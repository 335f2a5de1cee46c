// A stored tile has the tensor's element type.
#[tile::kernel]
fn to_bf16(x: &Tensor<f32>, y: &mut Tensor<bf16>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) * 2.0);
}

fn main() {}
