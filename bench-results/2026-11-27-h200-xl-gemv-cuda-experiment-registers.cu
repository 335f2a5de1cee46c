// Experiment: how fast can a plain CUDA GEMV stream gpt2-xl's few-row
// layers (M = 1, bf16, weights [N, K] row-major, cold: rotating over copies
// larger than L2)? Each warp takes R rows; every lane loads its 16-byte
// pieces of each row before any arithmetic (all of a row's bytes in flight).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
typedef __nv_bfloat16 bf;

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const __nv_bfloat162* x = (const __nv_bfloat162*)&a; const __nv_bfloat162* y = (const __nv_bfloat162*)&b; float s = 0.f;
  for (int j = 0; j < 4; j++) { float2 p = __bfloat1622float2(x[j]), q = __bfloat1622float2(y[j]); s += p.x * q.x + p.y * q.y; }
  return s;
}

// K / 8 = P pieces of 16 bytes per row; lane l takes pieces l, l + 32, ..
template <int K, int R, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) gemv(const bf* __restrict__ x, const bf* __restrict__ w, bf* __restrict__ y, int N) {
  constexpr int P = K / 8, J = (P + 31) / 32;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int n0 = (blockIdx.x * WARPS + warp) * R;
  uint4 ws[R][J];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int j = 0; j < J; j++) {
      int p = lane + 32 * j;
      if (p < P && n0 + r < N) ws[r][j] = __ldcs((const uint4*)(w + (size_t)(n0 + r) * K) + p);
      else ws[r][j] = make_uint4(0, 0, 0, 0);
    }
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0.f;
#pragma unroll
  for (int j = 0; j < J; j++) {
    int p = lane + 32 * j;
    uint4 xs = p < P ? __ldg((const uint4*)x + p) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] += dot8(ws[r][j], xs);
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    float a = acc[r];
    for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
    if (lane == 0 && n0 + r < N) y[n0 + r] = __float2bfloat16(a);
  }
}

template <int K, int R, int WARPS>
float time_layer(int N, std::vector<bf*>& ws, bf* x, bf* y, cudaStream_t s) {
  int rows_per_block = R * WARPS, grid = (N + rows_per_block - 1) / rows_per_block;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 8; i++) gemv<K, R, WARPS><<<grid, WARPS * 32, 0, s>>>(x, ws[i % ws.size()], y, N);
  float best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < 128; i++) gemv<K, R, WARPS><<<grid, WARPS * 32, 0, s>>>(x, ws[i % ws.size()], y, N);
    cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); best = fminf(best, ms * 1000 / 128);
  }
  return best;
}

template <int K>
void layer(int N, double copy_gbs, bf* x, bf* y, cudaStream_t s) {
  size_t bytes = (size_t)N * K * 2; int copies = (int)((256u << 20) / bytes) + 2;
  std::vector<bf*> ws;
  for (int i = 0; i < copies; i++) { bf* p; CK(cudaMalloc(&p, bytes)); CK(cudaMemset(p, 0x3c, bytes)); ws.push_back(p); }
  float t[6] = {time_layer<K, 1, 4>(N, ws, x, y, s), time_layer<K, 2, 4>(N, ws, x, y, s), time_layer<K, 4, 4>(N, ws, x, y, s),
                time_layer<K, 1, 8>(N, ws, x, y, s), time_layer<K, 2, 8>(N, ws, x, y, s), time_layer<K, 4, 8>(N, ws, x, y, s)};
  const char* names[6] = {"R1W4", "R2W4", "R4W4", "R1W8", "R2W8", "R4W8"};
  printf("K=%d N=%d (%.1f MB):", K, N, bytes / 1e6);
  for (int i = 0; i < 6; i++) printf("  %s %.2f us (%.0f%% of copy)", names[i], t[i], 100.0 * bytes / (t[i] * 1e-6) / 1e9 / copy_gbs);
  printf("\n");
  for (auto p : ws) cudaFree(p);
}

int main() {
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  bf *x, *y; CK(cudaMalloc(&x, 8192 * 2)); CK(cudaMalloc(&y, 65536 * 2)); CK(cudaMemset(x, 0x3c, 8192 * 2));
  void *src, *dst; size_t cb = 256u << 20; CK(cudaMalloc(&src, cb)); CK(cudaMalloc(&dst, cb));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1); float best = 1e9;
  for (int r = 0; r < 10; r++) { cudaEventRecord(e0, s); cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); best = fminf(best, ms); }
  double copy = 2.0 * cb / (best * 1e-3) / 1e9;
  printf("%s: copy %.0f GB/s\n", prop.name, copy);
  layer<1600>(4800, copy, x, y, s);  // gpt2-xl QKV
  layer<1600>(1600, copy, x, y, s);  // proj
  layer<1600>(6400, copy, x, y, s);  // fc
  layer<6400>(1600, copy, x, y, s);  // mlp_proj
  layer<768>(2304, copy, x, y, s);   // GPT-2 QKV
  layer<768>(3072, copy, x, y, s);   // GPT-2 fc
  layer<3072>(768, copy, x, y, s);   // GPT-2 mlp_proj
  return 0;
}
