// `bitcast` reads 32 bits as another 32-bit type: half types are widened first.
#[tile::kernel]
fn bits(x: &Tensor<bf16>, y: &mut Tensor<u32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]).bitcast::<u32>());
}

fn main() {}
