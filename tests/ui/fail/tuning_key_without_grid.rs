// A tuning key goes with the grid the generated `run` launches with.
#[tile::kernel(BLOCK = [16, 32], key = [x.shape(0)])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
