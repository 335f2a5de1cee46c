// An integer literal fits its type.
#[tile::kernel]
fn offset(x: &Tensor<i32>, y: &mut Tensor<i32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]) + 4294967296);
}

fn main() {}
