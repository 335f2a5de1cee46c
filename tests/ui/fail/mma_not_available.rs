// `mma` is not available yet.
#[tile::kernel]
fn matmul(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
    let m = block_id(0);
    let n = block_id(1);
    let acc = zeros([64, 64]);
    let acc = mma(a.load([m, 0], [64, 16]), b.load([0, n], [16, 64]), acc);
    c.store([m, n], acc);
}

fn main() {}
