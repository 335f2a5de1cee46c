//! Where the model's kernels run: [`Gpu`] launches them on a device stream,
//! [`Cpu`] runs their reference versions. The model is written once against
//! [`Backend`]; each method is one kernel and its grid.

use crate::Result;
use tile::{HostTensor, Stream, Tensor};
use tile_kernels::{attention, embedding, matmul, norm, softmax};

/// The operations a GPT forward pass needs, on f32 tensors.
pub trait Backend {
    type Tensor;
    type Tokens;

    fn upload(&self, data: &[f32], shape: &[usize]) -> Result<Self::Tensor>;
    fn upload_tokens(&self, tokens: &[i32]) -> Result<Self::Tokens>;
    fn empty(&self, shape: &[usize]) -> Result<Self::Tensor>;
    fn reshape(&self, t: Self::Tensor, shape: &[usize]) -> Result<Self::Tensor>;
    fn download(&self, t: &Self::Tensor) -> Result<Vec<f32>>;

    /// `out[i] = wte[tokens[i]] + wpe[i % seq_len]`; `out: [tokens, C]`.
    fn embedding(
        &self,
        tokens: &Self::Tokens,
        wte: &Self::Tensor,
        wpe: &Self::Tensor,
        out: &mut Self::Tensor,
        seq_len: usize,
    ) -> Result<()>;
    /// Row-wise LayerNorm of `x: [rows, C]`.
    fn layer_norm(&self, x: &Self::Tensor, w: &Self::Tensor, b: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// `out = x @ w^T + b`, GELU after it when `gelu`.
    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        b: &Self::Tensor,
        out: &mut Self::Tensor,
        gelu: bool,
    ) -> Result<()>;
    /// `out = residual + x @ w^T + b`: a projection and the residual
    /// connection after it, in one kernel.
    fn linear_residual(
        &self,
        weights: (&Self::Tensor, &Self::Tensor, &Self::Tensor),
        residual: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// Causal attention of `qkv: [B, T, 3C]` into `out: [B, T, C]`.
    fn attention(&self, qkv: &Self::Tensor, out: &mut Self::Tensor, heads: usize) -> Result<()>;
}

/// LayerNorm tile width for rows of `c` channels.
fn norm_block(c: usize) -> usize {
    c.next_power_of_two().max(256)
}

fn rows_of(shape: &[usize]) -> usize {
    shape[..shape.len() - 1].iter().product()
}

/// The grid of the CPU versions of the linear kernels, with the 64x64
/// tiles they run with (one tile shape is as exact as another there; the
/// GPU tunes its own).
fn cpu_linear_grid(x: &HostTensor<f32>, w: &HostTensor<f32>) -> u32 {
    matmul::blocks(x.shape()[0], w.shape()[0], 64, 64)
}

/// Runs kernels on a GPU stream.
pub struct Gpu {
    pub stream: Stream,
}

/// Runs the kernels' CPU reference versions.
pub struct Cpu;

impl Backend for Gpu {
    type Tensor = Tensor<f32>;
    type Tokens = Tensor<i32>;

    fn upload(&self, data: &[f32], shape: &[usize]) -> Result<Tensor<f32>> {
        Ok(self.stream.upload_slice(data, shape)?)
    }
    fn upload_tokens(&self, tokens: &[i32]) -> Result<Tensor<i32>> {
        Ok(self.stream.upload_slice(tokens, &[tokens.len()])?)
    }
    fn empty(&self, shape: &[usize]) -> Result<Tensor<f32>> {
        Ok(self.stream.zeros(shape)?)
    }
    fn reshape(&self, t: Tensor<f32>, shape: &[usize]) -> Result<Tensor<f32>> {
        Ok(t.reshape(shape)?)
    }
    fn download(&self, t: &Tensor<f32>) -> Result<Vec<f32>> {
        Ok(self.stream.download(t)?.to_vec())
    }
    fn embedding(
        &self,
        tokens: &Tensor<i32>,
        wte: &Tensor<f32>,
        wpe: &Tensor<f32>,
        out: &mut Tensor<f32>,
        seq_len: usize,
    ) -> Result<()> {
        let grid = (tokens.len() as u32, out.shape()[1].div_ceil(256) as u32);
        Ok(embedding::embedding::launch::<f32, 256>(
            &self.stream,
            grid,
            tokens,
            wte,
            wpe,
            out,
            seq_len as i32,
        )?)
    }
    fn layer_norm(&self, x: &Tensor<f32>, w: &Tensor<f32>, b: &Tensor<f32>, out: &mut Tensor<f32>) -> Result<()> {
        let (rows, c) = (rows_of(x.shape()), w.len());
        let s = &self.stream;
        let grid = |block| rows.div_ceil(softmax::rows_per_block(block)) as u32;
        Ok(match norm_block(c) {
            256 => norm::layer_norm::launch::<f32, 256>(s, grid(256), x, w, b, out, 1e-5),
            512 => norm::layer_norm::launch::<f32, 512>(s, grid(512), x, w, b, out, 1e-5),
            1024 => norm::layer_norm::launch::<f32, 1024>(s, grid(1024), x, w, b, out, 1e-5),
            2048 => norm::layer_norm::launch::<f32, 2048>(s, grid(2048), x, w, b, out, 1e-5),
            4096 => norm::layer_norm::launch::<f32, 4096>(s, grid(4096), x, w, b, out, 1e-5),
            _ => norm::layer_norm::launch::<f32, 8192>(s, grid(8192), x, w, b, out, 1e-5),
        }?)
    }
    fn linear(
        &self,
        x: &Tensor<f32>,
        w: &Tensor<f32>,
        b: &Tensor<f32>,
        out: &mut Tensor<f32>,
        gelu: bool,
    ) -> Result<()> {
        matmul::run_linear(&self.stream, x, w, b, out, gelu)?;
        Ok(())
    }
    fn linear_residual(
        &self,
        weights: (&Tensor<f32>, &Tensor<f32>, &Tensor<f32>),
        residual: &Tensor<f32>,
        out: &mut Tensor<f32>,
    ) -> Result<()> {
        matmul::run_linear_residual(&self.stream, weights, residual, out)?;
        Ok(())
    }
    fn attention(&self, qkv: &Tensor<f32>, out: &mut Tensor<f32>, heads: usize) -> Result<()> {
        attention::run(&self.stream, qkv, out, heads)?;
        Ok(())
    }
}

impl Backend for Cpu {
    type Tensor = HostTensor<f32>;
    type Tokens = HostTensor<i32>;

    fn upload(&self, data: &[f32], shape: &[usize]) -> Result<HostTensor<f32>> {
        Ok(HostTensor::from_vec(data.to_vec(), shape)?)
    }
    fn upload_tokens(&self, tokens: &[i32]) -> Result<HostTensor<i32>> {
        Ok(HostTensor::from_vec(tokens.to_vec(), &[tokens.len()])?)
    }
    fn empty(&self, shape: &[usize]) -> Result<HostTensor<f32>> {
        Ok(HostTensor::zeros(shape))
    }
    fn reshape(&self, t: HostTensor<f32>, shape: &[usize]) -> Result<HostTensor<f32>> {
        Ok(t.reshape(shape)?)
    }
    fn download(&self, t: &HostTensor<f32>) -> Result<Vec<f32>> {
        Ok(t.to_vec())
    }
    fn embedding(
        &self,
        tokens: &HostTensor<i32>,
        wte: &HostTensor<f32>,
        wpe: &HostTensor<f32>,
        out: &mut HostTensor<f32>,
        seq_len: usize,
    ) -> Result<()> {
        let grid = (tokens.len() as u32, out.shape()[1].div_ceil(256) as u32);
        Ok(embedding::embedding::cpu::<f32, 256>(
            grid,
            tokens,
            wte,
            wpe,
            out,
            seq_len as i32,
        )?)
    }
    fn layer_norm(
        &self,
        x: &HostTensor<f32>,
        w: &HostTensor<f32>,
        b: &HostTensor<f32>,
        out: &mut HostTensor<f32>,
    ) -> Result<()> {
        let (rows, c) = (rows_of(x.shape()), w.len());
        let grid = |block| rows.div_ceil(softmax::rows_per_block(block)) as u32;
        Ok(match norm_block(c) {
            256 => norm::layer_norm::cpu::<f32, 256>(grid(256), x, w, b, out, 1e-5),
            512 => norm::layer_norm::cpu::<f32, 512>(grid(512), x, w, b, out, 1e-5),
            1024 => norm::layer_norm::cpu::<f32, 1024>(grid(1024), x, w, b, out, 1e-5),
            2048 => norm::layer_norm::cpu::<f32, 2048>(grid(2048), x, w, b, out, 1e-5),
            4096 => norm::layer_norm::cpu::<f32, 4096>(grid(4096), x, w, b, out, 1e-5),
            _ => norm::layer_norm::cpu::<f32, 8192>(grid(8192), x, w, b, out, 1e-5),
        }?)
    }
    fn linear(
        &self,
        x: &HostTensor<f32>,
        w: &HostTensor<f32>,
        b: &HostTensor<f32>,
        out: &mut HostTensor<f32>,
        gelu: bool,
    ) -> Result<()> {
        let grid = cpu_linear_grid(x, w);
        Ok(matmul::linear::cpu::<f32, 64, 64, 32>(grid, x, w, b, out, gelu as i32)?)
    }
    fn linear_residual(
        &self,
        (x, w, b): (&HostTensor<f32>, &HostTensor<f32>, &HostTensor<f32>),
        residual: &HostTensor<f32>,
        out: &mut HostTensor<f32>,
    ) -> Result<()> {
        let grid = cpu_linear_grid(x, w);
        Ok(matmul::linear_residual::cpu::<f32, 64, 64, 32>(
            grid, x, w, b, residual, out,
        )?)
    }
    fn attention(&self, qkv: &HostTensor<f32>, out: &mut HostTensor<f32>, heads: usize) -> Result<()> {
        let (batch, t, d) = attention::sizes(qkv.shape(), out.shape(), heads)?;
        let (grid, h, scale) = (
            attention::grid(batch, t, heads, attention::queries_per_block(d)),
            heads as i32,
            1.0 / (d as f32).sqrt(),
        );
        // Blocks run one at a time here: any order of them is as good.
        let band = 1;
        Ok(match d {
            32 => attention::causal_attention::cpu::<f32, 128, 32, 32>(grid, qkv, out, h, scale, band),
            64 => attention::causal_attention::cpu::<f32, 128, 32, 64>(grid, qkv, out, h, scale, band),
            _ => attention::causal_attention::cpu::<f32, 64, 32, 128>(grid, qkv, out, h, scale, band),
        }?)
    }
}
