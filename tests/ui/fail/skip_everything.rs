// Skipping every combination leaves nothing to build.
#[tile::kernel(BLOCK = [16], skip = [(BLOCK = 16,)])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
