// Every configuration names every const parameter: this one gives BK none.
#[tile::kernel(configs = [(BM = 64, BK = 32), (BM = 128)])]
fn copy<const BM: usize, const BK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BM * BK]));
}

fn main() {}
