//! Drawing a token from each row of logits on the GPU, the decode step's
//! pick: `argmax::run_gumbel` plain, with top-k 50, top-p 0.9, and both,
//! on bf16 rows of GPT-2's 50,257 columns, against greedy `argmax::run`;
//! and `topk::run`'s 50 largest values and columns.
//! `benches/torch_sample.py` times PyTorch's (`transformers`') pipelines
//! on the same shapes: `torch.topk(x, 50)` alone, and top-k/top-p
//! filtering with `softmax` and `multinomial`. Run on a GPU:
//!
//! ```text
//! cargo bench --bench sample       # here, or the built binary on the GPU machine
//! python3 benches/torch_sample.py
//! ```
//!
//! Each time is the median of 100 runs timed with CUDA events, after one
//! warm-up run; the logits stay in L2 between runs, as after the LM head.

#[allow(dead_code)] // the helpers this bench does not use
mod common;

use common::{gpu_stream, median_ms, random};
use tile::bf16;
use tile_kernels::argmax::{self, Draw};
use tile_kernels::topk;

/// GPT-2's vocabulary.
const COLS: usize = 50257;

fn main() {
    let Some(s) = gpu_stream("sample") else {
        return;
    };
    for rows in [1, 16, 256] {
        let x = random(&s, &[rows, COLS], rows as u64, -8.0, 8.0, bf16::from_f32);
        let keys = s.upload_slice(&(0..rows as u32).collect::<Vec<_>>(), &[rows]).unwrap();
        let (mut value, mut index) = (s.zeros::<f32>(&[rows]).unwrap(), s.zeros::<i32>(&[rows]).unwrap());
        let mut scratch = argmax::ArgmaxScratch::new(&s, rows, COLS).unwrap();
        let greedy = median_ms(&s, 100, |_| {
            argmax::run(&s, &x, &mut scratch, &mut value, &mut index).unwrap()
        });
        let mut time = |top_k, top_p| {
            let draw = Draw {
                temperature: 0.8,
                top_k,
                top_p,
            };
            1e3 * median_ms(&s, 100, |_| {
                argmax::run_gumbel(&s, (&x, &keys), (draw, 0), &mut value, &mut index).unwrap()
            })
        };
        let plain = time(None, None);
        let (k, p, both) = (time(Some(50), None), time(None, Some(0.9)), time(Some(50), Some(0.95)));
        let mut top = topk::TopkScratch::new(&s, rows, COLS).unwrap();
        let (mut values, mut columns) = (
            s.zeros::<bf16>(&[rows, 50]).unwrap(),
            s.zeros::<i32>(&[rows, 50]).unwrap(),
        );
        let topk = 1e3
            * median_ms(&s, 100, |_| {
                topk::run(&s, &x, &mut top, &mut values, &mut columns).unwrap()
            });
        println!(
            "{rows} x {COLS} bf16: greedy {:.1} us; sampled at 0.8: plain {plain:.1} us, top-k 50 {k:.1} us, \
             top-p 0.9 {p:.1} us, top-k 50 + top-p 0.95 {both:.1} us; topk(50) {topk:.1} us",
            1e3 * greedy
        );
    }
}
