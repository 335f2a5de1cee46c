// Untyped literals take the element type of the tile they meet: `0.5` and `1`
// become bf16 next to a bf16 tile, `3` becomes i32 next to an i32 tile, and
// arithmetic on literals and const parameters folds at compile time.
use tile::prelude::*;

#[tile::kernel(BLOCK = [16])]
fn affine<const BLOCK: usize>(x: &Tensor<bf16>, n: &Tensor<i32>, y: &mut Tensor<bf16>, m: &mut Tensor<i32>) {
    let i = block_id(0);
    y.store([i], x.load([i], [BLOCK]) * 0.5 + 1);
    m.store([i], n.load([i], [BLOCK]) * (BLOCK / 8 * 2) - 3);
}

fn main() {
    let xs: Vec<bf16> = (0..32).map(|j| bf16::from_f32(j as f32)).collect();
    let ns: Vec<i32> = (0..32).collect();
    let x = HostTensor::from_vec(xs, &[32]).unwrap();
    let n = HostTensor::from_vec(ns, &[32]).unwrap();
    let mut y = HostTensor::zeros(&[32]);
    let mut m = HostTensor::zeros(&[32]);
    affine::launch::<16, _>(&Cpu, 2, &x, &n, &mut y, &mut m).unwrap();
    for j in 0..32 {
        assert_eq!(y.to_vec()[j].to_f32(), j as f32 * 0.5 + 1.0);
        assert_eq!(m.to_vec()[j], j as i32 * 4 - 3);
    }
}
