// Atomics are tensor methods, not functions.
#[tile::kernel]
fn total(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    atomic_add(y, [0], x.load([i], [64]).sum(0));
}

fn main() {}
