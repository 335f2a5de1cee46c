"""PyTorch baselines for benches/attention.rs: scaled_dot_product_attention
(causal) on the same shapes and layout (q, k, v as views of one
[B, T, 3C] tensor, as GPT-2 splits its fused projection), timed the same
way (CUDA events, median of 20 alternating two input sets), FLOPs counted
the same way (4 B H T^2 D / 2). Prints what SDPA picks by default, then
each backend that takes the dtype."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch_timing import median_ms

SETS, REPS, HEADS, D = 2, 20, 12, 64


def timed(f):
    return median_ms(f, REPS, SETS)


def split(qkv, batch, t):
    q, k, v = qkv.split(HEADS * D, dim=2)
    return [x.view(batch, t, HEADS, D).transpose(1, 2) for x in (q, k, v)]


def bench(dtype, name, batch, t):
    qkvs = [torch.rand(batch, t, 3 * HEADS * D, device="cuda", dtype=dtype) * 4 - 2 for _ in range(SETS)]
    flops = 4 * batch * HEADS * t * t * D / 2

    def tflops():
        ms = timed(lambda i: F.scaled_dot_product_attention(*split(qkvs[i], batch, t), is_causal=True))
        return f"{flops / ms / 1e9:>7.1f}"

    line = f"{name:<5} {batch}x{t:<5} h={HEADS} d={D}  default {tflops()} TFLOP/s"
    # FlashAttention 2 and cuDNN take 16-bit inputs only.
    half = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION] if dtype != torch.float32 else []
    for backend in half + [SDPBackend.EFFICIENT_ATTENTION]:
        with sdpa_kernel(backend):
            line += f"  {backend.name.lower()} {tflops()}"
    print(line)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for batch, t in [(8, 1024), (4, 2048), (2, 4096)]:
        bench(torch.bfloat16, "bf16", batch, t)
        bench(torch.float16, "f16", batch, t)
        bench(torch.float32, "f32", batch, t)
