// num_stages is the depth of the pipelines feeding `mma`: 2 to 8 stages.
#[tile::kernel(num_stages = 1)]
fn copy(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {}
