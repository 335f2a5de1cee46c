// `atomic_max` and `atomic_min` combine integers: the GPU has no atomic
// maximum of floats.
#[tile::kernel]
fn running_max(x: &Tensor<f32>, best: &mut Tensor<f32>) {
    let i = block_id(0);
    best.atomic_max([full([64], 0)], x.load([i], [64]));
}

fn main() {}
