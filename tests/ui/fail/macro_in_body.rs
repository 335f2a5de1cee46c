// Macros can't be used in a kernel body.
#[tile::kernel]
fn debug(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    println!("block {}", i);
    y.store([i], x.load([i], [64]));
}

fn main() {}
