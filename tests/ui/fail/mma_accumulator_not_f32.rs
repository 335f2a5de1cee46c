// The tensor cores accumulate in f32.
#[tile::kernel]
fn matmul(a: &Tensor<bf16>, b: &Tensor<bf16>, c: &mut Tensor<bf16>) {
    let m = block_id(0);
    let acc = zeros::<bf16>([64, 64]);
    let acc = mma(a.load([m, 0], [64, 16]), b.load([0, 0], [16, 64]), acc);
    c.store([m, 0], acc);
}

fn main() {}
