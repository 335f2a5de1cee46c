// NumPy broadcasting: a rank-1 tile lines up with the last axis of a rank-2
// tile, a reduction keeps its axis as 1 so it broadcasts back along it, and
// scalars broadcast everywhere; a rank-1 mask also selects in rank 2.
use tile::prelude::*;

#[tile::kernel(ROWS = [4], BLOCK = [8])]
fn centered_bias<const ROWS: usize, const BLOCK: usize>(
    x: &Tensor<f32>,
    b: &Tensor<f32>,
    y: &mut Tensor<f32>,
    scale: f32,
) {
    let r = block_id(0);
    let t = x.load([r, 0], [ROWS, BLOCK]);
    let bias = b.load([0], [BLOCK]);
    let mean = t.sum(1) / BLOCK as f32;
    let out = (t - mean) * scale + bias;
    let left = arange(BLOCK) < BLOCK / 2;
    y.store([r, 0], select(left, out, 0.0));
}

fn main() {
    let (rows, cols) = (8, 8);
    let x = HostTensor::from_vec((0..rows * cols).map(|j| (j % cols) as f32).collect(), &[rows, cols]).unwrap();
    let b = HostTensor::from_vec((0..cols).map(|c| 100.0 * c as f32).collect(), &[cols]).unwrap();
    let mut y = HostTensor::full(&[rows, cols], f32::NAN);
    centered_bias::launch::<4, 8, _>(&Cpu, 2, &x, &b, &mut y, 2.0).unwrap();
    for (j, &v) in y.to_vec().iter().enumerate() {
        let c = j % cols;
        let want = if c < 4 {
            (c as f32 - 3.5) * 2.0 + 100.0 * c as f32
        } else {
            0.0
        };
        assert_eq!(v, want, "element {j}");
    }
}
