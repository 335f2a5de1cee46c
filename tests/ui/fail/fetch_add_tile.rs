// `fetch_add` adds one scalar for the block: a tile's elements go through `atomic_add`.
#[tile::kernel]
fn count(x: &Tensor<i32>, n: &mut Tensor<i32>) {
    let i = block_id(0);
    let before = n.fetch_add([0], x.load([i], [64]));
    n.store([1], full([1], before));
}

fn main() {}
