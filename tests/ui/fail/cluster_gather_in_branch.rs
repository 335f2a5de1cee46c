// Every block of a cluster must reach a `cluster_gather` once: not in a branch.
#[tile::kernel(N = [4])]
fn gather_sometimes<const N: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let t = x.load([block_id(0), 0], [1, 64]);
    if block_id(0) % 2 == 0 {
        y.store([0, 0], t.cluster_gather(N));
    }
}

fn main() {}
