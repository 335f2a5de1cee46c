// Broadcasting: each dimension must match or be 1.
#[tile::kernel]
fn add(a: &Tensor<f32>, b: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let s = a.load([r, 0], [4, 64]) + b.load([r, 0], [4, 128]);
    y.store([r, 0], s);
}

fn main() {}
