// `while` is not part of the DSL: loops run over a range.
#[tile::kernel]
fn sum_rows(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let mut acc = zeros([1, 64]);
    let mut j = 0;
    while j < x.shape(1) {
        acc = acc + x.load([r, j], [1, 64]);
        j = j + 1;
    }
    y.store([r, 0], acc.sum(1));
}

fn main() {}
