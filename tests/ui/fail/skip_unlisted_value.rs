// `skip` names combinations of listed values: 64 is not a listed BLOCK.
#[tile::kernel(BLOCK = [16, 32], skip = [(BLOCK = 64,)])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
