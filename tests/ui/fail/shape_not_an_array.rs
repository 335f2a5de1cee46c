// A tensor's declared shape is an array in braces, one entry per dimension.
#[tile::kernel]
fn copy(x: &Tensor<f32, { N }>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
