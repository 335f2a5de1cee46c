"""The `transformers` baseline of `benches/gpt2.rs`: writes a GPT-2
124M-shaped checkpoint with random weights to DIR (no download needed) if
DIR has none, then times `transformers` eager on the workloads the Rust
bench times on the same checkpoint:

    python3 benches/gpt2_transformers.py DIR [--compile]
    python3 benches/gpt2_transformers.py DIR --shape xl --write-only

(`--shape xl` writes a gpt2-xl-shaped checkpoint, 1.5B random weights in
bf16, for `benches/tensor_parallel.rs`; `--write-only` times nothing.)

- prefill: B=8 T=128 in f32 (tf32 matmuls allowed, as ours), B=16 T=1024 in
  bf16; a forward that fills the KV cache and keeps the last position's
  logits (`logits_to_keep=1`, what `generate` runs); median wall-clock ms,
  synchronized; with --compile also `torch.compile` on the bf16 shape;
- time to first token: one 1,000-token prompt, bf16;
- decode: `model.generate`, a 16-token prompt and 256 new tokens, greedy,
  end-of-text ignored, batch 1 and 16, bf16; tokens per second after the
  first token (the time of a 1-token generate subtracted).
"""
import argparse
import os
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

PROMPT = [464, 3616, 286, 1204, 318, 257, 1808, 326, 468, 587, 1965, 416, 262, 4387, 286, 477]
NEW_TOKENS = 256


SHAPES = {"124m": {}, "xl": dict(n_embd=1600, n_layer=48, n_head=25)}


def checkpoint(path, shape="124m"):
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = GPT2LMHeadModel(GPT2Config(**SHAPES[shape]))
        if shape != "124m":
            model = model.to(torch.bfloat16)
        model.save_pretrained(path, safe_serialization=True)


def timed(f, reps):
    f()
    f()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def prompts(batch, length, vocab):
    ids = [[(i * 7919 + b * 104729) % vocab for i in range(length)] for b in range(batch)]
    return torch.tensor(ids, device="cuda")


def prefill(model, batch, length, reps=10):
    ids = prompts(batch, length, model.config.vocab_size)
    return timed(lambda: model(ids, use_cache=True, logits_to_keep=1).logits.float().cpu(), reps)


def decode(model, batch):
    ids = torch.tensor([PROMPT] * batch, device="cuda")
    kw = dict(do_sample=False, pad_token_id=50256, eos_token_id=None, attention_mask=torch.ones_like(ids))

    def run(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()
        return time.perf_counter() - t, out

    run(8)
    first, _ = run(1)
    total, out = run(NEW_TOKENS)
    return (NEW_TOKENS - 1) * batch / (total - first), out[0, len(PROMPT):len(PROMPT) + 16].tolist()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--shape", choices=SHAPES, default="124m")
    p.add_argument("--write-only", action="store_true")
    a = p.parse_args()
    checkpoint(a.dir, a.shape)
    if a.write_only:
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    with torch.no_grad():
        model = GPT2LMHeadModel.from_pretrained(a.dir, dtype=torch.float32).cuda().eval()
        print(f"transformers f32: prefill B=8 T=128: {prefill(model, 8, 128):.2f} ms")
        del model
        model = GPT2LMHeadModel.from_pretrained(a.dir, dtype=torch.bfloat16).cuda().eval()
        print(f"transformers bf16: prefill B=16 T=1024: {prefill(model, 16, 1024):.2f} ms")
        print(f"transformers bf16: time to first token, 1000-token prompt: {prefill(model, 1, 1000, 5):.2f} ms")
        for batch in [1, 16]:
            rate, tokens = decode(model, batch)
            print(f"transformers bf16: decode batch {batch}: {rate:.1f} tokens/s")
            if batch == 1:
                print(f"transformers bf16: greedy tokens {tokens}")
        if a.compile:
            compiled = torch.compile(model)
            print(f"torch.compile bf16: prefill B=16 T=1024: {prefill(compiled, 16, 1024):.2f} ms")


if __name__ == "__main__":
    main()
