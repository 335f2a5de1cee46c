//! The model's kernels, each with its grid and constants, written once for
//! any [`tile::Backend`]: a GPU stream launches them, `tile::Cpu` runs their
//! reference versions.

use crate::Result;
use tile::{Backend, TensorView};
use tile_kernels::{attention, embedding, matmul, norm};

/// An f32 tensor on backend `B`: every parameter and activation of the model.
pub type Tensor<B> = <B as Backend>::Tensor<f32>;

/// `out[i] = wte[tokens[i]] + wpe[i % seq_len]`; `out: [tokens, C]`.
pub fn embedding<B: Backend>(
    on: &B,
    tokens: &B::Tensor<i32>,
    (wte, wpe): (&Tensor<B>, &Tensor<B>),
    out: &mut Tensor<B>,
    seq_len: usize,
) -> Result<()> {
    let grid = (tokens.len() as u32, out.shape()[1].div_ceil(256) as u32);
    embedding::embedding::launch::<f32, 256, B>(on, grid, tokens, wte, wpe, out, seq_len as i32)?;
    Ok(())
}

/// Row-wise LayerNorm of `x: [rows, C]` with `(weight, bias)`.
pub fn layer_norm<B: Backend>(
    on: &B,
    x: &Tensor<B>,
    (w, b): (&Tensor<B>, &Tensor<B>),
    out: &mut Tensor<B>,
) -> Result<()> {
    norm::run_layer_norm(on, x, w, b, out, 1e-5)?;
    Ok(())
}

/// `out = x @ w^T + b`, GELU after it when `gelu`.
pub fn linear<B: Backend>(
    on: &B,
    x: &Tensor<B>,
    (w, b): (&Tensor<B>, &Tensor<B>),
    out: &mut Tensor<B>,
    gelu: bool,
) -> Result<()> {
    matmul::run_linear(on, x, w, b, out, gelu)?;
    Ok(())
}

/// `out = residual + x @ w^T + b`: a projection and the residual
/// connection after it, in one kernel.
pub fn linear_residual<B: Backend>(
    on: &B,
    x: &Tensor<B>,
    (w, b): (&Tensor<B>, &Tensor<B>),
    residual: &Tensor<B>,
    out: &mut Tensor<B>,
) -> Result<()> {
    matmul::run_linear_residual(on, (x, w, b), residual, out)?;
    Ok(())
}

/// Causal attention of `qkv: [B, T, 3C]` into `out: [B, T, C]`.
pub fn attention<B: Backend>(on: &B, qkv: &Tensor<B>, out: &mut Tensor<B>, heads: usize) -> Result<()> {
    attention::run(on, qkv, out, heads)?;
    Ok(())
}
