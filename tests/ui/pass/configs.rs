// `configs` lists the const values to build, each for every listed element
// type or for those it names: here BLOCK = 16 for both types and 32 for
// bf16 alone. `launch::<f32, 32, _>` does not compile
// (tests/ui/fail/config_combination_not_built.rs); `launch_with`, whose
// values come at run time, returns a typed error (`Error::NotBuilt`).
use tile::prelude::*;

#[tile::kernel(T = [f32, bf16], configs = [(BLOCK = 16,), (T = bf16, BLOCK = 32)])]
fn double<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]) * 2);
}

fn main() {
    let x = HostTensor::from_vec((0..32).map(|j| j as f32).collect(), &[32]).unwrap();
    let mut y = HostTensor::zeros(&[32]);
    double::launch::<f32, 16, _>(&Cpu, 2, &x, &mut y).unwrap();
    assert!(y.to_vec().iter().enumerate().all(|(j, &v)| v == 2.0 * j as f32));
    let err = double::launch_with(&Cpu, &[32], 1, &x, &mut y).unwrap_err();
    assert!(matches!(err, tile::Error::NotBuilt { .. }), "{err}");

    let xb = HostTensor::from_vec((0..32).map(|j| bf16::from_f32(j as f32)).collect(), &[32]).unwrap();
    let mut yb = HostTensor::zeros(&[32]);
    double::launch::<bf16, 32, _>(&Cpu, 1, &xb, &mut yb).unwrap();
    assert!(yb.to_vec().iter().enumerate().all(|(j, &v)| v.to_f32() == 2.0 * j as f32));
    // Three specializations, each with its portable variants.
    assert_eq!(double::KERNEL.variants.len(), 3 * 2);
}
