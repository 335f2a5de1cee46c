// Loops run their whole range: no `break`.
#[tile::kernel]
fn first_rows(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    for j in 0..4 {
        if j == 2 {
            break;
        }
        y.store([r, j], x.load([r, j], [1, 64]));
    }
}

fn main() {}
