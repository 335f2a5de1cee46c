// The DSL never converts element types implicitly.
#[tile::kernel]
fn mixed(a: &Tensor<f32>, b: &Tensor<bf16>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], a.load([i], [64]) + b.load([i], [64]));
}

fn main() {}
