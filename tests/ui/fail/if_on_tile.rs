// `if` branches on a block-uniform scalar, not on a tile.
#[tile::kernel]
fn relu(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    if t > 0.0 {
        y.store([i], t);
    }
}

fn main() {}
