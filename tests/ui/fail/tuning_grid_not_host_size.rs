// The grid is computed on the host from sizes, not from tiles or tensors.
#[tile::kernel(BLOCK = [16, 32], grid = x.load([0], [BLOCK]))]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
