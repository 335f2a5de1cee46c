// A loop-carried variable keeps its shape.
#[tile::kernel]
fn shrink(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let mut acc = zeros([1, 64]);
    for j in 0..4 {
        acc = acc.sum(1);
    }
    y.store([r, 0], acc);
}

fn main() {}
