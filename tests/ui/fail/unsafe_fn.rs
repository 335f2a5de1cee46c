// A kernel can't be `unsafe`.
#[tile::kernel]
unsafe fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
