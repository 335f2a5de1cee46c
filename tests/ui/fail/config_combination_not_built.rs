// BLOCK = 32 is built for bf16 only: with f32 it is not a configuration.
use tile::prelude::*;

#[tile::kernel(T = [f32, bf16], configs = [(BLOCK = 16,), (T = bf16, BLOCK = 32)])]
fn double<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]) * 2);
}

fn main() {
    let x = HostTensor::<f32>::zeros(&[32]);
    let mut y = HostTensor::<f32>::zeros(&[32]);
    double::launch::<f32, 32, _>(&Cpu, 1, &x, &mut y).unwrap();
}
