// `unsafe` is not part of the DSL: the compiler generates every access.
#[tile::kernel]
fn raw(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    unsafe {
        y.store([i], x.load([i], [64]));
    }
}

fn main() {}
