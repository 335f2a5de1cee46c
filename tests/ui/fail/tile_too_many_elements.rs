// A tile holds at most 65536 elements.
#[tile::kernel]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i, 0], x.load([i, 0], [512, 256]));
}

fn main() {}
