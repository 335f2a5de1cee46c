// Sorts order numbers: a `bool` tile is cast to an integer first.
#[tile::kernel]
fn sorted_flags(x: &Tensor<f32>, y: &mut Tensor<i32>) {
    let i = block_id(0);
    let positive = x.load([i], [64]) > 0.0;
    y.store([i], positive.sort(0).cast::<i32>());
}

fn main() {}
