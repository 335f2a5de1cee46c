// The ceiling of the portable tensor-core path: how many TFLOP/s
// `mma.sync` (what the portable variants issue) reaches on this GPU with
// no memory traffic at all, for bf16 (m16n8k16) and tf32 (m16n8k8).
// Each warp runs chains of independent `mma.sync`s on register operands.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/mma_sync benches/peak/mma_sync.cu && /tmp/mma_sync
#include <cstdio>
#include <cuda_runtime.h>

constexpr int CHAINS = 8;

template <bool TF32>
__global__ void mma_loop(float* out, int iters) {
    // Operands of 1.0 (bf16 pairs, or f32 read as tf32): finite sums.
    unsigned one = TF32 ? 0x3f800000u : 0x3f803f80u;
    unsigned a0 = one, a1 = one, a2 = one, a3 = one, b0 = one, b1 = one;
    float acc[CHAINS][4] = {};
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) {
            if (TF32) {
                asm volatile(
                    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                    : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            } else {
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                    : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
        }
    }
    float s = 0;
    for (int j = 0; j < CHAINS; ++j)
        for (int k = 0; k < 4; ++k) s += acc[j][k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <bool TF32>
void run(const char* name, int sms, int blocks_per_sm, int warps) {
    int blocks = sms * blocks_per_sm, threads = warps * 32, iters = 20000;
    float* out;
    cudaMalloc(&out, sizeof(float) * blocks * threads);
    mma_loop<TF32><<<blocks, threads>>>(out, 100);
    cudaEvent_t start, end;
    cudaEventCreate(&start);
    cudaEventCreate(&end);
    cudaEventRecord(start);
    mma_loop<TF32><<<blocks, threads>>>(out, iters);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float ms;
    cudaEventElapsedTime(&ms, start, end);
    double flops_per_mma = TF32 ? 2.0 * 16 * 8 * 8 : 2.0 * 16 * 8 * 16;
    double flops = flops_per_mma * CHAINS * iters * (double)blocks * warps;
    printf("%-5s %d blocks/SM x %2d warps: %7.1f TFLOP/s\n", name, blocks_per_sm, warps, flops / ms / 1e9);
    cudaFree(out);
}

int main() {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
    for (int warps : {4, 8, 16}) {
        run<false>("bf16", p.multiProcessorCount, 2, warps);
        run<true>("tf32", p.multiProcessorCount, 2, warps);
    }
    return 0;
}
