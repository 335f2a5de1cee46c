// Reshape keeps the element count.
#[tile::kernel]
fn flatten(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    y.store([r], x.load([r, 0], [2, 32]).reshape([32]));
}

fn main() {}
