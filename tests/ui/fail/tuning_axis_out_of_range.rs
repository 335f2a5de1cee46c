// `x` is indexed with one coordinate: it has no axis 1.
#[tile::kernel(BLOCK = [16, 32], grid = cdiv(x.shape(1), BLOCK))]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
