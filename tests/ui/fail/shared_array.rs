// Kernels never allocate shared memory: the compiler stages tiles itself.
#[tile::kernel]
fn staged(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let buf = shared_array::<f32>([64]);
    y.store([i], x.load([i], [64]) + buf);
}

fn main() {}
