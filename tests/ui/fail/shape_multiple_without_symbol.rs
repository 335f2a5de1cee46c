// A multiple's symbol takes its size from a dimension declared with it
// alone: `3 * C` needs some tensor's shape to have `C`.
#[tile::kernel]
fn keys(qkv: &Tensor<f32, { [L, 3 * C] }>, k: &mut Tensor<f32>) {
    let i = block_id(0);
    k.store([i, 0], qkv.load([i, 1], [1, 64]));
}

fn main() {}
