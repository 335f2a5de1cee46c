// Items (fn, struct, use, ...) can't be declared inside a kernel.
#[tile::kernel]
fn with_helper(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    fn square(v: f32) -> f32 {
        v * v
    }
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
