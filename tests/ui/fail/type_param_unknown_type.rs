// A type parameter lists DSL element types.
#[tile::kernel(T = [f32, f64])]
fn copy<T>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
