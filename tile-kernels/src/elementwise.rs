//! Element-wise kernels over 1-D tensors of one length `N`: one
//! `BLOCK`-element tile per block, so launch `cdiv(N, BLOCK)` blocks.

/// `out = x + y`.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 4096])]
pub fn add<T, const BLOCK: usize>(x: &Tensor<T, { [N] }>, y: &Tensor<T, { [N] }>, out: &mut Tensor<T, { [N] }>) {
    let i = block_id(0);
    out.store([i], x.load([i], [BLOCK]) + y.load([i], [BLOCK]));
}

/// `out = a * x`, computed in f32.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 4096])]
pub fn scale<T, const BLOCK: usize>(a: f32, x: &Tensor<T, { [N] }>, out: &mut Tensor<T, { [N] }>) {
    let i = block_id(0);
    out.store([i], (a * x.load([i], [BLOCK]).cast::<f32>()).cast::<T>());
}

/// The residual connection, in place: `x += residual`.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 4096])]
pub fn residual_add<T, const BLOCK: usize>(x: &mut Tensor<T, { [N] }>, residual: &Tensor<T, { [N] }>) {
    let i = block_id(0);
    let sum = x.load([i], [BLOCK]).cast::<f32>() + residual.load([i], [BLOCK]).cast::<f32>();
    x.store([i], sum.cast::<T>());
}

/// GELU in the tanh form GPT-2 uses:
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, computed in f32.
#[tile::kernel(T = [f32, f16, bf16], BLOCK = [1024, 4096])]
pub fn gelu<T, const BLOCK: usize>(x: &Tensor<T, { [N] }>, out: &mut Tensor<T, { [N] }>) {
    let i = block_id(0);
    out.store([i], gelu(x.load([i], [BLOCK]).cast::<f32>()).cast::<T>());
}
