// Tiles and scalars are values: nothing to dereference.
#[tile::kernel]
fn scale(x: &Tensor<f32>, y: &mut Tensor<f32>, a: f32) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) * *a);
}

fn main() {}
