// A shape symbol is a name of its own, not the kernel's element type.
#[tile::kernel(T = [f32])]
fn copy<T>(x: &Tensor<T, { [T] }>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
