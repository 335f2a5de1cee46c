// Host code can use only the listed values of a const parameter.
use tile::prelude::*;

#[tile::kernel(BLOCK = [8])]
fn copy<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]));
}

fn main() {
    let x = HostTensor::from_vec(vec![1.0f32; 7], &[7]).unwrap();
    let mut y = HostTensor::zeros(&[7]);
    copy::launch::<7, _>(&Cpu, 1, &x, &mut y).unwrap();
}
