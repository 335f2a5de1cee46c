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

SETS, REPS = 2, 20
# (heads, head size): GPT-2 124M's, and 16 heads of 128 (a 2048-wide model).
HEADS = [(12, 64), (16, 128)]


def timed(f):
    return median_ms(f, REPS, SETS)


def split(qkv, batch, t, heads, d):
    q, k, v = qkv.split(heads * d, dim=2)
    return [x.view(batch, t, heads, d).transpose(1, 2) for x in (q, k, v)]


def bench(dtype, name, batch, t, heads, d):
    qkvs = [torch.rand(batch, t, 3 * heads * d, device="cuda", dtype=dtype) * 4 - 2 for _ in range(SETS)]
    flops = 4 * batch * heads * t * t * d / 2

    def tflops():
        ms = timed(lambda i: F.scaled_dot_product_attention(*split(qkvs[i], batch, t, heads, d), is_causal=True))
        return f"{flops / ms / 1e9:>7.1f}"

    line = f"{name:<5} {batch}x{t:<5} h={heads} d={d:<3}  default {tflops()} TFLOP/s"
    # FlashAttention 2 and cuDNN take 16-bit inputs only.
    half = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION] if dtype != torch.float32 else []
    for backend in half + [SDPBackend.EFFICIENT_ATTENTION]:
        with sdpa_kernel(backend):
            line += f"  {backend.name.lower()} {tflops()}"
    print(line)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for batch, t in [(8, 1024), (4, 2048), (2, 4096)]:
        for dtype, name in [(torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32")]:
            for heads, d in HEADS:
                bench(dtype, name, batch, t, heads, d)
