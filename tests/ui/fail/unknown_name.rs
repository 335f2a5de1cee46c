// Every name is a parameter, a const parameter or a `let`.
#[tile::kernel]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
