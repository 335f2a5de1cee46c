//! Shared by the benches: CUDA-event timing and random inputs.

use tile::{Element, Stream, Tensor};

/// A stream on the first GPU, after printing its name and architecture;
/// `None` (after one line saying so) without a GPU.
pub fn gpu_stream(bench: &str) -> Option<Stream> {
    let device = tile::testing::gpu_or_skip(bench)?;
    let (major, minor) = device.compute_capability();
    println!("{} (sm_{major}{minor})", device.name());
    Some(device.stream())
}

/// Median milliseconds of `reps` runs of `f(i)` (after one warm-up run),
/// each timed with events on `s`; `i` counts the runs, for rotating inputs.
pub fn median_ms(s: &Stream, reps: usize, mut f: impl FnMut(usize)) -> f64 {
    f(0);
    let mut times: Vec<f64> = (0..reps)
        .map(|i| {
            let start = s.record().unwrap();
            f(i);
            let end = s.record().unwrap();
            start.elapsed_ms(&end).unwrap() as f64
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[reps / 2]
}

/// A tensor of `shape` filled with values uniform in `[lo, hi)` (xorshift, seeded).
pub fn random<T: Element>(
    s: &Stream,
    shape: &[usize],
    seed: u64,
    lo: f32,
    hi: f32,
    of: impl Fn(f32) -> T,
) -> Tensor<T> {
    let n: usize = shape.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data: Vec<T> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            of(lo + (x >> 40) as f32 / (1u64 << 24) as f32 * (hi - lo))
        })
        .collect();
    s.upload_slice(&data, shape).unwrap()
}
