// Experiment: decode attention's split combine at GPT-2 124M's shape
// (batch 1, 12 heads of 64, bf16 caches of 1,024 positions), four ways:
//   0  each split stores its partial, no combine (the floor; output wrong)
//   1  tile's way: partials and log-sum-exps to global memory, a fence and
//      an atomic count, the last split to arrive combines (from L2)
//   2  a thread-block cluster per head: partials in shared memory, cluster
//      barrier, split 0 reads the others' through distributed shared
//      memory, combines, then a second cluster barrier before any exits
//   3  as 2, but each split pushes its partial into split 0's shared
//      memory and arrives (release); only split 0 waits (acquire)
//   4  as 3, every thread of every split waiting
//   5  as 4, the log-sum-exps pushed in a second round of their own
// Each kernel waits for the one before (griddepcontrol, programmatic
// dependent launch); a CUDA graph of 48 launches (four steps' worth of
// GPT-2's 12 layers) replayed 200 times; µs per kernel, best of 5.
// nvcc -O3 -arch=sm_90a -o combine combine.cu
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cstdio>
#include <cmath>
#include <vector>
#include <algorithm>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
typedef __nv_bfloat16 bf;
constexpr int H = 12, D = 64, C = H * D, S = 1024, BK = 64, WARPS = 8, MAXS = 16;

template <int MODE>
__global__ void __launch_bounds__(256) attn(const bf* __restrict__ q3, const bf* __restrict__ kc, const bf* __restrict__ vc,
                                            const int* len, float* partial, float* lse, int* arrived, bf* out, float scale) {
  __shared__ float wm[WARPS], wl[WARPS], wacc[WARPS][D];
  __shared__ float so[D], slse;
  __shared__ float in_o[MAXS][D], in_lse[MAXS];
  __shared__ int last_flag;
  const int h = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = threadIdx.x;
  if (MODE >= 3) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int keys = min(len[0], S), tiles = (keys + BK - 1) / BK, per = (tiles + splits - 1) / splits;
  const int first = split * per, last = min(first + per, tiles);
  float2 q = __bfloat1622float2(*(const __nv_bfloat162*)(q3 + h * D + 2 * lane));
  const float qs = scale * 1.4426950408889634f;
  q.x *= qs; q.y *= qs;
  float m = -INFINITY, l = 0.f, a0 = 0.f, a1 = 0.f;
  for (int j = first; j < last; j++) {
    __nv_bfloat162 kr[8], vr[8];
    for (int i = 0; i < 8; i++) {
      int key = j * BK + warp * 8 + i;
      int row = min(key, S - 1);
      kr[i] = *(const __nv_bfloat162*)(kc + (size_t)row * C + h * D + 2 * lane);
      vr[i] = *(const __nv_bfloat162*)(vc + (size_t)row * C + h * D + 2 * lane);
    }
    float s[8], tmax = -INFINITY;
    for (int i = 0; i < 8; i++) {
      float2 k = __bfloat1622float2(kr[i]);
      float d = q.x * k.x + q.y * k.y;
      for (int o = 16; o; o >>= 1) d += __shfl_xor_sync(~0u, d, o);
      s[i] = (j * BK + warp * 8 + i < keys) ? d : -INFINITY;
      tmax = fmaxf(tmax, s[i]);
    }
    float mn = fmaxf(m, tmax);
    if (mn > -INFINITY) {
      float alpha = exp2f(m - mn);
      l *= alpha; a0 *= alpha; a1 *= alpha;
      for (int i = 0; i < 8; i++) {
        float p = exp2f(s[i] - mn);
        float2 v = __bfloat1622float2(vr[i]);
        l += p; a0 += p * v.x; a1 += p * v.y;
      }
      m = mn;
    }
  }
  if (lane == 0) { wm[warp] = m; wl[warp] = l; }
  wacc[warp][2 * lane] = a0; wacc[warp][2 * lane + 1] = a1;
  __syncthreads();
  float o = 0.f, ls = -INFINITY;
  if (t < D) {
    float M = -INFINITY;
    for (int w = 0; w < WARPS; w++) M = fmaxf(M, wm[w]);
    float L = 0.f, A = 0.f;
    if (M > -INFINITY)
      for (int w = 0; w < WARPS; w++) { float f = exp2f(wm[w] - M); L += wl[w] * f; A += wacc[w][t] * f; }
    o = L > 0.f ? A / L : 0.f;
    ls = M + log2f(L);
  }
  auto combine = [&](auto get_o, auto get_lse) {
    if (t < D) {
      float top = -INFINITY;
      for (int r = 0; r < splits; r++) top = fmaxf(top, get_lse(r));
      float W = 0.f, A = 0.f;
      for (int r = 0; r < splits; r++) { float w = exp2f(get_lse(r) - top); W += w; A += w * get_o(r); }
      out[h * D + t] = __float2bfloat16(top > -INFINITY ? A / W : 0.f);
    }
  };
  if (MODE == 0) {
    if (t < D) { partial[(h * MAXS + split) * D + t] = o; if (t == 0) lse[h * MAXS + split] = ls; }
  } else if (MODE == 1) {
    if (t < D) { partial[(h * MAXS + split) * D + t] = o; if (t == 0) lse[h * MAXS + split] = ls; }
    __syncthreads();
    if (t == 0) { __threadfence(); last_flag = atomicAdd(&arrived[h], 1) == splits - 1; }
    __syncthreads();
    if (last_flag) {
      __threadfence();
      combine([&](int r) { return __ldcg(&partial[(h * MAXS + r) * D + t]); }, [&](int r) { return __ldcg(&lse[h * MAXS + r]); });
      if (t == 0) arrived[h] = 0;
    }
  } else if (MODE == 2) {
    cg::cluster_group cl = cg::this_cluster();
    if (t < D) { so[t] = o; if (t == 0) slse = ls; }
    cl.sync();
    if (cl.block_rank() == 0)
      combine([&](int r) { return cl.map_shared_rank(so, r)[t]; }, [&](int r) { return *cl.map_shared_rank(&slse, r); });
    cl.sync();
  } else if (MODE == 4 || MODE == 5) {
    // Push, every thread waiting at each round; MODE 5: the log-sum-exps
    // in a second round of their own (two gathers, one after the other).
    cg::cluster_group cl = cg::this_cluster();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    int me = cl.block_rank();
    if (t < D) {
      cl.map_shared_rank(&in_o[0][0], 0)[me * D + t] = o;
      if (MODE == 4 && t == 0) cl.map_shared_rank(in_lse, 0)[me] = ls;
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (MODE == 5) {
      if (t == 0) cl.map_shared_rank(in_lse, 0)[me] = ls;
      asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
      asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    }
    if (me == 0) combine([&](int r) { return in_o[r][t]; }, [&](int r) { return in_lse[r]; });
  } else {
    cg::cluster_group cl = cg::this_cluster();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    int me = cl.block_rank();
    if (t < D) {
      cl.map_shared_rank(&in_o[0][0], 0)[me * D + t] = o;
      if (t == 0) cl.map_shared_rank(in_lse, 0)[me] = ls;
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    if (me == 0) {
      asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
      combine([&](int r) { return in_o[r][t]; }, [&](int r) { return in_lse[r]; });
    }
  }
}

template <int MODE>
void launch(cudaStream_t st, int splits, const bf* q3, const bf* kc, const bf* vc, const int* len, float* partial, float* lse, int* arrived, bf* out) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(H, splits);
  cfg.blockDim = dim3(256);
  cfg.stream = st;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  at[1].id = cudaLaunchAttributeClusterDimension;
  at[1].val.clusterDim.x = 1; at[1].val.clusterDim.y = splits; at[1].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = MODE >= 2 ? 2 : 1;
  CK(cudaLaunchKernelEx(&cfg, attn<MODE>, q3, kc, vc, len, partial, lse, arrived, out, 0.125f));
}

int main() {
  CK(cudaFuncSetAttribute(attn<2>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(attn<3>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(attn<4>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(attn<5>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::vector<bf> hq(3 * C), hk((size_t)S * C), hv((size_t)S * C);
  unsigned st = 1;
  auto rnd = [&]() { st = st * 1664525u + 1013904223u; return ((st >> 8) / 16777216.f - 0.5f) * 4.f; };
  for (auto& x : hq) x = __float2bfloat16(rnd());
  for (auto& x : hk) x = __float2bfloat16(rnd());
  for (auto& x : hv) x = __float2bfloat16(rnd());
  bf *q3, *kc, *vc, *out; float *partial, *lse; int *arrived, *len;
  CK(cudaMalloc(&q3, 3 * C * 2)); CK(cudaMalloc(&kc, (size_t)S * C * 2)); CK(cudaMalloc(&vc, (size_t)S * C * 2));
  CK(cudaMalloc(&out, C * 2)); CK(cudaMalloc(&partial, H * MAXS * D * 4)); CK(cudaMalloc(&lse, H * MAXS * 4));
  CK(cudaMalloc(&arrived, H * 4)); CK(cudaMalloc(&len, 4));
  CK(cudaMemset(arrived, 0, H * 4));
  CK(cudaMemcpy(q3, hq.data(), 3 * C * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(kc, hk.data(), (size_t)S * C * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(vc, hv.data(), (size_t)S * C * 2, cudaMemcpyHostToDevice));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  printf("%s; decode attention, batch 1, %d heads of %d, bf16, µs a kernel in a graph of 48 (best of 5 x 200 replays)\n", p.name, H, D);
  printf("%6s %6s | %10s %10s %10s %10s %10s %10s | max |err| vs f64: global, pull, push, push all wait, two rounds\n", "keys", "splits", "no combine", "global", "clust pull", "clust push", "push+wait", "2 rounds");
  for (int keys : {16, 64, 128, 272, 512, 1024}) {
    CK(cudaMemcpy(len, &keys, 4, cudaMemcpyHostToDevice));
    // f64 reference
    std::vector<double> ref(C);
    for (int h = 0; h < H; h++) {
      std::vector<double> sc(keys); double mx = -1e300;
      for (int k = 0; k < keys; k++) { double d = 0; for (int i = 0; i < D; i++) d += (double)__bfloat162float(hq[h * D + i]) * __bfloat162float(hk[(size_t)k * C + h * D + i]); sc[k] = d * 0.125; mx = std::max(mx, sc[k]); }
      double L = 0; for (int k = 0; k < keys; k++) { sc[k] = exp(sc[k] - mx); L += sc[k]; }
      for (int i = 0; i < D; i++) { double a = 0; for (int k = 0; k < keys; k++) a += sc[k] * __bfloat162float(hv[(size_t)k * C + h * D + i]); ref[h * D + i] = a / L; }
    }
    for (int splits : {2, 8, 16}) {
      double best[6]; double err[6] = {0, 0, 0, 0, 0, 0};
      for (int mode = 0; mode < 6; mode++) {
        auto go = [&]() {
          if (mode == 0) launch<0>(s, splits, q3, kc, vc, len, partial, lse, arrived, out);
          if (mode == 1) launch<1>(s, splits, q3, kc, vc, len, partial, lse, arrived, out);
          if (mode == 2) launch<2>(s, splits, q3, kc, vc, len, partial, lse, arrived, out);
          if (mode == 3) launch<3>(s, splits, q3, kc, vc, len, partial, lse, arrived, out);
          if (mode == 4) launch<4>(s, splits, q3, kc, vc, len, partial, lse, arrived, out);
          if (mode == 5) launch<5>(s, splits, q3, kc, vc, len, partial, lse, arrived, out);
        };
        CK(cudaMemset(out, 0, C * 2));
        go(); CK(cudaStreamSynchronize(s));
        std::vector<bf> ho(C); CK(cudaMemcpy(ho.data(), out, C * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < C; i++) err[mode] = std::max(err[mode], fabs(__bfloat162float(ho[i]) - ref[i]));
        cudaGraph_t g; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < 48; i++) go();
        CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
        cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        best[mode] = 1e30;
        for (int rep = 0; rep < 5; rep++) {
          CK(cudaEventRecord(e0, s));
          for (int i = 0; i < 200; i++) CK(cudaGraphLaunch(ge, s));
          CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
          float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
          best[mode] = std::min(best[mode], ms * 1e3 / (200.0 * 48));
        }
        CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
      }
      printf("%6d %6d | %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f | %.1e %.1e %.1e %.1e %.1e\n", keys, splits, best[0], best[1], best[2], best[3], best[4], best[5], err[1], err[2], err[3], err[4], err[5]);
    }
  }
  return 0;
}
