// A block waits for one flag at a time: `wait` takes a scalar.
#[tile::kernel]
fn after(x: &Tensor<f32>, flags: &Tensor<u32>, y: &mut Tensor<f32>) {
    flags.wait([0], full([4], 1u32));
    y.store([0], x.load([0], [64]));
}

fn main() {}
