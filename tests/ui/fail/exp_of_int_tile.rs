// Transcendentals take floats.
#[tile::kernel]
fn exps(y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], exp(arange(64)));
}

fn main() {}
