#!/usr/bin/env python3
"""A decode step's time by kernel, from an ncu CSV of `generate`'s
`gpu__time_duration.sum` (as `benches/device/run.sh breakdown` writes it):

    python3 benches/decode_breakdown.py step.csv

A step starts with its `embedding` kernel, so the launches are cut there;
the last whole step is the table (each kernel profiled alone: no
dependent launch overlaps its start). Kernels are grouped by name, grid
and place in a layer (the step's repeating run of launches), which tells
a layer's products apart where two share a kernel and a grid.
"""

import csv
import sys

# ncu's duration units, in µs.
US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def launches(path):
    """(kernel name, grid, µs) per profiled launch, in launch order."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = []
    for r in csv.DictReader(lines):
        if r["Metric Name"] != "gpu__time_duration.sum":
            continue
        us = float(r["Metric Value"].replace(",", "")) * US[r["Metric Unit"]]
        rows.append((r["Kernel Name"], r["Grid Size"], us))
    return rows


def steps(rows):
    """The launches cut at each `embedding` kernel."""
    out = []
    for row in rows:
        if row[0].startswith("embedding") or not out:
            out.append([])
        out[-1].append(row)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    all_steps = steps(launches(sys.argv[1]))
    if len(all_steps) < 3:
        sys.exit(f"{sys.argv[1]}: {len(all_steps)} steps; profile a prefill and two decode steps or more")
    # A profile cut short (ncu stopped) ends in a partial step: the table
    # is then the last whole one, which has as many launches as its predecessor.
    decode = all_steps[1:]
    whole = [i for i in range(1, len(decode)) if len(decode[i]) == len(decode[i - 1])]
    if not whole:
        sys.exit(f"{sys.argv[1]}: no two decode steps of as many launches: no steady step")
    last = whole[-1]
    step = decode[last]
    if last != len(decode) - 1:
        print(f"the last step ({len(decode[-1])} launches) is partial: step {last + 1} of {len(decode)}")
    total = sum(us for _, _, us in step)
    period, start, layers = layer_pattern(step)
    groups = {}
    for i, (name, grid, us) in enumerate(step):
        inside = start <= i < start + period * layers
        at = (i - start) % period + 1 if inside else None
        g = groups.setdefault((name, grid, at), [0, 0.0])
        g[0] += 1
        g[1] += us
    print(f"{len(decode)} decode steps profiled; the table's: {len(step)} kernels, {total:.1f} us one at a time")
    print(f"{layers} layers of {period} kernels from launch {start + 1}")
    print()
    print("| kernel | grid | in the layer | launches | µs each | µs | share |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (name, grid, at), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        place = "–" if at is None else at
        print(f"| `{name}` | {grid} | {place} | {n} | {us / n:.2f} | {us:.1f} | {100 * us / total:.1f}% |")


def layer_pattern(step):
    """(period, first launch, repeats) of the longest run of launches that
    repeats one kernel sequence: the layers, whose kernels the table then
    tells apart by their place in a layer (two products of one kernel and
    grid, say)."""
    keys = [(name, grid) for name, grid, _ in step]
    best = (1, 0, 0)
    for period in range(1, len(keys) // 2 + 1):
        for start in range(period):
            repeats = 0
            while start + period * (repeats + 1) <= len(keys) and (
                repeats == 0
                or keys[start + period * repeats : start + period * (repeats + 1)] == keys[start : start + period]
            ):
                repeats += 1
            if repeats >= 2 and period * repeats > best[0] * best[2]:
                best = (period, start, repeats)
    return best


if __name__ == "__main__":
    main()
