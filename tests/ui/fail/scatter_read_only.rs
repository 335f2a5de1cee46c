// Only a `&mut Tensor` can be scattered into.
#[tile::kernel]
fn permute_rows(x: &Tensor<f32>, dest: &Tensor<i32>) {
    let i = block_id(0);
    x.scatter([dest.load([i], [64])], x.load([i], [64]));
}

fn main() {}
