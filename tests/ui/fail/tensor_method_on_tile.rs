// `.load` is a tensor method; a tile has no `.load`.
#[tile::kernel]
fn twice(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    y.store([i], t.load([i], [64]));
}

fn main() {}
