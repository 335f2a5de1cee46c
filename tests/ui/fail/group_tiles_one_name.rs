// `group_tiles` returns a row and a column: destructure both.
#[tile::kernel]
fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let m = group_tiles(block_id(0), 4, 4, 2);
    y.store([m, 0], x.load([m, 0], [1, 64]));
}

fn main() {}
