// A reduction axis names a dimension of the tile.
#[tile::kernel]
fn row_sum(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    y.store([r, 0], x.load([r, 0], [1, 64]).sum(2));
}

fn main() {}
