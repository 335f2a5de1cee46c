// Only a `&mut Tensor` can be stored into.
#[tile::kernel]
fn in_place(x: &Tensor<f32>) {
    let i = block_id(0);
    x.store([i], x.load([i], [64]) * 2.0);
}

fn main() {}
