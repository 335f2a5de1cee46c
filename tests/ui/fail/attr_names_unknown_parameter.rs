// The attribute lists values only for the kernel's generic parameters.
#[tile::kernel(BLOCK = [64], WIDTH = [2, 4])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
