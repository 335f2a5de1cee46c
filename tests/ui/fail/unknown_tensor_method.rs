// Tensors have load, store, get and shape.
#[tile::kernel]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.read([i], [64]));
}

fn main() {}
