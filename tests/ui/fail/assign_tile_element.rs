// Tiles are immutable: elements can't be assigned.
#[tile::kernel]
fn zero_first(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let mut t = x.load([i], [64]);
    t[0] = 0.0;
    y.store([i], t);
}

fn main() {}
