// A cluster is 1, 2, 4 or 8 blocks.
#[tile::kernel]
fn gather_three(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let t = x.load([block_id(0), 0], [1, 64]);
    y.store([0, 0], t.cluster_gather(3));
}

fn main() {}
