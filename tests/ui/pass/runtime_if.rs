// `if` on a run-time scalar: a `let mut` name assigned in a branch is merged
// after the `if`, and an untyped literal initial value takes the type the
// branch assigns.
use tile::prelude::*;

#[tile::kernel]
fn maybe_scale(x: &Tensor<f32>, y: &mut Tensor<f32>, flag: i32) {
    let i = block_id(0);
    let mut s = 1.0;
    if flag == 1 {
        s = 3.0;
    } else if flag == 2 {
        s = -1.0;
    }
    y.store([i], x.load([i], [32]) * s);
}

fn main() {
    let x = HostTensor::from_vec(vec![2.0f32; 32], &[32]).unwrap();
    for (flag, want) in [(0, 2.0), (1, 6.0), (2, -2.0)] {
        let mut y = HostTensor::zeros(&[32]);
        maybe_scale::launch(&Cpu, 1, &x, &mut y, flag).unwrap();
        assert!(y.to_vec().iter().all(|&v| v == want), "flag {flag}");
    }
}
