// `if` is a statement, not a value.
#[tile::kernel]
fn relu(x: &Tensor<f32>, y: &mut Tensor<f32>, leaky: i32) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    let slope = if leaky == 1 { 0.01 } else { 0.0 };
    y.store([i], max(t, t * slope));
}

fn main() {}
