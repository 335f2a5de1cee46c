// Experiment: gpt2-xl's 192 few-row products a step (48 layers of
// 1600->4800, 1600->1600, 1600->6400, 6400->1600; bf16; 2.95 GB of distinct
// weights), replayed from a CUDA graph with programmatic dependent launch.
// What keeps DRAM busy across kernel boundaries? Modes:
// (mode bits below)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
typedef __nv_bfloat16 bf;
// mode bits: dependent launch; own rows prefetched before the wait; the first
// (SM count) blocks bulk-prefetch the whole matrix; each block bulk-prefetches
// its share of the next kernel's weights before the wait; the dependents
// launched after the stores instead of after the wait
enum { PDL = 1, OWN = 2, BULK = 4, NEXT = 8, LATE = 16 };

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const __nv_bfloat162* x = (const __nv_bfloat162*)&a; const __nv_bfloat162* y = (const __nv_bfloat162*)&b; float s = 0.f;
  for (int j = 0; j < 4; j++) { float2 p = __bfloat1622float2(x[j]), q = __bfloat1622float2(y[j]); s += p.x * q.x + p.y * q.y; }
  return s;
}
__device__ __forceinline__ void bulk_prefetch(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
// share b of `count` shares of [p, p + bytes), 16-byte granules, up to 64 KB an instruction
__device__ __forceinline__ void prefetch_share(const char* p, size_t bytes, int b, int count) {
  size_t g = bytes / 16, per = (g + count - 1) / count, lo = (size_t)b * per, hi = min(g, lo + per);
  for (size_t s = lo; s < hi; s += 4096) bulk_prefetch(p + s * 16, (unsigned)(min(hi - s, (size_t)4096) * 16));
}

template <int K, int R, int MODE>
__global__ void __launch_bounds__(128) gemv(const bf* __restrict__ x, const bf* __restrict__ w, bf* __restrict__ y, int N,
                                            const char* next, size_t next_bytes, int nsm) {
  constexpr int P = K / 8, PC = P < 200 ? P : 200, J = (PC + 31) / 32;  // 16-byte pieces: a row, a chunk, a lane's
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int n0 = (blockIdx.x * 4 + warp) * R;
  if (MODE & OWN) {
    for (int r = 0; r < R; r++)
      for (int l = lane; l < K * 2 / 128; l += 32)
        if (n0 + r < N) asm volatile("prefetch.global.L2 [%0];" :: "l"((const char*)(w + (size_t)(n0 + r) * K) + l * 128));
  }
  if ((MODE & BULK) && threadIdx.x == 0 && blockIdx.x < nsm) prefetch_share((const char*)w, (size_t)N * K * 2, blockIdx.x, nsm);
  if ((MODE & NEXT) && threadIdx.x == 0) prefetch_share(next, next_bytes, blockIdx.x, gridDim.x);
  if (MODE & PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
  if ((MODE & PDL) && !(MODE & LATE)) asm volatile("griddepcontrol.launch_dependents;");
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0.f;
#pragma unroll 1
  for (int c = 0; c < P; c += PC) {
    uint4 ws[R][J];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int j = 0; j < J; j++) {
        int p = c + lane + 32 * j;
        if (p < c + PC && p < P && n0 + r < N) ws[r][j] = __ldcs((const uint4*)(w + (size_t)(n0 + r) * K) + p);
        else ws[r][j] = make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int j = 0; j < J; j++) {
      int p = c + lane + 32 * j;
      uint4 xs = p < c + PC && p < P ? __ldcg((const uint4*)x + p) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < R; r++) acc[r] += dot8(ws[r][j], xs);
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    float a = acc[r];
    for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
    if (lane == 0 && n0 + r < N) y[n0 + r] = __float2bfloat16(a * 0.02f + 0.01f);
  }
  if ((MODE & PDL) && (MODE & LATE)) asm volatile("griddepcontrol.launch_dependents;");
}

template <int K, int R, int MODE>
void launch(cudaStream_t s, const bf* x, const bf* w, bf* y, int N, const bf* next, size_t next_bytes, int nsm) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((N + 4 * R - 1) / (4 * R)); cfg.blockDim = dim3(128); cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = (MODE & PDL) != 0;
  cfg.attrs = attr; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, gemv<K, R, MODE>, x, w, y, N, (const char*)next, next_bytes, nsm));
}

const int L = 48;
const int SH[4][2] = {{1600, 4800}, {1600, 1600}, {1600, 6400}, {6400, 1600}};

template <int MODE>
void step(cudaStream_t s, std::vector<bf*>& ws, bf* a, bf* qkv, bf* b, bf* c, int nsm) {
  auto nb = [&](int i) { int j = (i + 1) % (4 * L); return (size_t)SH[j % 4][0] * SH[j % 4][1] * 2; };
  auto nw = [&](int i) { return ws[(i + 1) % (4 * L)]; };
  for (int l = 0; l < L; l++) {
    int i = 4 * l;
    launch<1600, 2, MODE>(s, a, ws[i], qkv, 4800, nw(i), nb(i), nsm);
    launch<1600, 2, MODE>(s, qkv, ws[i + 1], b, 1600, nw(i + 1), nb(i + 1), nsm);
    launch<1600, 2, MODE>(s, b, ws[i + 2], c, 6400, nw(i + 2), nb(i + 2), nsm);
    launch<6400, 1, MODE>(s, c, ws[i + 3], a, 1600, nw(i + 3), nb(i + 3), nsm);
  }
}

int main() {
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  int nsm = prop.multiProcessorCount;
  std::vector<bf*> ws; size_t bytes = 0;
  std::vector<bf> h(6400 * 1600);
  for (size_t j = 0; j < h.size(); j++) h[j] = __float2bfloat16(((j * 2654435761u) % 1000) / 1000.f - 0.5f);
  for (int l = 0; l < L; l++) for (int i = 0; i < 4; i++) {
    size_t n = (size_t)SH[i][0] * SH[i][1]; bf* p; CK(cudaMalloc(&p, n * 2));
    CK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice)); ws.push_back(p); bytes += n * 2;
  }
  bf *a, *qkv, *b, *c; CK(cudaMalloc(&a, 6400 * 2)); CK(cudaMalloc(&qkv, 6400 * 2)); CK(cudaMalloc(&b, 6400 * 2)); CK(cudaMalloc(&c, 6400 * 2));
  std::vector<bf> hx(6400, __float2bfloat16(0.1f));
  void *src, *dst; size_t cb = 1 << 30; CK(cudaMalloc(&src, cb)); CK(cudaMalloc(&dst, cb));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float best_copy = 1e9;
  for (int r = 0; r < 10; r++) { cudaEventRecord(e0, s); cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best_copy) best_copy = ms; }
  double copy_bw = 2.0 * cb / (best_copy * 1e-3);
  printf("%s, %d SMs, L2 %d MB: weights %.1f MB, copy %.0f GB/s, bound %.1f us\n", prop.name, nsm, prop.l2CacheSize >> 20, bytes / 1e6, copy_bw / 1e9, bytes / copy_bw * 1e6);
  const int modes[] = {PDL, PDL | OWN, PDL | OWN | BULK, PDL | BULK, PDL | OWN | NEXT, PDL | OWN | BULK | NEXT, PDL | LATE | OWN, PDL | LATE | OWN | BULK, 0, BULK};
  for (int round = 0; round < 2; round++)
  for (int mode : modes) {
    CK(cudaMemcpy(a, hx.data(), 6400 * 2, cudaMemcpyHostToDevice));
    cudaGraph_t g; cudaGraphExec_t ex;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    switch (mode) {
#define M(v) case v: step<v>(s, ws, a, qkv, b, c, nsm); break;
      M(PDL) M(PDL | OWN) M(PDL | OWN | BULK) M(PDL | BULK) M(PDL | OWN | NEXT) M(PDL | OWN | BULK | NEXT) M(PDL | LATE | OWN) M(PDL | LATE | OWN | BULK) M(0) M(BULK)
    }
    CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ex, g, 0));
    for (int r = 0; r < 5; r++) CK(cudaGraphLaunch(ex, s));
    CK(cudaStreamSynchronize(s));
    cudaEventRecord(e0, s); for (int r = 0; r < 30; r++) CK(cudaGraphLaunch(ex, s)); cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); double us = ms * 1000 / 30;
    std::vector<bf> o(1600); CK(cudaMemcpy(o.data(), a, 1600 * 2, cudaMemcpyDeviceToHost));
    float sum = 0; for (auto v : o) sum += __bfloat162float(v);
    printf("round %d:%s%s%s%s%s: %.1f us a step (%.1f%% of bound), checksum %g\n", round, mode & PDL ? " pdl" : " no-pdl", mode & OWN ? " own" : "", mode & BULK ? " bulk" : "", mode & NEXT ? " next" : "", mode & LATE ? " late" : "", us, 100.0 * bytes / copy_bw * 1e6 / us, sum);
    CK(cudaGraphExecDestroy(ex)); CK(cudaGraphDestroy(g));
  }
  return 0;
}
