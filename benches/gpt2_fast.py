"""A gpt-fast-style GPT-2 decoder in PyTorch, the baseline `benches/gpt2.rs`
decoding is measured against: the checkpoint's weights in plain tensors, a
static KV cache preallocated for the request, the decode step compiled with
`torch.compile(mode="reduce-overhead")` (CUDA graphs), greedy.

    python3 benches/gpt2_fast.py DIR [--dtype bf16] [--batch 1 16] [--new 256] [--eager]

DIR is a checkpoint in the Hugging Face layout (`benches/gpt2_transformers.py`
writes one). Prints decode tokens/s per batch size (new tokens after the
first, over the time after the first), and the first 16 greedy tokens of
sequence 0, to compare with the other two benches. `--check` runs it on the
CPU in f32 against `transformers`' greedy tokens instead (no compile).
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

PROMPT = [464, 3616, 286, 1204, 318, 257, 1808, 326, 468, 587, 1965, 416, 262, 4387, 286, 477]


class Gpt2(torch.nn.Module):
    """GPT-2 from a Hugging Face checkpoint (Conv1D weights are `[in, out]`),
    its KV cache a buffer, as gpt-fast keeps it, so that CUDA graphs replay
    the step in place."""

    def __init__(self, path, dtype, device):
        super().__init__()
        cfg = json.load(open(os.path.join(path, "config.json")))
        self.layers, self.heads, self.c = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)
        w = load_file(os.path.join(path, "model.safetensors"))
        w = {k.removeprefix("transformer."): v.to(device=device, dtype=dtype) for k, v in w.items()}
        self.w = w
        self.wte, self.wpe = w["wte.weight"], w["wpe.weight"]

    def setup_cache(self, batch, capacity):
        """An empty cache: the same buffers, cleared, where the shape is the
        same (CUDA graphs captured on them stay valid), else new ones."""
        shape = (self.layers, batch, self.heads, capacity, self.c // self.heads)
        if getattr(self, "k_cache", None) is not None and self.k_cache.shape == shape:
            self.k_cache.zero_()
            self.v_cache.zero_()
            return
        self.register_buffer("k_cache", torch.zeros(shape, dtype=self.wte.dtype, device=self.wte.device))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=self.wte.dtype, device=self.wte.device))

    def forward(self, ids, pos):
        """Logits of the last position of `ids: [B, T]` at positions `pos: [T]`
        (the same for every sequence), writing K and V into the cache."""
        w, (b, t), hd = self.w, ids.shape, self.c // self.heads
        k_cache, v_cache = self.k_cache, self.v_cache
        x = self.wte[ids] + self.wpe[pos]
        # Causal over the cache: position `pos[i]` sees keys 0..=pos[i].
        keys = torch.arange(k_cache.shape[3], device=ids.device)
        mask = keys[None, :] <= pos[:, None]
        for l in range(self.layers):
            p = f"h.{l}."
            h = F.layer_norm(x, (self.c,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
            qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = qkv.view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
            k_cache[l].index_copy_(2, pos, k)
            v_cache[l].index_copy_(2, pos, v)
            a = F.scaled_dot_product_attention(q, k_cache[l], v_cache[l], attn_mask=mask)
            a = a.transpose(1, 2).reshape(b, t, self.c)
            x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = F.layer_norm(x, (self.c,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
            h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
            x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = F.layer_norm(x[:, -1], (self.c,), w["ln_f.weight"], w["ln_f.bias"], self.eps)
        return x @ self.wte.T


def generate(model, step, batch, new, device, capacity=None):
    """Greedy tokens `[batch, new]` and the seconds to the first token and
    after, in a cache of `capacity` positions (the prompt and `new`)."""
    model.setup_cache(batch, capacity or len(PROMPT) + new)
    ids = torch.tensor([PROMPT] * batch, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    logits = model.forward(ids, torch.arange(len(PROMPT), device=device))
    token = logits.argmax(-1)
    out = [token]
    sync()
    t1 = time.perf_counter()
    for i in range(new - 1):
        pos = torch.tensor([len(PROMPT) + i], device=device)
        logits = step(token[:, None], pos)
        token = logits.argmax(-1)
        out.append(token.clone())
    sync()
    t2 = time.perf_counter()
    return torch.stack(out, 1), t1 - t0, t2 - t1


def check(path):
    """Greedy tokens of the eager decoder against `transformers`' (CPU, f32)."""
    from transformers import GPT2LMHeadModel

    model = Gpt2(path, torch.float32, "cpu")
    ours, _, _ = generate(model, model.forward, 1, 24, "cpu")
    ref = GPT2LMHeadModel.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([PROMPT])
    want = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                        pad_token_id=0, eos_token_id=None)[0, len(PROMPT):]
    assert ours[0].tolist() == want.tolist(), (ours[0].tolist(), want.tolist())
    print("greedy tokens equal transformers':", want.tolist())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--dtype", default="bf16", choices=["f32", "bf16", "f16"])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--eager", action="store_true", help="no torch.compile")
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    if a.check:
        return check(a.dir)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Gpt2(a.dir, dtype, "cuda")
    step = model.forward if a.eager else torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    kind = "eager" if a.eager else "compiled"
    with torch.no_grad():
        for batch in a.batch:
            # Compile and capture on the cache the timed run uses.
            generate(model, step, batch, 8, "cuda", capacity=len(PROMPT) + a.new)
            tokens, first, rest = generate(model, step, batch, a.new, "cuda")
            rate = (a.new - 1) * batch / rest
            print(f"gpt-fast-style {kind} {a.dtype}: decode batch {batch}: {rate:.1f} tokens/s "
                  f"(first token {first * 1e3:.1f} ms)")
            if batch == 1:
                print(f"gpt-fast-style {kind} {a.dtype}: greedy tokens {tokens[0, :16].tolist()}")


if __name__ == "__main__":
    main()
