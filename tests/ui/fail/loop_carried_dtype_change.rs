// A loop-carried variable keeps its element type.
#[tile::kernel]
fn narrow(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let mut acc = zeros([1, 64]);
    for j in 0..x.shape(1) / 64 {
        acc = (acc + x.load([r, j], [1, 64])).cast::<bf16>();
    }
    y.store([r, 0], acc);
}

fn main() {}
