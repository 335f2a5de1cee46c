// Every tensor parameter is used, so that its rank is known.
#[tile::kernel]
fn fill(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], full([64], 1.0));
}

fn main() {}
