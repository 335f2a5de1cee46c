#!/usr/bin/env bash
# The memory-bound comparison in one command on one GPU: our kernels, then
# PyTorch on the same shapes. Needs the built bench binary (from
# `cargo bench --no-run`, path printed by cargo) as $1, or builds it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
    bin=$(cargo bench --no-run --bench memory_bound 2>&1 | sed -n 's/.*Executable .*(\(.*\))/\1/p' | tail -1)
fi
echo "== tile"
TILE_REQUIRE_GPU=1 "$bin"
echo "== PyTorch"
PYTHONUNBUFFERED=1 python3 benches/torch_memory_bound.py
