// Float literals are f32.
#[tile::kernel]
fn scale(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) * 0.5f64);
}

fn main() {}
