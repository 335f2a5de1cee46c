// The accumulator has the product's shape [M, N].
#[tile::kernel]
fn matmul(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
    let m = block_id(0);
    let acc = mma(a.load([m, 0], [64, 16]), b.load([0, 0], [16, 64]), zeros([64, 32]));
    c.store([m, 0], acc);
}

fn main() {}
