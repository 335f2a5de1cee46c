// Only a `let mut` name can be assigned.
#[tile::kernel]
fn accumulate(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let acc = zeros([1, 64]);
    for j in 0..x.shape(1) / 64 {
        acc = acc + x.load([r, j], [1, 64]);
    }
    y.store([r, 0], acc);
}

fn main() {}
