// Values assigned in a loop are carried from one iteration to the next: a
// tile accumulator and an integer counter that starts as an untyped literal.
use tile::prelude::*;

#[tile::kernel(BLOCK = [16])]
fn row_mean<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let tiles = cdiv(x.shape(1), BLOCK);
    let mut acc = zeros([1, BLOCK]);
    let mut n = 0;
    for j in 0..tiles {
        acc = acc + x.load([r, j], [1, BLOCK]);
        n += 1;
    }
    y.store([r, 0], acc.sum(1) / (n * BLOCK) as f32);
}

fn main() {
    let (rows, cols) = (3, 48);
    let x = HostTensor::from_vec((0..rows * cols).map(|j| (j / cols) as f32).collect(), &[rows, cols]).unwrap();
    let mut y = HostTensor::zeros(&[rows, 1]);
    row_mean::launch::<16, _>(&Cpu, rows as u32, &x, &mut y).unwrap();
    assert_eq!(y.to_vec(), vec![0.0, 1.0, 2.0]);
}
