// Every type parameter lists the element types to build.
#[tile::kernel]
fn copy<T>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
