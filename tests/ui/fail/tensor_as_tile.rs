// A tensor is not a tile: load one first.
#[tile::kernel]
fn scale(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x * 2.0);
}

fn main() {}
