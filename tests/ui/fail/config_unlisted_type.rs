// A configuration restricts itself to listed element types: i32 is not one.
#[tile::kernel(T = [f32, bf16], configs = [(T = i32, BLOCK = 16)])]
fn copy<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
