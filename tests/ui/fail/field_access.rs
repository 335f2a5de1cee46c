// Tensors expose methods, not fields.
#[tile::kernel]
fn cols(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let n = x.len;
    y.store([i], x.load([i], [64]) * n);
}

fn main() {}
