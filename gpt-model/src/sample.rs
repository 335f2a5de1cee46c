//! Picking the next token from one position's logits, as `transformers`
//! samples: temperature, then top-k, then top-p (nucleus); greedy at
//! temperature 0. Seeded: a seed reproduces a sample, and each sequence of a
//! batch draws from its own generator, so a batch samples what its prompts
//! sample alone. Decode steps pick their tokens on the backend
//! ([`Sampling::draw`]), keyed by the same generators; the host picks the
//! first token from the prompt's logits, by the same rules.

use crate::{GptError, Result};
pub use tile_kernels::argmax::Draw;

/// How to pick tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Divides the logits; 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens, and any as likely as the
    /// `k`-th (as `transformers` does).
    pub top_k: Option<usize>,
    /// Keep the fewest most likely tokens whose probabilities sum to `p` or
    /// more, and any as likely as the last of them; `p` in (0, 1].
    pub top_p: Option<f32>,
    /// Seeds every sequence's generator.
    pub seed: u64,
}

impl Sampling {
    /// Greedy decoding: always the most likely token.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_k: None,
        top_p: None,
        seed: 0,
    };

    /// Checks every parameter's range: a NaN, negative or infinite
    /// temperature, a top-k of 0 or a top-p outside (0, 1] is an error.
    pub fn validate(self) -> Result<Sampling> {
        let bad = |m: String| Err(GptError::Sampling(m));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!(
                "temperature {} is not a finite number ≥ 0 (0 is greedy)",
                self.temperature
            ));
        }
        if self.top_k == Some(0) {
            return bad("top-k 0 keeps no token: give 1 or more".into());
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad(format!("top-p {p} is outside (0, 1]"));
        }
        Ok(self)
    }

    /// Whether tokens are picked by the maximum alone.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == Some(1)
    }

    /// How decode steps draw their tokens on the backend
    /// ([`Gpt::decode_sampled`](crate::Gpt::decode_sampled)) when not
    /// greedy: at a temperature whose inverse is finite (a smaller one is
    /// greedy for any logits f32 tells apart), with top-k and a top-p below 1.
    pub fn draw(&self) -> Option<Draw> {
        let t = self.temperature;
        (!self.is_greedy() && (1.0 / t).is_finite()).then_some(Draw {
            temperature: t,
            top_k: self.top_k,
            top_p: self.top_p.filter(|&p| p < 1.0),
        })
    }
}

/// One sequence's token picker: the parameters and a seeded generator
/// (xorshift64, enough for sampling and reproducible everywhere).
pub struct Sampler {
    sampling: Sampling,
    state: u64,
}

impl Sampler {
    /// A picker with the generator seeded by `sampling.seed`; `sampling`
    /// must have been validated.
    pub fn new(sampling: Sampling) -> Sampler {
        Sampler {
            sampling,
            state: sampling.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A draw of this sequence's generator as the key of a step that
    /// samples on the backend ([`Sampling::draw`]).
    pub fn key(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    /// The next token given one position's logits.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let best = argmax(logits);
        if self.sampling.is_greedy() {
            return best;
        }
        let t = self.sampling.temperature as f64;
        let top = logits[best as usize] as f64;
        // Probabilities up to a common factor, in f64 so that a small
        // temperature still orders the tokens.
        let mut candidates: Vec<(f64, u32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (((l as f64 - top) / t).exp(), i as u32))
            .filter(|(w, _)| *w > 0.0)
            .collect();
        let by_weight = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        // Top-k keeps every token as likely as the k-th (`transformers`'
        // rule, and the backend's).
        if let Some(k) = self.sampling.top_k
            && k < candidates.len()
        {
            let kth = candidates.select_nth_unstable_by(k - 1, by_weight).1.0;
            candidates.retain(|c| c.0 >= kth);
        }
        if let Some(p) = self.sampling.top_p.filter(|&p| p < 1.0) {
            candidates.sort_unstable_by(by_weight);
            let total: f64 = candidates.iter().map(|c| c.0).sum();
            let mut sum = 0.0;
            // The fewest tokens whose probability reaches p (at least
            // one), and every tie of the last.
            let last = candidates
                .iter()
                .position(|c| {
                    sum += c.0;
                    sum >= p as f64 * total
                })
                .map_or(f64::MIN, |i| candidates[i].0);
            candidates.retain(|c| c.0 >= last);
        }
        let total: f64 = candidates.iter().map(|c| c.0).sum();
        let mut r = self.uniform() * total;
        for &(w, i) in &candidates {
            r -= w;
            if r <= 0.0 {
                return i;
            }
        }
        candidates.last().map_or(best, |c| c.1)
    }
}

/// The first index of the largest logit.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(temperature: f32, top_k: Option<usize>, top_p: Option<f32>) -> Sampling {
        Sampling {
            temperature,
            top_k,
            top_p,
            seed: 7,
        }
    }

    #[test]
    fn invalid_parameters_are_errors() {
        for t in [f32::NAN, -0.5, f32::INFINITY] {
            assert!(sampling(t, None, None).validate().is_err(), "{t}");
        }
        assert!(sampling(1.0, Some(0), None).validate().is_err());
        for p in [0.0, -0.1, 1.5, f32::NAN] {
            assert!(sampling(1.0, None, Some(p)).validate().is_err(), "{p}");
        }
        assert!(sampling(0.0, Some(1), Some(1.0)).validate().is_ok());
        assert!(sampling(1e-40, None, None).validate().is_ok());
    }

    /// How often each token is drawn in `n` picks.
    fn counts(s: Sampling, logits: &[f32], n: usize) -> Vec<usize> {
        let mut picker = Sampler::new(s);
        let mut c = vec![0; logits.len()];
        for _ in 0..n {
            c[picker.pick(logits) as usize] += 1;
        }
        c
    }

    #[test]
    fn samples_follow_the_softmax_within_top_k_and_top_p() {
        // Probabilities 0.5, 0.25, 0.125, 0.125 at temperature 1.
        let logits = [2.0f32.ln(), 1.0f32.ln(), 0.5f32.ln(), 0.5f32.ln()].map(|l| l + 3.0);
        let n = 40_000;
        let freq = |c: Vec<usize>| c.iter().map(|&x| x as f64 / n as f64).collect::<Vec<_>>();
        let all = freq(counts(sampling(1.0, None, None), &logits, n));
        for (f, want) in all.iter().zip([0.5, 0.25, 0.125, 0.125]) {
            assert!((f - want).abs() < 0.01, "{all:?}");
        }
        let top2 = freq(counts(sampling(1.0, Some(2), None), &logits, n));
        assert!(
            (top2[0] - 2.0 / 3.0).abs() < 0.01 && top2[2] == 0.0 && top2[3] == 0.0,
            "{top2:?}"
        );
        // The third most likely ties with the fourth: top-3 keeps both.
        let top3 = freq(counts(sampling(1.0, Some(3), None), &logits, n));
        assert!((top3[3] - 0.125).abs() < 0.01, "{top3:?}");
        // 0.5 + 0.25 reaches 0.7: the nucleus is the first two tokens.
        let nucleus = freq(counts(sampling(1.0, None, Some(0.7)), &logits, n));
        assert!(
            (nucleus[0] - 2.0 / 3.0).abs() < 0.01 && nucleus[2] == 0.0,
            "{nucleus:?}"
        );
        // A small top-p keeps the most likely token alone.
        assert_eq!(counts(sampling(1.0, None, Some(0.1)), &logits, 100)[0], 100);
        // A tiny temperature is (almost) greedy; 0 is greedy.
        assert_eq!(counts(sampling(1e-30, None, None), &logits, 100)[0], 100);
        assert_eq!(counts(sampling(0.0, None, None), &logits, 100)[0], 100);
    }

    #[test]
    fn a_seed_reproduces_a_sample() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32 / 300.0).collect();
        let s = sampling(0.9, Some(50), Some(0.95));
        let draw = || {
            let mut p = Sampler::new(s);
            (0..20).map(|_| p.pick(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(), draw());
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }
}
