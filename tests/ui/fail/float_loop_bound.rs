// Loop bounds are block-uniform i32 scalars.
#[tile::kernel]
fn sum_rows(x: &Tensor<f32>, y: &mut Tensor<f32>, n: f32) {
    let r = block_id(0);
    let mut acc = zeros([1, 64]);
    for j in 0..n {
        acc = acc + x.load([r, j], [1, 64]);
    }
    y.store([r, 0], acc);
}

fn main() {}
