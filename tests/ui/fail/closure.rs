// Closures are not part of the DSL.
#[tile::kernel]
fn closure(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let double = |v| v * 2.0;
    y.store([i], double(x.load([i], [64])));
}

fn main() {}
