// Experiment: the chain of 48 GPT-2-shaped matrix-vector products of
// 2026-11-27-h200-weights-before-the-wait-cuda-experiment.cu (12 layers of
// 768->2304, 768->768, 768->3072, 3072->768, bf16, distinct weights), as
// (a) 48 kernels under programmatic dependent launch in a CUDA graph, weights
// loaded before griddepcontrol.wait, and (b) one persistent kernel: every
// block resident, the phases separated by a grid barrier (a counter, release
// add, acquire poll), each block's next weights loaded into registers before
// it waits at the barrier (mode 3) or after (mode 4).
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

template <int K, int MODE>
__global__ void __launch_bounds__(128) gemv(const bf* x, const bf* w, bf* y, int N) {
  constexpr int V = K / 256;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int n = blockIdx.x * 4 + warp;
  const bf* row = w + (size_t)n * K;
  for (int i = 0; i < V; i++) asm volatile("prefetch.global.L2 [%0];" :: "l"(row + i * 256 + lane * 8));
  uint4 ws[V];
  if (MODE == 1) for (int i = 0; i < V; i++) ws[i] = __ldg((const uint4*)(row + i * 256 + lane * 8));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  if (MODE != 1) for (int i = 0; i < V; i++) ws[i] = __ldg((const uint4*)(row + i * 256 + lane * 8));
  float acc = 0.f;
  for (int i = 0; i < V; i++) acc += dot8(ws[i], __ldcg((const uint4*)(x + i * 256 + lane * 8)));
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
  if (lane == 0) y[n] = __float2bfloat16(acc * rsqrtf(K * 0.083f));
}

struct Phases { const bf* w[48]; };

// Phase p: layer p / 4, kind p % 4. Kinds 0-2 (K = 768): a block's 4 warps take
// 4 rows, a warp a row. Kind 3 (K = 3072): a block takes one row, a warp a
// quarter of K, summed through shared memory. A lane holds 3 x 16 bytes.
__device__ __forceinline__ void shape(int p, int& K, int& N) {
  int kind = p % 4; K = kind == 3 ? 3072 : 768; N = kind == 0 ? 2304 : kind == 2 ? 3072 : 768;
}

template <int MODE>
__global__ void __launch_bounds__(128) persistent(Phases ph, bf* a, bf* qkv, bf* b, bf* c, unsigned* bar) {
  __shared__ float part[4];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = gridDim.x;
  bf* bufs[4] = {a, qkv, b, c};
  uint4 ws[3];
  auto load_w = [&](int p) {
    int K, N; shape(p, K, N);
    const bf* w = ph.w[p];
    if (K == 768) { int n = blockIdx.x * 4 + warp; if (n < N) for (int i = 0; i < 3; i++) ws[i] = __ldg((const uint4*)(w + (size_t)n * 768 + i * 256 + lane * 8)); }
    else { int n = blockIdx.x; if (n < N) for (int i = 0; i < 3; i++) ws[i] = __ldg((const uint4*)(w + (size_t)n * 3072 + warp * 768 + i * 256 + lane * 8)); }
  };
  load_w(0);
  for (int p = 0; p < 48; p++) {
    if (p > 0) {
      if (MODE == 4) load_w(p);
      if (threadIdx.x == 0) {
        unsigned target = (unsigned)G * p, v;
        do { asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar)); } while (v < target);
      }
      __syncthreads();
    }
    int K, N; shape(p, K, N);
    const bf* x = bufs[p % 4]; bf* y = bufs[(p + 1) % 4];
    if (K == 768) {
      int n = blockIdx.x * 4 + warp;
      if (n < N) {
        float acc = 0.f;
        for (int i = 0; i < 3; i++) acc += dot8(ws[i], __ldcg((const uint4*)(x + i * 256 + lane * 8)));
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
        if (lane == 0) y[n] = __float2bfloat16(acc * rsqrtf(768 * 0.083f));
      }
    } else {
      int n = blockIdx.x;
      if (n < N) {
        float acc = 0.f;
        for (int i = 0; i < 3; i++) acc += dot8(ws[i], __ldcg((const uint4*)(x + warp * 768 + i * 256 + lane * 8)));
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
        if (lane == 0) part[warp] = acc;
      }
      __syncthreads();
      if (n < N && threadIdx.x == 0) y[n] = __float2bfloat16((part[0] + part[1] + part[2] + part[3]) * rsqrtf(3072 * 0.083f));
    }
    if (p + 1 < 48) {
      __syncthreads();
      if (threadIdx.x == 0) { __threadfence(); asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(bar)); }
      if (MODE == 3) load_w(p + 1);
    }
  }
}


// A warp per row (K = 768) or per quarter row (K = 3072, the quarters
// summed through shared memory); WARPS warps a block, 3168 warps in all.
template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32) persistent_w(Phases ph, bf* a, bf* qkv, bf* b, bf* c, unsigned* bar) {
  __shared__ float part[WARPS];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = gridDim.x;
  int gw = blockIdx.x * WARPS + warp;
  bf* bufs[4] = {a, qkv, b, c};
  uint4 ws[3];
  auto load_w = [&](int p) {
    int K, N; shape(p, K, N);
    const bf* w = ph.w[p];
    if (K == 768) { if (gw < N) for (int i = 0; i < 3; i++) ws[i] = __ldg((const uint4*)(w + (size_t)gw * 768 + i * 256 + lane * 8)); }
    else { int n = gw / 4; if (n < N) for (int i = 0; i < 3; i++) ws[i] = __ldg((const uint4*)(w + (size_t)n * 3072 + (gw % 4) * 768 + i * 256 + lane * 8)); }
  };
  load_w(0);
  for (int p = 0; p < 48; p++) {
    if (p > 0) {
      if (threadIdx.x == 0) {
        unsigned target = (unsigned)G * p, v;
        do { asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar)); } while (v < target);
      }
      __syncthreads();
    }
    int K, N; shape(p, K, N);
    const bf* x = bufs[p % 4]; bf* y = bufs[(p + 1) % 4];
    if (K == 768) {
      if (gw < N) {
        float acc = 0.f;
        for (int i = 0; i < 3; i++) acc += dot8(ws[i], __ldcg((const uint4*)(x + i * 256 + lane * 8)));
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
        if (lane == 0) y[gw] = __float2bfloat16(acc * rsqrtf(768 * 0.083f));
      }
    } else {
      int n = gw / 4;
      if (n < N) {
        float acc = 0.f;
        for (int i = 0; i < 3; i++) acc += dot8(ws[i], __ldcg((const uint4*)(x + (gw % 4) * 768 + i * 256 + lane * 8)));
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
        if (lane == 0) part[warp] = acc;
      }
      __syncthreads();
      if (n < N && gw % 4 == 0 && lane == 0) y[n] = __float2bfloat16((part[warp] + part[warp + 1] + part[warp + 2] + part[warp + 3]) * rsqrtf(3072 * 0.083f));
    }
    if (p + 1 < 48) {
      __syncthreads();
      if (threadIdx.x == 0) { __threadfence(); asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(bar)); }
      load_w(p + 1);
    }
  }
}

template <int K>
void launch(cudaStream_t s, const bf* x, const bf* w, bf* y, int N) {
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(N / 4); cfg.blockDim = dim3(128); cfg.stream = s;
  cudaLaunchAttribute attr[1]; attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1; cfg.attrs = attr; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, gemv<K, 1>, x, w, y, N));
}

int main() {
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  int shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  std::vector<bf*> ws; size_t bytes = 0;
  for (int l = 0; l < 12; l++) for (int i = 0; i < 4; i++) {
    size_t n = (size_t)shapes[i][0] * shapes[i][1]; bf* p; CK(cudaMalloc(&p, n * 2));
    std::vector<bf> h(n); for (size_t j = 0; j < n; j++) h[j] = __float2bfloat16((((j + 977 * (4 * l + i)) * 2654435761u) % 1000) / 1000.f - 0.45f);
    CK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice)); ws.push_back(p); bytes += n * 2;
  }
  Phases ph; for (int i = 0; i < 48; i++) ph.w[i] = ws[i];
  bf *a, *qkv, *b, *c; CK(cudaMalloc(&a, 3072 * 2)); CK(cudaMalloc(&qkv, 3072 * 2)); CK(cudaMalloc(&b, 3072 * 2)); CK(cudaMalloc(&c, 3072 * 2));
  unsigned* bar; CK(cudaMalloc(&bar, 4));
  std::vector<bf> h(3072); for (int i = 0; i < 3072; i++) h[i] = __float2bfloat16((i % 17) / 17.f - 0.5f);
  void *src, *dst; size_t cb = 1 << 30; CK(cudaMalloc(&src, cb)); CK(cudaMalloc(&dst, cb));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float best_copy = 1e9;
  for (int r = 0; r < 10; r++) { cudaEventRecord(e0, s); cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best_copy) best_copy = ms; }
  double copy_bw = 2.0 * cb / (best_copy * 1e-3);
  printf("%s, %d SMs; weights %.1f MB, copy %.0f GB/s, bound %.1f us\n", prop.name, prop.multiProcessorCount, bytes / 1e6, copy_bw / 1e9, bytes / copy_bw * 1e6);
  int occ3, occ4; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ3, persistent<3>, 128, 0)); CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ4, persistent<4>, 128, 0));
  printf("persistent blocks an SM: mode 3 %d, mode 4 %d\n", occ3, occ4);
  int G = 768;
  if (occ3 * prop.multiProcessorCount < G) { printf("grid of %d not resident\n", G); return 1; }
  float ref_sum = 0;
  for (int round = 0; round < 2; round++)
  for (int mode : {1, 3, 4, 24, 12, 8}) {
    CK(cudaMemcpy(a, h.data(), 3072 * 2, cudaMemcpyHostToDevice));
    cudaGraph_t g; cudaGraphExec_t ex;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (mode == 1) { for (int l = 0; l < 12; l++) { launch<768>(s, a, ws[4*l], qkv, 2304); launch<768>(s, qkv, ws[4*l+1], b, 768); launch<768>(s, b, ws[4*l+2], c, 3072); launch<3072>(s, c, ws[4*l+3], a, 768); } }
    else {
      CK(cudaMemsetAsync(bar, 0, 4, s));
      void* args[] = {&ph, &a, &qkv, &b, &c, &bar};
      if (mode <= 4) CK(cudaLaunchCooperativeKernel(mode == 3 ? (void*)persistent<3> : (void*)persistent<4>, dim3(G), dim3(128), args, 0, s));
      void* k = mode == 24 ? (void*)persistent_w<24> : mode == 12 ? (void*)persistent_w<12> : (void*)persistent_w<8>;
      if (mode > 4) CK(cudaLaunchCooperativeKernel(k, dim3(132 * 24 / mode), dim3(mode * 32), args, 0, s));
    }
    CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ex, g, 0));
    // one step from the same input, for the checksum
    CK(cudaGraphLaunch(ex, s)); CK(cudaStreamSynchronize(s));
    std::vector<bf> o(768); CK(cudaMemcpy(o.data(), a, 768 * 2, cudaMemcpyDeviceToHost));
    float sum = 0; for (auto v : o) sum += fabsf(__bfloat162float(v));
    if (mode == 1 && round == 0) ref_sum = sum;
    for (int r = 0; r < 20; r++) CK(cudaGraphLaunch(ex, s));
    CK(cudaStreamSynchronize(s));
    cudaEventRecord(e0, s); for (int r = 0; r < 200; r++) CK(cudaGraphLaunch(ex, s)); cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("round %d mode %d (%s): %.1f us a step over 200 replays (%.0f%% of bound), |out| sum %g (PDL chain %g)\n", round, mode,
           mode == 1 ? "48 kernels, PDL, weights before wait" : mode == 3 ? "persistent, 768 blocks of 4 warps, weights before barrier" : mode == 4 ? "persistent, 768 blocks of 4 warps, weights after barrier" : mode == 24 ? "persistent, 132 blocks of 24 warps" : mode == 12 ? "persistent, 264 blocks of 12 warps" : "persistent, 396 blocks of 8 warps",
           ms * 1000 / 200, 100.0 * bytes / copy_bw * 1e6 / (ms * 1000 / 200), sum, ref_sum);
  }
  return 0;
}
