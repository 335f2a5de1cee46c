// Kernels never synchronize threads: the compiler inserts the barriers.
#[tile::kernel]
fn barrier(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    syncthreads();
    y.store([i], t);
}

fn main() {}
