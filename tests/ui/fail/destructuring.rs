// One name per `let`: no destructuring.
#[tile::kernel]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let (i, j) = (block_id(0), block_id(1));
    y.store([i, j], x.load([i, j], [1, 64]));
}

fn main() {}
