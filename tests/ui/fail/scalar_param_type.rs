// Scalar parameters are f32, i32 or u32.
#[tile::kernel]
fn scale(a: f64, x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) * a);
}

fn main() {}
