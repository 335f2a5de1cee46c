// A shape symbol is a name of its own, not a parameter of the kernel.
#[tile::kernel]
fn copy(x: &Tensor<f32, { [n] }>, y: &mut Tensor<f32>, n: i32) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) * n as f32);
}

fn main() {}
