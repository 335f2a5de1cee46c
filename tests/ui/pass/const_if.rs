// `if` on a compile-time condition keeps only the taken branch: the other one
// is never checked, so it may hold code that is invalid for this value
// (`[64 / BLOCK, ..]` is a zero-sized shape when BLOCK = 128).
use tile::prelude::*;

#[tile::kernel(BLOCK = [32, 128])]
fn small_or_large<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let i = block_id(0);
    let t = x.load([i], [BLOCK]);
    if BLOCK < 64 {
        let pairs = t.reshape([64 / BLOCK, BLOCK / 2]);
        y.store([i], (pairs * 2.0).reshape([BLOCK]));
    } else {
        y.store([i], t + 1.0);
    }
}

fn main() {
    let x = HostTensor::from_vec((0..128).map(|j| j as f32).collect(), &[128]).unwrap();
    let mut y = HostTensor::zeros(&[128]);
    small_or_large::launch::<32, _>(&Cpu, 4, &x, &mut y).unwrap();
    assert!(y.to_vec().iter().enumerate().all(|(j, &v)| v == 2.0 * j as f32));
    small_or_large::launch::<128, _>(&Cpu, 1, &x, &mut y).unwrap();
    assert!(y.to_vec().iter().enumerate().all(|(j, &v)| v == j as f32 + 1.0));
}
