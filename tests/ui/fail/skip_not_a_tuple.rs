// `skip` takes a list of `(NAME = value, ..)` tuples.
#[tile::kernel(BLOCK = [16, 32], skip = [BLOCK])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
