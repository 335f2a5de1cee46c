// `signal` writes its flag: the tensor is `&mut`.
#[tile::kernel]
fn done(y: &mut Tensor<f32>, flags: &Tensor<u32>, round: u32) {
    y.store([0], full([64], 1.0));
    flags.signal([0], round);
}

fn main() {}
