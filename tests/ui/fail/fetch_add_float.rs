// `fetch_add` counts in integer tensors.
#[tile::kernel]
fn total(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let before = y.fetch_add([0], x.get([i]));
    y.store([1], full([1], before));
}

fn main() {}
