// A kernel's blocks form one kind of cluster: every gather names it.
#[tile::kernel]
fn gather_twice(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let t = x.load([block_id(0), 0], [1, 64]);
    y.store([0, 0], t.cluster_gather(2));
    y.store([1, 0], t.cluster_gather(4));
}

fn main() {}
