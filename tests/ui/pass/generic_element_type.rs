// A type parameter builds the kernel for each listed element type; literals
// and the padding value adopt whichever type `T` is.
use tile::prelude::*;

#[tile::kernel(T = [f32, bf16], BLOCK = [16])]
fn double<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>, sum: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [BLOCK]).pad(0.0);
    y.store([i], t * 2 + 0.5);
    sum.store([i], t.cast::<f32>().sum(0));
}

fn main() {
    let xs: Vec<f32> = (0..20).map(|j| j as f32).collect();
    let mut sum = HostTensor::zeros(&[2]);

    let x = HostTensor::from_vec(xs.clone(), &[20]).unwrap();
    let mut y = HostTensor::zeros(&[20]);
    double::launch::<f32, 16, _>(&Cpu, 2, &x, &mut y, &mut sum).unwrap();
    assert!(y.to_vec().iter().enumerate().all(|(j, &v)| v == 2.0 * j as f32 + 0.5));
    assert_eq!(sum.to_vec(), vec![120.0, 70.0]);

    let x = HostTensor::from_vec(xs.iter().map(|&v| bf16::from_f32(v)).collect(), &[20]).unwrap();
    let mut y = HostTensor::zeros(&[20]);
    double::launch::<bf16, 16, _>(&Cpu, 2, &x, &mut y, &mut sum).unwrap();
    assert!(
        y.to_vec()
            .iter()
            .enumerate()
            .all(|(j, &v)| v.to_f32() == 2.0 * j as f32 + 0.5)
    );
    assert_eq!(sum.to_vec(), vec![120.0, 70.0]);
}
