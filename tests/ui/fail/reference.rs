// Tiles are values: there are no references to them.
#[tile::kernel]
fn reference(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    let r = &t;
    y.store([i], r);
}

fn main() {}
