"""Writes random-initialised GPT-2 checkpoints of the family's widths and of
other shapes, with what `transformers` computes from them in IEEE f32 on
the GPU, for the test `gpu_shapes_match_transformers` (tests/model.rs):

    python3 gpt-model/tests/shapes/make_checkpoints.py DIR
    TILE_GPT2_SHAPES=DIR cargo test --release -p gpt-model --test model gpu_shapes

Each DIR/<name>/ holds config.json and model.safetensors (`save_pretrained`),
reference.safetensors (`logits.<i>`: every position's logits of prompt i,
f32) and reference.json (the prompts, 64 greedy tokens after each, and the
smallest gap between the two most likely tokens along them).

The family's shapes keep their width, heads, context and vocabulary, with
two layers (what differs between the family's models per layer is its
width). The initializer range is larger than GPT-2's so that the logits are
peaked and greedy choices are not decided by rounding.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

NEW_TOKENS = 64
PROMPTS = [[464, 3616, 286, 1204, 318, 257, 1808, 326, 468, 587, 1965, 416, 262, 4387, 286, 477, 11, 290, 3446, 13], [50256, 40, 1842, 7, 9]]
SHAPES = {
    # name: (n_embd, n_head, n_positions, vocab)
    "gpt2": (768, 12, 1024, 50257),
    "gpt2-medium": (1024, 16, 1024, 50257),
    "gpt2-large": (1280, 20, 1024, 50257),
    "gpt2-xl": (1600, 25, 1024, 50257),
    "heads-of-32-short-context": (256, 8, 128, 50257),
    "heads-of-128": (512, 4, 256, 50257),
}


def main(out):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, (n_embd, n_head, n_positions, vocab) in SHAPES.items():
        torch.manual_seed(2026)
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=n_positions,
            n_embd=n_embd,
            n_layer=2,
            n_head=n_head,
            initializer_range=0.1,
            activation_function="gelu_new",
        )
        with torch.device("cuda"):
            model = GPT2LMHeadModel(config).eval()
        path = os.path.join(out, name)
        model.save_pretrained(path, safe_serialization=True)
        ref = {"prompts": PROMPTS, "greedy": [], "min_gap": []}
        logits = {}
        with torch.no_grad():
            for i, p in enumerate(PROMPTS):
                ids = torch.tensor([p], device="cuda")
                logits[f"logits.{i}"] = model(ids).logits[0].float().contiguous().cpu()
                seq = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=NEW_TOKENS,
                    min_new_tokens=NEW_TOKENS,
                    do_sample=False,
                    pad_token_id=0,
                    eos_token_id=None,
                )
                ref["greedy"].append(seq[0, len(p):].tolist())
                full = model(seq[:, :-1]).logits[0, len(p) - 1:]
                top2 = full.topk(2, dim=-1).values
                ref["min_gap"].append(float((top2[:, 0] - top2[:, 1]).min()))
        save_file(logits, os.path.join(path, "reference.safetensors"))
        with open(os.path.join(path, "reference.json"), "w") as f:
            json.dump(ref, f)
        print(name, "min gaps", ref["min_gap"], flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
