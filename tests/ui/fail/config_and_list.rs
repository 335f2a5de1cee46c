// With `configs`, a const parameter's values come from them alone.
#[tile::kernel(BLOCK = [16, 32], configs = [(BLOCK = 64,)])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
