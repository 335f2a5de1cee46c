"""PyTorch baselines for benches/memory_bound.rs: the same kernels and shapes,
timed the same way (CUDA events, median of 40, rotating 4 buffer sets),
as a fraction of PyTorch's own device-to-device copy in the same run."""
import torch
import torch.nn.functional as F
from torch_timing import median_ms

SETS, REPS = 4, 40


def timed(f):
    return median_ms(f, REPS, SETS, warmups=3)


def row(name, dtype, rows, cols, ms, nbytes, copy_gbs):
    gbs = nbytes / ms / 1e6
    print(f"{name:<12} {dtype:<5} {rows:>5}x{cols:<5} {ms * 1e3:>9.1f} us {gbs:>7.0f} GB/s {100 * gbs / copy_gbs:>6.1f}% of copy")


def bench(dtype, name, rows, cols):
    xs = [torch.rand(rows, cols, device="cuda", dtype=dtype) * 4 - 2 for _ in range(SETS)]
    ys = [torch.empty_like(x) for x in xs]
    w = torch.randn(cols, device="cuda", dtype=dtype)
    b = torch.randn(cols, device="cuda", dtype=dtype)
    nbytes = 2 * rows * cols * xs[0].element_size()
    copy = timed(lambda i: ys[i].copy_(xs[i]))
    copy_gbs = nbytes / copy / 1e6
    row("copy", name, rows, cols, copy, nbytes, copy_gbs)
    row("softmax", name, rows, cols, timed(lambda i: F.softmax(xs[i], dim=-1)), nbytes, copy_gbs)
    row("layer_norm", name, rows, cols, timed(lambda i: F.layer_norm(xs[i], (cols,), w, b, 1e-5)), nbytes, copy_gbs)
    row("rms_norm", name, rows, cols, timed(lambda i: F.rms_norm(xs[i], (cols,), w, 1e-5)), nbytes, copy_gbs)
    row("gelu", name, rows, cols, timed(lambda i: F.gelu(xs[i], approximate="tanh")), nbytes, copy_gbs)
    row("cumsum", name, rows, cols, timed(lambda i: torch.cumsum(xs[i], dim=-1)), nbytes, copy_gbs)


def bench_histogram():
    n, bins = 1 << 26, 1024
    xs = [torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32) for _ in range(SETS)]
    ms = timed(lambda i: torch.bincount(xs[i], minlength=bins))
    print(f"histogram    i32   2^26 into {bins} bins {ms * 1e3:>9.1f} us {4 * n / ms / 1e6:>7.0f} GB/s")


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for rows, cols in [(8192, 8192), (8192, 768)]:
        bench(torch.float32, "f32", rows, cols)
        bench(torch.bfloat16, "bf16", rows, cols)
        print()
    bench_histogram()
