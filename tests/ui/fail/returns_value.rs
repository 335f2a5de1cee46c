// A kernel returns nothing: results are stored into tensors.
#[tile::kernel]
fn total(x: &Tensor<f32>) -> f32 {
    let i = block_id(0);
    x.load([i], [64]).sum(0)
}

fn main() {}
