// A load past the tensor's edge reads the padding value: rows of 5 columns in
// 8-wide tiles, padded with -inf so that the row maximum ignores the edge.
use tile::prelude::*;

#[tile::kernel(BLOCK = [8])]
fn row_max<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    let r = block_id(0);
    let t = x.load([r, 0], [1, BLOCK]).pad(f32::NEG_INFINITY);
    y.store([r, 0], t.max(1));
}

fn main() {
    let x = HostTensor::from_vec((0..15).map(|j| -(j as f32)).collect(), &[3, 5]).unwrap();
    let mut y = HostTensor::zeros(&[3, 1]);
    row_max::launch::<8, _>(&Cpu, 3, &x, &mut y).unwrap();
    assert_eq!(y.to_vec(), vec![0.0, -5.0, -10.0]);
}
