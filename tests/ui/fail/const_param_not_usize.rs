// Const parameters are `usize`.
#[tile::kernel(BLOCK = [64])]
fn copy<const BLOCK: u32>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
