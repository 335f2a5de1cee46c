// Every `let` has a value: tiles are immutable values.
#[tile::kernel]
fn late(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t;
    t = x.load([i], [64]);
    y.store([i], t);
}

fn main() {}
