// bf16 is listed, but every configuration is for f32: nothing builds it.
#[tile::kernel(T = [f32, bf16], configs = [(T = f32, BLOCK = 16), (T = f32, BLOCK = 32)])]
fn copy<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {}
