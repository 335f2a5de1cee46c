// Kernels never name threads.
#[tile::kernel]
fn per_thread(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let lane = thread_idx();
    y.store([i], x.load([i], [64]) + lane);
}

fn main() {}
