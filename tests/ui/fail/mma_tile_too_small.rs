// mma tiles are built from 16x8x16 tensor-core steps.
#[tile::kernel]
fn matmul(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<f32>) {
    let m = block_id(0);
    let acc = mma(a.load([m, 0], [8, 16]), b.load([0, 0], [16, 64]), zeros([8, 64]));
    c.store([m, 0], acc);
}

fn main() {}
