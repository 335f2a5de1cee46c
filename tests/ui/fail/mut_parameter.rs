// Kernel parameters can't be `mut`.
#[tile::kernel]
fn count(mut n: i32, y: &mut Tensor<i32>) {
    n = n + 1;
    y.store([0], full([1], n));
}

fn main() {}
