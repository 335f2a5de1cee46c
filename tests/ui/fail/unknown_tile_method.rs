// Tiles have a fixed set of methods.
#[tile::kernel]
fn row_softmax(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    y.store([r, 0], x.load([r, 0], [1, 64]).softmax(1));
}

fn main() {}
