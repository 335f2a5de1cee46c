// Tiles can't be indexed element by element.
#[tile::kernel]
fn first(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    let v = t[0];
    y.store([i], t - v);
}

fn main() {}
