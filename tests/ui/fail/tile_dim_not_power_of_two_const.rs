// A const parameter used as a tile dimension is checked for every listed value.
#[tile::kernel(BLOCK = [64, 96])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
