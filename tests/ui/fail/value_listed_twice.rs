// Each value of a specialization list is listed once.
#[tile::kernel(BLOCK = [64, 128, 64])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
