// Constant tiles are made with `full(shape, value)`, not `[v; N]`.
#[tile::kernel]
fn ones(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let one = [1.0; 64];
    y.store([i], x.load([i], [64]) + one);
}

fn main() {}
