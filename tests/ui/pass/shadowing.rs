// `let` shadows like Rust: a name can be rebound with a new shape or element
// type, a loop variable hides an outer name only inside the loop, and a `let`
// in a loop body does not leak out of it.
use tile::prelude::*;

#[tile::kernel]
fn shadow(x: &Tensor<f32>, y: &mut Tensor<bf16>) {
    let i = block_id(0);
    let t = x.load([i], [32]);
    let t = t * t;
    let t = t.cast::<bf16>();
    let mut acc = t;
    for i in 0..2 {
        let t = acc + 1.0;
        acc = t;
    }
    y.store([i], acc);
}

fn main() {
    let x = HostTensor::from_vec((0..64).map(|j| (j % 4) as f32).collect(), &[64]).unwrap();
    let mut y = HostTensor::zeros(&[64]);
    shadow::launch(&Cpu, 2, &x, &mut y).unwrap();
    for (j, v) in y.to_vec().iter().enumerate() {
        let x = (j % 4) as f32;
        assert_eq!(v.to_f32(), x * x + 2.0);
    }
}
