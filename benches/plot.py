"""Draws BENCHMARKS.md's ratios to the baselines as one SVG (no plotting
library needed): ours over cuBLAS, PyTorch's SDPA, PyTorch and
`transformers` or a gpt-fast-style decoder, and two GPUs over one, one
bar per table row, a line at 1.0.

    python3 benches/plot.py    # writes bench-results/ratios.svg

Run it after a table changes; BENCHMARKS.md shows the file.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAR, GAP, LABEL, WIDTH, SCALE_MAX = 14, 4, 330, 860, 3.5

# (section heading prefix, column, label columns, title, the value's side of a "/"-pair)
PANELS = [
    ("## Memory-bound", "× PyTorch", ["kernel", "shape"], "memory-bound, bf16: × PyTorch", 1),
    ("## Matmul vs cuBLAS", "bursts", ["dtype", "M×K×N"], "matmul: / cuBLAS (bursts)", 0),
    ("## Causal attention", "/ default, per run", ["dtype", "D", "B×T"], "causal attention: × SDPA (lowest run)", 0),
    ("## GPT-2: prefill", "× baseline", ["workload", "baseline"], "GPT-2 124M: × the baseline", 0),
    ("## GPT-2 over several GPUs", "2 / 1", ["workload"], "gpt2-xl shape: 2 GPUs / 1 GPU", 0),
]


def table(text, heading):
    """The first Markdown table after `heading`: its header and rows."""
    rows = []
    for line in text[text.index(heading):].split("\n"):
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[0], rows[2:]


def number(cell, side):
    parts = cell.split("/")
    found = re.findall(r"[0-9]+(?:\.[0-9]+)?", parts[min(side, len(parts) - 1)].replace(",", ""))
    return float(found[0]) if found else None


def main():
    text = open(os.path.join(ROOT, "BENCHMARKS.md")).read()
    bars = []
    for heading, column, labels, title, side in PANELS:
        header, rows = table(text, heading)
        bars.append(("title", title, None))
        for r in rows:
            value = number(r[header.index(column)], side)
            if value is not None:
                bars.append(("bar", " ".join(r[header.index(l)] for l in labels), value))
    height = len(bars) * (BAR + GAP) + 40
    x = lambda v: LABEL + (WIDTH - LABEL - 60) * min(v, SCALE_MAX) / SCALE_MAX
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    y = 10
    for kind, label, value in bars:
        if kind == "title":
            out.append(f'<text x="4" y="{y + BAR - 2}" font-weight="bold">{label}</text>')
        else:
            color = "#2b7bba" if value >= 1.0 else "#d9822b"
            out.append(f'<text x="{LABEL - 6}" y="{y + BAR - 3}" text-anchor="end">{label}</text>')
            out.append(f'<rect x="{LABEL}" y="{y}" width="{x(value) - LABEL:.1f}" height="{BAR}" fill="{color}"/>')
            out.append(f'<text x="{x(value) + 4:.1f}" y="{y + BAR - 3}">{value:g}</text>')
        y += BAR + GAP
    out.append(f'<line x1="{x(1.0):.1f}" y1="6" x2="{x(1.0):.1f}" y2="{y}" stroke="black" stroke-dasharray="3,3"/>')
    out.append(f'<text x="{x(1.0) + 3:.1f}" y="{y + 14}">1.0 = the baseline (bars cut at {SCALE_MAX})</text>')
    out.append("</svg>")
    path = os.path.join(ROOT, "bench-results", "ratios.svg")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(path, sum(1 for b in bars if b[0] == "bar"), "bars")


if __name__ == "__main__":
    main()
