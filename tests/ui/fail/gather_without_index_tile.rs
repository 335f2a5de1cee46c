// `gather` reads elements at an index tile; one element is `.get([..])`.
#[tile::kernel]
fn pick(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) + x.gather([i, 0]));
}

fn main() {}
