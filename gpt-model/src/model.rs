//! The GPT-2 forward pass, one function per layer (as in llm.c's
//! `train_gpt2.cu`), each a few kernel launches on a [`tile::Backend`] (a GPU
//! stream or `tile::Cpu`).

use crate::backend::{self, Tensor};
use crate::{Result, Weights};
use tile::Backend;

/// The shape of a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The number of transformer blocks.
    pub n_layer: usize,
    /// The number of attention heads per block.
    pub n_head: usize,
    /// The width of the residual stream (channels); `n_embd / n_head` is the
    /// head size.
    pub n_embd: usize,
    /// The longest context the model was trained on.
    pub block_size: usize,
    /// The number of tokens.
    pub vocab_size: usize,
}

/// One transformer block's parameters.
struct Block<T> {
    ln_1: (T, T),
    c_attn: (T, T),
    c_proj: (T, T),
    ln_2: (T, T),
    c_fc: (T, T),
    mlp_proj: (T, T),
}

/// A GPT-2 model whose parameters live on backend `B`.
pub struct Gpt<B: Backend> {
    /// The model's shape.
    pub config: Config,
    wte: Tensor<B>,
    wpe: Tensor<B>,
    blocks: Vec<Block<Tensor<B>>>,
    ln_f: (Tensor<B>, Tensor<B>),
    /// The LM head shares `wte`; it has no bias of its own.
    zero_bias: Tensor<B>,
}

impl<B: Backend> Gpt<B> {
    /// Uploads the parameters, checking every tensor's shape.
    pub fn load(on: &B, weights: &Weights) -> Result<Gpt<B>> {
        let cfg = weights.config;
        let c = cfg.n_embd;
        let param = |name: &str, shape: &[usize]| -> Result<Tensor<B>> {
            Ok(on.upload_slice(&weights.tensor(name, shape)?, shape)?)
        };
        let pair = |prefix: &str, out: usize, inp: Option<usize>| -> Result<(Tensor<B>, Tensor<B>)> {
            let w = match inp {
                Some(i) => param(&format!("{prefix}.weight"), &[out, i])?,
                None => param(&format!("{prefix}.weight"), &[out])?,
            };
            Ok((w, param(&format!("{prefix}.bias"), &[out])?))
        };
        let blocks = (0..cfg.n_layer)
            .map(|l| {
                let p = |n: &str| format!("h.{l}.{n}");
                Ok(Block {
                    ln_1: pair(&p("ln_1"), c, None)?,
                    c_attn: pair(&p("c_attn"), 3 * c, Some(c))?,
                    c_proj: pair(&p("c_proj"), c, Some(c))?,
                    ln_2: pair(&p("ln_2"), c, None)?,
                    c_fc: pair(&p("c_fc"), 4 * c, Some(c))?,
                    mlp_proj: pair(&p("mlp_proj"), c, Some(4 * c))?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Gpt {
            config: cfg,
            wte: param("wte.weight", &[cfg.vocab_size, c])?,
            wpe: param("wpe.weight", &[cfg.block_size, c])?,
            blocks,
            ln_f: pair("ln_f", c, None)?,
            zero_bias: on.zeros(&[cfg.vocab_size])?,
        })
    }

    /// Logits for every position of `tokens` (at most `block_size` of them),
    /// row-major `[tokens.len(), vocab_size]`.
    pub fn forward(&self, on: &B, tokens: &[u32]) -> Result<Vec<f32>> {
        let cfg = self.config;
        let (t, c) = (tokens.len(), cfg.n_embd);
        assert!(
            (1..=cfg.block_size).contains(&t),
            "the context holds 1 to block_size tokens"
        );
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        let mut x = on.zeros(&[t, c])?;
        let ids = on.upload_slice(&ids, &[t])?;
        backend::embedding(on, &ids, (&self.wte, &self.wpe), &mut x, t)?;
        for block in &self.blocks {
            x = self.attention_block(on, block, x, t)?;
            x = self.mlp_block(on, block, x, t)?;
        }
        let mut h = on.zeros(&[t, c])?;
        backend::layer_norm(on, &x, (&self.ln_f.0, &self.ln_f.1), &mut h)?;
        let mut logits = on.zeros(&[t, cfg.vocab_size])?;
        backend::linear(on, &h, (&self.wte, &self.zero_bias), &mut logits, false)?;
        Ok(on.download(&logits)?.to_vec())
    }

    /// `x + proj(attention(ln_1(x)))`.
    fn attention_block(&self, on: &B, p: &Block<Tensor<B>>, x: Tensor<B>, t: usize) -> Result<Tensor<B>> {
        let c = self.config.n_embd;
        let mut h = on.zeros(&[t, c])?;
        backend::layer_norm(on, &x, (&p.ln_1.0, &p.ln_1.1), &mut h)?;
        let mut qkv = on.zeros(&[t, 3 * c])?;
        backend::linear(on, &h, (&p.c_attn.0, &p.c_attn.1), &mut qkv, false)?;
        let qkv = on.reshape(qkv, &[1, t, 3 * c])?;
        let mut att = on.zeros(&[1, t, c])?;
        backend::attention(on, &qkv, &mut att, self.config.n_head)?;
        let att = on.reshape(att, &[t, c])?;
        let mut out = on.zeros(&[t, c])?;
        backend::linear_residual(on, &att, (&p.c_proj.0, &p.c_proj.1), &x, &mut out)?;
        Ok(out)
    }

    /// `x + proj(gelu(fc(ln_2(x))))`.
    fn mlp_block(&self, on: &B, p: &Block<Tensor<B>>, x: Tensor<B>, t: usize) -> Result<Tensor<B>> {
        let c = self.config.n_embd;
        let mut h = on.zeros(&[t, c])?;
        backend::layer_norm(on, &x, (&p.ln_2.0, &p.ln_2.1), &mut h)?;
        let mut fc = on.zeros(&[t, 4 * c])?;
        backend::linear(on, &h, (&p.c_fc.0, &p.c_fc.1), &mut fc, true)?;
        let mut out = on.zeros(&[t, c])?;
        backend::linear_residual(on, &fc, (&p.mlp_proj.0, &p.mlp_proj.1), &x, &mut out)?;
        Ok(out)
    }
}
