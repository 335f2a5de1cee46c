// `loop` is not part of the DSL: loops run over a range.
#[tile::kernel]
fn forever(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    loop {
        y.store([i], x.load([i], [64]));
    }
}

fn main() {}
