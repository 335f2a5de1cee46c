// `prefetch` names a tile as `load` does: one tile-grid coordinate per
// dimension of the tile's shape.
#[tile::kernel]
fn early(w: &Tensor<f32>, y: &mut Tensor<f32>) {
    let n = block_id(0);
    w.prefetch([n, 0], [256]);
    y.store([n], w.load([n], [256]));
}

fn main() {}
