// Loop ranges are half-open.
#[tile::kernel]
fn sum_rows(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let mut acc = zeros([1, 64]);
    for j in 0..=3 {
        acc = acc + x.load([r, j], [1, 64]);
    }
    y.store([r, 0], acc);
}

fn main() {}
