//! Row normalizations over `[rows, cols]`, whole rows in one `BLOCK`-wide
//! tile (`BLOCK >= cols`), [`rows_per_block`](crate::softmax::rows_per_block)
//! rows per block. Statistics are computed in f32.

/// LayerNorm: `y = (x - mean) / sqrt(var + eps) * weight + bias`.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 512, 1024, 2048, 4096, 8192])]
pub fn layer_norm<T, const BLOCK: usize>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: &Tensor<T>,
    y: &mut Tensor<T>,
    eps: f32,
) {
    let rows = max(1, 4096 / BLOCK);
    let r = block_id(0);
    let n = x.shape(1) as f32;
    let t = x.load([r, 0], [rows, BLOCK]).cast::<f32>();
    let mean = t.sum(1) / n;
    let centered = select(arange(BLOCK) < x.shape(1), t - mean, 0.0);
    let rstd = rsqrt((centered * centered).sum(1) / n + eps);
    let w = weight.load([0], [BLOCK]).cast::<f32>();
    let b = bias.load([0], [BLOCK]).cast::<f32>();
    y.store([r, 0], (centered * rstd * w + b).cast::<T>());
}

/// RMSNorm: `y = x / sqrt(mean(x^2) + eps) * weight`.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [256, 512, 1024, 2048, 4096, 8192])]
pub fn rms_norm<T, const BLOCK: usize>(x: &Tensor<T>, weight: &Tensor<T>, y: &mut Tensor<T>, eps: f32) {
    let rows = max(1, 4096 / BLOCK);
    let r = block_id(0);
    let t = x.load([r, 0], [rows, BLOCK]).cast::<f32>();
    let rstd = rsqrt((t * t).sum(1) / x.shape(1) as f32 + eps);
    let w = weight.load([0], [BLOCK]).cast::<f32>();
    y.store([r, 0], (t * rstd * w).cast::<T>());
}
