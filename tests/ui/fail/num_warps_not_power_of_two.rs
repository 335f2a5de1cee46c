// num_warps is a power of two from 1 to 32.
#[tile::kernel(num_warps = 3)]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
