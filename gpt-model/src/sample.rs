//! Picking the next token from logits: temperature sampling with a seeded
//! generator (xorshift), or greedy at temperature 0.

/// A small deterministic random generator, so a seed reproduces a sample.
pub struct Sampler {
    state: u64,
    temperature: f32,
}

impl Sampler {
    /// A sampler seeded with `seed`; the logits are divided by `temperature`,
    /// and a temperature of 0 or less always picks the most likely token.
    pub fn new(seed: u64, temperature: f32) -> Sampler {
        Sampler {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            temperature,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token given one position's logits.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let best = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        if self.temperature <= 0.0 {
            return best as u32;
        }
        let m = logits[best];
        let weights: Vec<f64> = logits
            .iter()
            .map(|&l| (((l - m) / self.temperature) as f64).exp())
            .collect();
        let mut r = self.uniform() * weights.iter().sum::<f64>();
        for (i, w) in weights.iter().enumerate() {
            r -= w;
            if r <= 0.0 {
                return i as u32;
            }
        }
        best as u32
    }
}
