#!/usr/bin/env bash
# On the GPU machine (no cargo there): runs the binaries that
# benches/device/pack.sh packed into device-carry/bin.tar.xz, step by step,
# each step's whole output in $OUT/<step>.txt (or /tmp/tile-out), a line
# per step at the end. A step that fails does not stop the next.
#
#   benches/device/run.sh tests sanitize chain gemv gpt2 xl
#
# Steps:
#   tests     every packed test binary, GPU tests required (TILE_REQUIRE_GPU=1)
#   sanitize  compute-sanitizer memcheck and racecheck on the split-K test
#             and on the replayed decode step
#   chain     benches/peak/decode_chain.cu, built with nvcc and run
#   gemv      few-row linears against cuBLAS
#   gpt2      the gpt2 bench on GPT-2 124M's shape (random weights), then the
#             gpt-fast-style decoder on the same checkpoint
#   xl        the gpt2 bench on gpt2-xl's shape
#   breakdown a decode step's kernels by time (ncu, then
#             benches/decode_breakdown.py), GPT-2 124M's and gpt2-xl's shapes
#   tp        the tensor-parallel bench on gpt2-xl's shape (2 GPUs or more)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/tile-out}
mkdir -p "$out"
bin=/tmp/tile-bin
rm -rf "$bin" && mkdir -p "$bin" && tar -C "$bin" -xJf device-carry/bin.tar.xz --strip-components=1 || exit 1
export TILE_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
# cuBLAS for the benches that compare with it: PyTorch's wheel carries it.
cublas=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(nvidia.cu13.__path__[0], "lib"))' 2>/dev/null ||
    python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=${cublas:+$cublas:}${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

checkpoint() { # DIR SHAPE: random weights in the Hugging Face layout, once
    [ -e "$1/model.safetensors" ] || python3 benches/gpt2_transformers.py "$1" --shape "$2" --write-only
}

step() {
    case $1 in
        tests)
            for t in "$bin"/test-*; do
                echo "== $(basename "$t")"
                "$t" || return 1
            done
            ;;
        sanitize)
            for tool in memcheck racecheck; do
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/test-gpu_kernels" split_k || return 1
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/test-model" gpu_replayed || return 1
            done
            ;;
        chain)
            nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/decode_chain benches/peak/decode_chain.cu && timeout 300 /tmp/decode_chain
            ;;
        gemv) "$bin/bench-gemv" ;;
        gpt2)
            checkpoint /tmp/gpt2 124m && "$bin/bench-gpt2" /tmp/gpt2 && python3 benches/gpt2_fast.py /tmp/gpt2
            ;;
        xl) checkpoint /tmp/xl xl && "$bin/bench-gpt2" /tmp/xl ;;
        breakdown)
            # The gpt2 bench's 16-token prompt, 64 new tokens: the first run
            # tunes (cached), the second is profiled kernel by kernel.
            for m in gpt2:124m xl:xl; do
                name=${m%%:*}
                dir=/tmp/$name
                checkpoint "$dir" "${m##*:}" || return 1
                gen=("$bin/generate" --model "$dir" --dtype bf16 --temperature 0 --ignore-eos --max-new-tokens 64
                    --prompt "The meaning of life is a question that has been asked by the largest of all")
                "${gen[@]}" >/dev/null || return 1
                ncu --csv --log-file "$out/breakdown-$name.csv" --metrics gpu__time_duration.sum \
                    --cache-control none --clock-control none "${gen[@]}" >/dev/null || return 1
                python3 benches/decode_breakdown.py "$out/breakdown-$name.csv" || return 1
            done
            ;;
        tp) checkpoint /tmp/xl xl && NCCL_NVLS_ENABLE=0 "$bin/bench-tensor_parallel" /tmp/xl ;;
        *)
            echo "run.sh: no step $1" >&2
            return 2
            ;;
    esac
}

summary=()
for s in "$@"; do
    start=$SECONDS
    echo "==== $s"
    step "$s" 2>&1 | tee "$out/$s.txt"
    rc=${PIPESTATUS[0]}
    summary+=("$(printf '%-9s rc %d, %d s' "$s" "$rc" $((SECONDS - start)))")
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
