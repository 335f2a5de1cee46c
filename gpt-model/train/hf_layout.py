"""The Hugging Face GPT-2 layout of the character model's weights, which the
Rust loader reads for every model: `transformers`' tensor names, the
projections stored as `Conv1D` weights ([in, out]), and the configuration as
`config.json` holds it, in the file's metadata.

    python3 hf_layout.py OLD.safetensors NEW.safetensors

converts a checkpoint that `train_char_gpt.py` wrote in the PyTorch Linear
layout (names `h.N.c_attn`, `h.N.c_proj`, `h.N.c_fc`, `h.N.mlp_proj`,
weights [out, in]; metadata config with `block_size`).
"""
import json
import sys

# The training model's projections and their GPT-2 names.
PROJECTIONS = {"c_attn": "attn.c_attn", "c_proj": "attn.c_proj", "c_fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}


def hf_name(name):
    """The GPT-2 name of a training-model tensor, and whether its weight is
    transposed into a Conv1D weight."""
    parts = name.split(".")
    if parts[0] == "h" and parts[2] in PROJECTIONS:
        return ".".join(parts[:2] + [PROJECTIONS[parts[2]]] + parts[3:]), parts[3] == "weight"
    return name, False


def hf_config(config, vocab_size):
    """`config.json`'s fields for the training model's CONFIG."""
    return {
        "model_type": "gpt2",
        "n_layer": config["n_layer"],
        "n_head": config["n_head"],
        "n_embd": config["n_embd"],
        "n_positions": config["block_size"],
        "vocab_size": vocab_size,
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
        "tie_word_embeddings": True,
    }


def hf_tensors(tensors):
    """Renamed, projections transposed (numpy arrays or torch tensors)."""
    out = {}
    for name, t in tensors.items():
        new, transpose = hf_name(name)
        out[new] = t.T.copy() if transpose and hasattr(t, "copy") else (t.T.contiguous() if transpose else t)
    return out


def main(old, new):
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    meta = safe_open(old, "np").metadata()
    vocab = json.loads(meta["vocab"])
    config = hf_config(json.loads(meta["config"]), len(vocab))
    save_file(hf_tensors(load_file(old)), new, metadata={"vocab": meta["vocab"], "config": json.dumps(config)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
