#!/usr/bin/env bash
# One of our benches, then PyTorch on the same shapes, in one command on
# one GPU: `benches/with_pytorch.sh memory_bound` or `.. attention`, which
# run `benches/<name>.rs` and then `benches/torch_<name>.py`. Takes the
# built bench binary (from `cargo bench --no-run`, path printed by cargo)
# as the second argument, or builds it.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
bin=${2:-}
if [ -z "$bin" ]; then
    bin=$(cargo bench --no-run --bench "$name" 2>&1 | sed -n 's/.*Executable .*(\(.*\))/\1/p' | tail -1)
fi
echo "== tile"
TILE_REQUIRE_GPU=1 "$bin"
echo "== PyTorch"
PYTHONUNBUFFERED=1 python3 "benches/torch_$name.py"
