// `.pad(value)` follows a load.
#[tile::kernel]
fn padded(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    y.store([i], t.pad(0.0));
}

fn main() {}
