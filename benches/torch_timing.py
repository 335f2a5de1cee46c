"""Timing shared by the PyTorch baselines, as the Rust benches time theirs:
CUDA events around each run, after warm-up runs, the median."""
import torch


def median_ms(f, reps, sets, warmups=1):
    """Median milliseconds of `reps` runs of `f(i % sets)` (rotating inputs)."""
    for i in range(warmups):
        f(i % sets)
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f(i % sets)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[reps // 2]
