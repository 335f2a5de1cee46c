"""PyTorch's token picks on the shapes of `benches/sample.rs`: bf16 rows of
50,257 logits, 1, 16 and 256 rows. `torch.topk(x, 50)` alone, and the
pipelines `transformers` runs when it samples (its TopKLogitsWarper and
TopPLogitsWarper, then softmax and multinomial), at temperature 0.8;
median of 100 runs timed with CUDA events."""
import torch
from torch_timing import median_ms

COLS = 50257


def top_k_filter(x, k):
    kth = torch.topk(x, k)[0][..., -1, None]
    return x.masked_fill(x < kth, float("-inf"))


def top_p_filter(x, p):
    sorted_x, order = torch.sort(x, descending=False)
    cumulative = sorted_x.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - p)
    remove[..., -1:] = 0
    return x.masked_fill(remove.scatter(1, order, remove), float("-inf"))


def draw(x):
    return torch.multinomial(torch.softmax(x.float(), dim=-1), 1)


def main():
    torch.manual_seed(0)
    print(torch.cuda.get_device_name())
    for rows in [1, 16, 256]:
        x = (torch.rand(rows, COLS, device="cuda") * 16 - 8).to(torch.bfloat16)
        t = 0.8
        times = {
            "argmax": median_ms(lambda _: x.argmax(-1), 100, 1),
            "topk(50) alone": median_ms(lambda _: torch.topk(x, 50), 100, 1),
            "plain": median_ms(lambda _: draw(x / t), 100, 1),
            "top-k 50": median_ms(lambda _: draw(top_k_filter(x / t, 50)), 100, 1),
            "top-p 0.9": median_ms(lambda _: draw(top_p_filter(x / t, 0.9)), 100, 1),
            "top-k 50 + top-p 0.95": median_ms(lambda _: draw(top_p_filter(top_k_filter(x / t, 50), 0.95)), 100, 1),
        }
        print(f"{rows} x {COLS} bf16: " + ", ".join(f"{k} {1e3 * v:.1f} us" for k, v in times.items()))


if __name__ == "__main__":
    main()
