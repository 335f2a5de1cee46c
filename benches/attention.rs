//! Causal attention throughput on GPT-2 124M's attention shapes (12 heads of
//! 64) and on 16 heads of 128 (a 2048-wide model), batch x length 8 x 1024,
//! 4 x 2048 and 2 x 4096: `attention::run` (its tiling printed as queries x
//! keys per step), each other tiling built, and on Hopper `run` on the
//! portable path too, in TFLOP/s. Run on a GPU:
//!
//! ```text
//! benches/with_pytorch.sh attention                 # this bench, then PyTorch SDPA on the same shapes
//! ```
//!
//! FLOPs counted: `4 * B * H * T^2 * D / 2`, the two products over the
//! causal half of the scores, as FlashAttention counts them. Each figure is
//! the median of 20 launches alternating between two input sets.

mod common;

use common::{gpu_stream, median_ms, random};
use tile::{Element, Stream, Tensor, bf16, f16};
use tile_kernels::attention;

const SETS: usize = 2;
/// (heads, head size) of each model shape.
const HEADS: [(usize, usize); 2] = [(12, 64), (16, 128)];

fn tflops(batch: usize, t: usize, (heads, d): (usize, usize), ms: f64) -> f64 {
    4.0 * (batch * heads * t * t * d) as f64 / 2.0 / ms / 1e9
}

fn bench<T: Element>(s: &Stream, dtype: &str, batch: usize, t: usize, of: impl Fn(f32) -> T + Copy) {
    for (heads, d) in HEADS {
        let c = heads * d;
        let qkvs: Vec<Tensor<T>> = (0..SETS)
            .map(|i| random(s, &[batch, t, 3 * c], i as u64 + 1, -2.0, 2.0, of))
            .collect();
        let mut outs: Vec<Tensor<T>> = (0..SETS).map(|_| s.zeros(&[batch, t, c]).unwrap()).collect();
        let ms = median_ms(s, 20, |i| {
            attention::run(s, &qkvs[i % SETS], &mut outs[i % SETS], heads).unwrap()
        });
        let (queries, keys) = attention::tiling::<T>(s.device(), t, d);
        print!(
            "{dtype:<5} {batch}x{t:<5} h={heads} d={d:<3}  run {:>7.1} TFLOP/s ({ms:.3} ms, {queries}x{keys})",
            tflops(batch, t, (heads, d), ms)
        );
        let scale = 1.0 / (d as f32).sqrt();
        let built = attention::causal_attention::KERNEL.specializations(&[T::DTYPE]);
        let others = built
            .iter()
            .map(|c| c.iter().map(|&v| v as usize).collect::<Vec<_>>())
            .filter(|c| c[2] == d && c[..2] != [queries, keys]);
        for consts in others {
            let grid = attention::grid(batch, t, heads, consts[0]);
            let group = attention::group_height::<T>(s.device(), (batch, t, heads, d), (consts[0], consts[1]));
            let ms = median_ms(s, 20, |i| {
                let (qkv, out) = (&qkvs[i % SETS], &mut outs[i % SETS]);
                attention::causal_attention::launch_with(s, &consts, grid, qkv, out, heads as i32, scale, group)
                    .unwrap()
            });
            print!(
                "  {}x{} {:>7.1}",
                consts[0],
                consts[1],
                tflops(batch, t, (heads, d), ms)
            );
        }
        // The portable path (`mma.sync`), where `run` takes `wgmma` (Hopper).
        if s.device().target() == tile::Target::Sm90a {
            s.device().use_arch_specific(false);
            let ms = median_ms(s, 20, |i| {
                attention::run(s, &qkvs[i % SETS], &mut outs[i % SETS], heads).unwrap()
            });
            s.device().use_arch_specific(true);
            print!("  portable {:>7.1}", tflops(batch, t, (heads, d), ms));
        }
        println!();
    }
}

fn main() {
    let Some(s) = gpu_stream("attention bench") else {
        return;
    };
    for (batch, t) in [(8, 1024), (4, 2048), (2, 4096)] {
        bench::<bf16>(&s, "bf16", batch, t, bf16::from_f32);
        bench::<f16>(&s, "f16", batch, t, f16::from_f32);
        bench::<f32>(&s, "f32", batch, t, |x| x);
    }
}
