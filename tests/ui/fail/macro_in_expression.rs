// Macros can't be used in a kernel body, in expressions either.
#[tile::kernel]
fn sizes(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let n = concat!("6", "4");
    y.store([i], x.load([i], [64]) * n);
}

fn main() {}
