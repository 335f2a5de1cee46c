#!/usr/bin/env bash
# Builds, here, what a GPU machine without cargo runs: the release test and
# bench binaries and `generate`, stripped and packed into
# device-carry/bin.tar.xz (git-ignored) under readable names (`test-<name>`,
# `bench-<name>`, `generate`). Carry `device-carry` to the GPU machine and
# run `benches/device/run.sh STEP..` there.
#
#   benches/device/pack.sh                  # what run.sh's steps use
#   benches/device/pack.sh test-decode ..   # only these
#
# A call carries 64 MiB: every binary holds the library's packed PTX, which
# one large compression window stores about once.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=device-carry
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(test-gpu_kernels test-dsl_ops test-adversarial test-decode test-model
    test-tensor_parallel bench-gemv bench-gpt2 bench-tensor_parallel generate)
rm -rf "$out/bin" && mkdir -p "$out/bin"

# Every executable a cargo command builds, as "kind name path" lines.
executables() {
    cargo "$@" --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]
        print(t["kind"][0], t["name"], m["executable"])'
}

{
    executables test --release --workspace --no-run
    executables bench --workspace --no-run # the bench profile: optimized
    executables build --release -p gpt-model --bin generate
} | sort -u | while read -r kind name path; do
    case $kind in
        test) dest="test-$name" ;;
        bench) dest="bench-$name" ;;
        lib) dest="test-lib-$name" ;; # a crate's unit tests
        *) dest=$name ;;
    esac
    for w in "${wanted[@]}"; do
        if [ "$w" = "$dest" ]; then cp "$path" "$out/bin/$dest"; fi
    done
done
for w in "${wanted[@]}"; do
    [ -e "$out/bin/$w" ] || { echo "pack.sh: cargo built no $w" >&2; exit 1; }
done
strip "$out"/bin/*
XZ_OPT="-9 --lzma2=dict=256MiB" tar -C "$out" -cJf "$out/bin.tar.xz" bin
rm -rf "$out/bin"
ls -l "$out/bin.tar.xz"
tar -tJf "$out/bin.tar.xz" | sed 's/^/  /'
