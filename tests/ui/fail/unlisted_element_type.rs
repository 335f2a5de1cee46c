// Host code can use only the listed element types of a type parameter.
use tile::prelude::*;

#[tile::kernel(T = [f32, bf16])]
fn copy<T>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [64]));
}

fn main() {
    let x = HostTensor::from_vec(vec![f16::ONE; 64], &[64]).unwrap();
    let mut y = HostTensor::zeros(&[64]);
    copy::launch::<f16, _>(&Cpu, 1, &x, &mut y).unwrap();
}
