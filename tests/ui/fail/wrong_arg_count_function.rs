// DSL functions take a fixed number of arguments.
#[tile::kernel]
fn exp_scaled(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], exp(x.load([i], [64]), 2.0));
}

fn main() {}
