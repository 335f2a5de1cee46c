// The ceiling of a batch-1 decode step's linear layers when DRAM is kept
// busy across their dependencies: GPT-2's chain of few-row products (per
// layer K->N: C->3C, C->C, C->4C, 4C->C; bf16; each product reading the
// whole output of the one before), at gpt2-xl's shape (C = 1600, 48 layers,
// 2.95 GB of distinct weights) and GPT-2 124M's (C = 768, 12 layers).
//
// As one kernel a product (what tile runs), DRAM idles through each
// kernel's start, first loads and tail; dependent launches and prefetches
// overlap only a little of that (bench-results/LOG.md, 2026-11-27 and -28:
// such chains reach 37-45% of the bound). Here one persistent kernel, one
// block an SM, streams the SM's rows of every product's weights, product
// after product, through a ring of shared-memory stages (bulk copies,
// mbarriers, one producer thread) that never waits for activations: the
// weights are no product's output. Its consumer warps wait only where the
// math does: before product p they wait for every block to be done with
// p - 1 (a count of blocks, release add, acquire poll), then multiply the
// stages that are already there. The weights of the next products arrive
// while the consumers wait, so the chain's latencies (about 2 us a
// product: the poll, x from L2, the sums, the count) add up only where
// they exceed the bytes' time.
//
// Prediction, written before any run: gpt2-xl 70-85% of the bound,
// GPT-2 124M 35-50%. Measured on an H200 (bench-results/LOG.md,
// 2026-12-02, with this file's earlier consumers in its history): neither.
// The cases: "coupled" (the producer waits for the product before, as a
// persistent kernel that does not run ahead); "independent" (no waits:
// wrong results, the consumers' own ceiling); "ring only" (no waits, no
// math: the ring's); "waits and counts only" (no weights: the chain of
// latencies alone). The chain's co-resident cases cap each kernel's grid at
// a few blocks an SM, so that the next kernel's blocks fit beside it and
// prefetch their weights while it streams (2026-12-02: slower than the
// chain, 11-25% of the bound against 35.6%).
//
// The staged chains keep a kernel a product but move its weights through
// shared memory by bulk copies issued before the wait for the previous
// kernel, so the bytes in flight cost no registers: "block-tile" as tile's
// gemv grids are (a block per few whole rows, up to 16 blocks an SM), and
// a ring (one block an SM, a producer warp refilling slots). No prediction
// was written before their first run. Measured (H200, 2026-12-02): block tiles of 2x rows 67% on xl (35% as tile runs it),
// 38% on GPT-2 124M (21%); the ring 55-59% and 31-35%.
//
// Three forms added to find what separates the block tiles from tile's
// `invariant` ring (bench-results/LOG.md, 2026-12-04; H200): the block
// tiles with each row copied in 2 KB or 512-byte pieces, or the block's
// rows in one copy (the same 66-68% on xl: copy size is not it); "stepped"
// block tiles, the ring's form (a stage and an mbarrier per [BN, STEP]
// tile along K, every copy issued at the start, each step waiting on its
// stage, a warp's pieces in one row so that x is loaded once per row):
// 33-42% on xl, and 37% with a single step; and "column tiles", the block
// tiles' mapping (a thread's pieces in every row of the block, x loaded
// once a block) with the rows in registers as tile's gemv holds them:
// 57% on xl (8 rows) against 35% for the chain as tile runs it, 35% on
// GPT-2 124M (4 rows) against 21%.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/decode_chain benches/peak/decode_chain.cu && /tmp/decode_chain
//
// Each mode that computes the chain (all but "independent", "ring only"
// and "waits and counts only") has its output after one step checked
// against a CPU reference (f32 sums, bf16 outputs), the intermediates
// poisoned first; a poll that spins for seconds traps instead of hanging.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e = (x);                                                                \
        if (e) {                                                                            \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));               \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
typedef __nv_bfloat16 bf;

// ---------------------------------------------------------------- common

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
    const __nv_bfloat162* x = (const __nv_bfloat162*)&a;
    const __nv_bfloat162* y = (const __nv_bfloat162*)&b;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 p = __bfloat1622float2(x[j]), q = __bfloat1622float2(y[j]);
        s += p.x * q.x + p.y * q.y;
    }
    return s;
}

// What every product's output is made of, on the GPU and the CPU: keeps the
// chain's values bounded.
__host__ __device__ __forceinline__ float epilogue(float acc) { return acc * 0.02f + 0.01f; }

// Launches `k` on `s`, a programmatic dependent of the kernel before it
// when `dependent`.
template <typename... P, typename... A>
void launch(void (*k)(P...), dim3 grid, dim3 block, int smem, cudaStream_t s, bool dependent, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = dependent;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}

// Lets `k` take `bytes` of dynamic shared memory, with as much of each
// SM's L1 as shared memory as it has (so that two kernels' blocks fit).
template <typename... P>
void allow_shared(void (*k)(P...), int bytes) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
}

// ----------------------------------------------- the chain: a kernel a product

enum { PDL = 1, OWN = 2, EARLY = 4 };

// A warp per R rows, each lane 16-byte pieces of them; weights prefetched
// into L2 before the wait for the previous kernel (OWN), as tile's gemv does.
// The warps take turns over the row groups (a grid-stride loop), so a grid
// smaller than the rows' (`co-resident`: a few blocks an SM, leaving room
// for the next kernel's) covers them; EARLY lets the next kernel launch at
// this one's start instead of after its wait, so that its blocks, resident
// beside this one's, prefetch their weights while this one streams.
template <int K, int R, int MODE>
__global__ void __launch_bounds__(128) gemv(const bf* __restrict__ x, const bf* __restrict__ w, bf* __restrict__ y,
                                            int N) {
    constexpr int P = K / 8, PC = P < 200 ? P : 200, J = (PC + 31) / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first = blockIdx.x * 4 + warp, stride = gridDim.x * 4;
    if (MODE & EARLY) asm volatile("griddepcontrol.launch_dependents;");
    if (MODE & OWN) {
        for (int n0 = first * R; n0 < N; n0 += stride * R)
            for (int r = 0; r < R; r++)
                for (int l = lane; l < K * 2 / 128; l += 32)
                    if (n0 + r < N)
                        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)(w + (size_t)(n0 + r) * K) +
                                                                     l * 128));
    }
    if (MODE & PDL) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        if (!(MODE & EARLY)) asm volatile("griddepcontrol.launch_dependents;");
    }
#pragma unroll 1
    for (int n0 = first * R; n0 < N; n0 += stride * R) {
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
                    ws[r][j] = p < c + PC && p < P && n0 + r < N
                                   ? __ldcs((const uint4*)(w + (size_t)(n0 + r) * K) + p)
                                   : make_uint4(0, 0, 0, 0);
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
            if (lane == 0 && n0 + r < N) y[n0 + r] = __float2bfloat16(epilogue(a));
        }
    }
}

// `blocks`: at most that many blocks (a co-resident grid), 0 for a block
// per 4 R rows.
template <int K, int R>
void launch_gemv(cudaStream_t s, int mode, int blocks, const bf* x, const bf* w, bf* y, int N) {
    const int full = (N + 4 * R - 1) / (4 * R);
    const dim3 grid(blocks ? std::min(blocks, full) : full);
    const bool dependent = (mode & PDL) != 0;
    if (mode == (PDL | OWN | EARLY))
        launch(gemv<K, R, PDL | OWN | EARLY>, grid, 128, 0, s, dependent, x, w, y, N);
    else if (mode == (PDL | OWN))
        launch(gemv<K, R, PDL | OWN>, grid, 128, 0, s, dependent, x, w, y, N);
    else if (mode == (PDL | EARLY))
        launch(gemv<K, R, PDL | EARLY>, grid, 128, 0, s, dependent, x, w, y, N);
    else if (mode & PDL)
        launch(gemv<K, R, PDL>, grid, 128, 0, s, dependent, x, w, y, N);
    else
        launch(gemv<K, R, 0>, grid, 128, 0, s, dependent, x, w, y, N);
}

// ------------------------------------------- the persistent kernel and its ring

struct Product {
    const bf* w;  // [n, k], row-major
    const bf* x;  // [k]
    bf* y;        // [n]
    int n, k;
};
constexpr int MAX_PRODUCTS = 192;
constexpr int STAGE_GAP = 512;
__constant__ Product products[MAX_PRODUCTS];

enum Run { AHEAD = 0, COUPLED = 1, INDEPENDENT = 2, SYNC_ONLY = 3, RING_ONLY = 4 };

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Until the phase of `parity` completes, trapping after seconds (a lost
// copy must not hang the machine).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    for (long long spins = 0;; spins++) {
        unsigned done;
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
        if (done) return;
        if (spins > (1ll << 22)) asm volatile("trap;");
    }
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void bar_consumers(int threads) { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); }
// Until `*count` reaches `target`: an acquire poll, trapping after seconds
// (a lost count must not hang the machine).
__device__ __forceinline__ void wait_count(const unsigned* count, unsigned target) {
    for (long long spins = 0;; spins++) {
        unsigned v;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
        if (v >= target) return;
        if (spins > (1ll << 24)) asm volatile("trap;");
    }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&a)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}
// d += a b, m16n8k16, bf16 operands, f32 sums.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint4 a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// Block b takes rows [n b / G, n (b + 1) / G) of every product: one
// contiguous range of the row-major weights, streamed in stages of
// `stage_bytes` (whole rows: SR = stage_bytes / (2 k) of them), one bulk
// copy a stage. Consumer warp w multiplies the block's rows w, w + C, ...,
// on tensor cores: for every 128 columns of a row, an mma multiplies x's
// eight 16-column pieces (the rows of A; x is copied from L2 into shared
// memory, padded with zeros to whole 128s, once the product before is done
// everywhere) by the row's eight pieces (the columns of B), and the
// diagonal of the 8 x 8 result, summed over the row's 128s, is the row's
// dot product; the warp stores the row's output itself.
template <int C>
__global__ void __launch_bounds__(32 * (C + 1), 1)
    persistent(int count, int stage_bytes, int stages, unsigned* ready, int run) {
    extern __shared__ __align__(128) unsigned char smem[];
    // Slots are STAGE_GAP bytes longer than a stage: a row's last 128
    // columns may read past its end, into zeros where no row follows.
    const int slot = stage_bytes + STAGE_GAP;
    const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned full = base + stages * slot, empty = full + 8 * stages;
    bf* xs = (bf*)(smem + stages * slot + 16 * stages);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = gridDim.x, b = blockIdx.x;
    for (int j = threadIdx.x; j < stages * slot / 16; j += blockDim.x) ((uint4*)smem)[j] = make_uint4(0, 0, 0, 0);
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, C);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the zeros before the bulk copies
    __syncthreads();

    if (warp == C) {  // the producer
        if (lane == 0 && run != SYNC_ONLY) {
            unsigned i = 0;
            for (int p = 0; p < count; p++) {
                const Product q = products[p];
                if (run == COUPLED && p > 0) wait_count(ready + p - 1, G);
                const int r0 = q.n * b / G, r1 = q.n * (b + 1) / G, row = 2 * q.k, sr = stage_bytes / row;
                for (int r = r0; r < r1; r += sr, i++) {
                    const int s = i % stages;
                    if (i >= (unsigned)stages) mbar_wait(empty + 8 * s, ((i / stages) & 1) ^ 1);
                    const unsigned bytes = min(sr, r1 - r) * row;
                    mbar_expect(full + 8 * s, bytes);
                    bulk_copy(base + s * slot, (const char*)q.w + (size_t)r * row, bytes, full + 8 * s);
                }
            }
        }
        return;
    }

    const int t = threadIdx.x;
    // Lane l holds D[l / 4][2 (l % 4) + h] in d[h]: the diagonal's where
    // l / 4 == 2 (l % 4) + h.
    const int diag = lane / 4 - 2 * (lane % 4);
    // ldmatrix: lane l points at piece l % 8 of 128s c + l / 16, its half (l / 8) % 2.
    const int b_off = (lane / 16) * 256 + (lane % 8) * 32 + ((lane / 8) % 2) * 16;
    const int a_off = (lane / 4) * 16 + 2 * (lane % 4);
    unsigned i0 = 0;  // the ring index of this product's first stage
    for (int p = 0; p < count; p++) {
        const Product q = products[p];
        const int r0 = q.n * b / G, r1 = q.n * (b + 1) / G, sr = stage_bytes / (2 * q.k);
        const int ns = (r1 - r0 + sr - 1) / sr, chunks = (q.k + 127) / 128;
        if (p > 0 && run != INDEPENDENT && run != RING_ONLY && t == 0) wait_count(ready + p - 1, G);
        bar_consumers(32 * C);
        for (int j = t; j < chunks * 16; j += 32 * C)
            ((uint4*)xs)[j] = j < q.k / 8 ? __ldcg((const uint4*)q.x + j) : make_uint4(0, 0, 0, 0);
        bar_consumers(32 * C);
        // Every stage of the product in turn; warp w multiplies the rows
        // w, w + C, ... of the block's, so a stage's rows are multiplied at
        // once by different warps, and C rows of several stages together.
        // Every warp frees every stage (the empty barriers count C), those
        // with no row in it at once. A product takes at most `stages`
        // stages, so no warp frees a slot a phase early.
        if (ns > stages) asm volatile("trap;");
        for (int j = 0; j < ns && run != SYNC_ONLY; j++) {
            const unsigned i = i0 + j;
            const int s = i % stages, first = j * sr, last = min(first + sr, r1 - r0);
            int k = first + (warp - first % C + C) % C;  // my first row of the stage, if any
            if (k < last) {
                mbar_wait(full + 8 * s, (i / stages) & 1);
                for (; k < last && run != RING_ONLY; k += C) {
                    const unsigned row = base + s * slot + (k - first) * q.k * 2 + b_off;
                    float d[4] = {}, e[4] = {};  // two chains of mma
                    for (int c = 0; c < chunks; c += 2) {
                        unsigned w[4];
                        ldmatrix_x4(row + c * 256, w);
                        const unsigned* x0 = (const unsigned*)(xs + c * 128 + a_off);
                        mma_bf16(d, make_uint4(x0[0], 0u, x0[4], 0u), w[0], w[1]);
                        if (c + 1 < chunks) mma_bf16(e, make_uint4(x0[64], 0u, x0[68], 0u), w[2], w[3]);
                    }
                    float v = (diag == 0 ? d[0] + e[0] : 0.f) + (diag == 1 ? d[1] + e[1] : 0.f);
                    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
                    if (lane == 0) {
                        q.y[r0 + k] = __float2bfloat16(epilogue(v));
                        __threadfence();
                    }
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(empty + 8 * s);
        }
        i0 += ns;
        bar_consumers(32 * C);
        if (t == 0) {
            __threadfence();
            const unsigned before = atomicAdd(ready + p, 1u);
            // The last block done with the last product: every block is past
            // every wait, so the counts start again at 0 for the next step.
            if (p == count - 1 && before == (unsigned)G - 1)
                for (int j = 0; j < count; j++) atomicExch(ready + j, 0u);
        }
    }
}

// ------------------------------------- the chain, weights staged by bulk copies

// A kernel a product, as the chain, but its weights go through shared
// memory instead of registers: one block an SM takes a contiguous range of
// the product's rows, in stages of R whole rows (one bulk copy each) through
// a ring of S slots; the block's last warp issues the copies before its
// consumers wait for the previous kernel, and refills the slots the
// consumers free. The dependents launch at the kernel's start (EARLY), so
// that the next kernel's block, resident beside this one (two rings fit an
// SM), has its first S stages streaming while this one computes and drains:
// DRAM need not idle at the boundary, and the bytes in flight cost no
// registers. Consumer warp w multiplies the block's stages w, w + W, ...
// with x in shared memory.
template <int K, int R, int W, bool EARLY>
__global__ void __launch_bounds__(32 * (W + 1))
    staged(const bf* __restrict__ x, const bf* __restrict__ w, bf* __restrict__ y, int N, int S) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int P = K / 8, STAGE = R * K * 2;
    const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned full = base, empty = base + 8 * S;
    uint4* xs = (uint4*)(smem + 128 * ((16 * S + 127) / 128));
    const unsigned slots = base + 128 * ((16 * S + 127) / 128) + K * 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = gridDim.x, b = blockIdx.x;
    const int T = (N + R - 1) / R, s0 = T * b / G, ns = T * (b + 1) / G - s0;  // my stages
    // A warp that reused a slot a phase ahead would read the barrier's
    // previous phase as complete.
    if (W > S && ns > S) asm volatile("trap;");
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (EARLY) asm volatile("griddepcontrol.launch_dependents;");
    if (warp == W) {  // the producer: weights are no kernel's output, so it never waits
        if (lane == 0)
            for (int j = 0; j < ns; j++) {
                const int s = j % S, r = (s0 + j) * R;
                if (j >= S) mbar_wait(empty + 8 * s, ((j / S) - 1) & 1);
                const unsigned bytes = min(R, N - r) * K * 2;
                mbar_expect(full + 8 * s, bytes);
                bulk_copy(slots + s * STAGE, w + (size_t)r * K, bytes, full + 8 * s);
            }
        return;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!EARLY) asm volatile("griddepcontrol.launch_dependents;");
    for (int j = threadIdx.x; j < P; j += 32 * W) xs[j] = __ldcg((const uint4*)x + j);
    bar_consumers(32 * W);
    for (int j = warp; j < ns; j += W) {
        const int s = j % S, r0 = (s0 + j) * R;
        mbar_wait(full + 8 * s, (j / S) & 1);
        const uint4* st = (const uint4*)(smem + (slots - base) + s * STAGE);
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
#pragma unroll 2
        for (int p = lane; p < P; p += 32) {
            const uint4 xv = xs[p];
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += dot8(st[r * P + p], xv);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * s);
#pragma unroll
        for (int r = 0; r < R; r++) {
            float a = acc[r];
            for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
            if (lane == r && r0 + r < N) y[r0 + r] = __float2bfloat16(epilogue(a));
        }
    }
}

template <int K, int R, int W, bool EARLY>
void launch_staged(cudaStream_t s, int sms, int ring, const bf* x, const bf* w, bf* y, int N) {
    const int T = (N + R - 1) / R, G = std::min(sms, T), S = std::min(ring, (T + G - 1) / G);
    const int smem = 128 * ((16 * S + 127) / 128) + K * 2 + S * R * K * 2;
    // The most any launch takes: each captured launch is checked against it.
    allow_shared(staged<K, R, W, EARLY>, 227 * 1024);
    launch(staged<K, R, W, EARLY>, G, 32 * (W + 1), smem, s, true, x, w, y, N, S);
}

// The block's BN row sums, each the sum of every thread's `acc[r]` (4
// warps), through the epilogue into y[n0 .. n0 + nr).
template <int BN>
__device__ __forceinline__ void store_row_sums(const float (&acc)[BN], bf* __restrict__ y, int n0, int nr) {
    __shared__ float part[4][BN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < BN; r++) {
        float a = acc[r];
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
        if (lane == 0) part[warp][r] = a;
    }
    __syncthreads();
    if (threadIdx.x < nr) {
        const float a = part[0][threadIdx.x] + part[1][threadIdx.x] + part[2][threadIdx.x] + part[3][threadIdx.x];
        y[n0 + threadIdx.x] = __float2bfloat16(epilogue(a));
    }
}

// A block per BN whole rows, as tile's gemv grids are, each block's rows
// bulk-copied into its shared memory at its start (one copy a row), before
// it waits for the previous kernel: with few registers a block, up to 16
// blocks an SM keep their rows in flight, and as this kernel's blocks
// leave, the next kernel's take their place and issue their copies while
// the rest of this one drains. Thread t multiplies 16-byte pieces t,
// t + 128, ... of every row against x (from L2); the block sums through
// shared memory.
template <int K, int BN, bool EARLY, int CHUNK>
__global__ void __launch_bounds__(128) tiles(const bf* __restrict__ x, const bf* __restrict__ w, bf* __restrict__ y,
                                             int N) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int P = K / 8;
    __shared__ unsigned long long bar;
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar), rows = (unsigned)__cvta_generic_to_shared(smem);
    const int n0 = blockIdx.x * BN, nr = min(BN, N - n0);
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect(b, nr * K * 2);
        if (CHUNK == 0)  // the block's rows are contiguous: one copy
            bulk_copy(rows, w + (size_t)n0 * K, nr * K * 2, b);
        else
            for (int r = 0; r < nr; r++)
                for (int o = 0; o < K * 2; o += CHUNK)
                    bulk_copy(rows + r * K * 2 + o, (const char*)(w + (size_t)(n0 + r) * K) + o, min(CHUNK, K * 2 - o), b);
    }
    if (EARLY) asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!EARLY) asm volatile("griddepcontrol.launch_dependents;");
    __syncthreads();  // the barrier's init before anyone waits on it
    float acc[BN];
#pragma unroll
    for (int r = 0; r < BN; r++) acc[r] = 0.f;
    uint4 xv[(P + 127) / 128];
#pragma unroll
    for (int j = 0; j < (P + 127) / 128; j++) {
        const int p = threadIdx.x + 128 * j;
        xv[j] = p < P ? __ldcg((const uint4*)x + p) : make_uint4(0, 0, 0, 0);
    }
    mbar_wait(b, 0);
    const uint4* st = (const uint4*)smem;
#pragma unroll
    for (int j = 0; j < (P + 127) / 128; j++) {
        const int p = threadIdx.x + 128 * j;
        if (p < P)
#pragma unroll
            for (int r = 0; r < BN; r++)
                if (r < nr) acc[r] += dot8(st[r * P + p], xv[j]);
    }
    store_row_sums<BN>(acc, y, n0, nr);
}

template <int K, int BN, bool EARLY, int CHUNK>
void launch_tiles(cudaStream_t s, const bf* x, const bf* w, bf* y, int N) {
    allow_shared(tiles<K, BN, EARLY, CHUNK>, BN * K * 2);
    launch(tiles<K, BN, EARLY, CHUNK>, (N + BN - 1) / BN, 128, BN * K * 2, s, true, x, w, y, N);
}
// The chain's launch with each row's copy in pieces of `chunk` bytes (a
// row's bytes: one copy a row; 0: one copy for the block's rows).
template <int K, int BN, bool EARLY>
void launch_tiles_chunked(cudaStream_t s, int chunk, const bf* x, const bf* w, bf* y, int N) {
    if (chunk == 0)
        launch_tiles<K, BN, EARLY, 0>(s, x, w, y, N);
    else if (chunk == 512)
        launch_tiles<K, BN, EARLY, 512>(s, x, w, y, N);
    else if (chunk == 2048)
        launch_tiles<K, BN, EARLY, 2048>(s, x, w, y, N);
    else
        launch_tiles<K, BN, EARLY, K * 2>(s, x, w, y, N);
}

// The block tiles above with the rows in registers instead of shared
// memory (as tile's gemv holds them, its weights prefetched into L2 before
// the wait), in the block tiles' mapping: thread t holds 16-byte pieces t,
// t + 128, ... of every row, so x is loaded once a block; tile's layouts
// give each warp its own rows, and each warp loads x.
template <int K, int BN>
__global__ void __launch_bounds__(128) column_tiles(const bf* __restrict__ x, const bf* __restrict__ w,
                                                    bf* __restrict__ y, int N) {
    constexpr int P = K / 8, J = (P + 127) / 128;
    const int n0 = blockIdx.x * BN, nr = min(BN, N - n0);
    for (int r = 0; r < nr; r++)
        for (int l = threadIdx.x; l < K * 2 / 128; l += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)(w + (size_t)(n0 + r) * K) + l * 128));
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    uint4 ws[BN][J], xv[J];
#pragma unroll
    for (int r = 0; r < BN; r++)
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int p = threadIdx.x + 128 * j;
            ws[r][j] = p < P && r < nr ? __ldcs((const uint4*)(w + (size_t)(n0 + r) * K) + p) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int p = threadIdx.x + 128 * j;
        xv[j] = p < P ? __ldcg((const uint4*)x + p) : make_uint4(0, 0, 0, 0);
    }
    float acc[BN];
#pragma unroll
    for (int r = 0; r < BN; r++) {
        acc[r] = 0.f;
#pragma unroll
        for (int j = 0; j < J; j++) acc[r] += dot8(ws[r][j], xv[j]);
    }
    store_row_sums<BN>(acc, y, n0, nr);
}

template <int K, int BN>
void launch_column_tiles(cudaStream_t s, const bf* x, const bf* w, bf* y, int N) {
    launch(column_tiles<K, BN>, (N + BN - 1) / BN, 128, 0, s, true, x, w, y, N);
}

// The block tiles above in the form tile's `invariant` ring lowered them
// to (2026-12-03): the rows in `[BN, STEP]` tiles along K, a stage and an
// mbarrier a tile, every copy issued at the block's start; the loop then
// waits on each step's stage and multiplies it by that step's slice of x,
// loaded after the wait (XAHEAD: every step's slice loaded before the
// loop, as the one-step form does). Piece q of a step's tile (16 bytes,
// the row fastest) is thread q % 128's, and sums go to the row's shared
// sum at the end (a warp's, summed first).
template <int K, int BN, int STEP, bool XAHEAD>
__global__ void __launch_bounds__(128) tiles_steps(const bf* __restrict__ x, const bf* __restrict__ w,
                                                   bf* __restrict__ y, int N) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int STEPS = (K + STEP - 1) / STEP, SP = STEP / 8, J = (BN * SP + 127) / 128;
    __shared__ unsigned long long bar[STEPS];
    __shared__ float sums[BN];
    const unsigned rows = (unsigned)__cvta_generic_to_shared(smem);
    const int n0 = blockIdx.x * BN, nr = min(BN, N - n0);
    if (threadIdx.x < BN) sums[threadIdx.x] = 0.f;
    if (threadIdx.x == 0) {
        for (int st = 0; st < STEPS; st++) {
            const unsigned b = (unsigned)__cvta_generic_to_shared(&bar[st]);
            const int cols = min(STEP, K - st * STEP);
            mbar_init(b, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            mbar_expect(b, nr * cols * 2);
            for (int r = 0; r < nr; r++)
                bulk_copy(rows + (st * BN + r) * STEP * 2, w + (size_t)(n0 + r) * K + st * STEP, cols * 2, b);
        }
    }
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    __syncthreads();
    float acc[J];
    uint4 xa[XAHEAD ? STEPS : 1][J];
#pragma unroll
    for (int j = 0; j < J; j++) acc[j] = 0.f;
    if (XAHEAD)
#pragma unroll
        for (int st = 0; st < (XAHEAD ? STEPS : 1); st++)
#pragma unroll
            for (int j = 0; j < J; j++) {
                const int q = threadIdx.x + 128 * j, c = st * SP + q % SP;
                xa[st][j] = q < BN * SP && c < K / 8 ? __ldcg((const uint4*)x + c) : make_uint4(0, 0, 0, 0);
            }
    const uint4* tile = (const uint4*)smem;
#pragma unroll
    for (int st = 0; st < STEPS; st++) {
        mbar_wait((unsigned)__cvta_generic_to_shared(&bar[st]), 0);
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int q = threadIdx.x + 128 * j, r = q / SP, c = st * SP + q % SP;
            if (q < BN * SP && r < nr && c < K / 8) {
                const uint4 xv = XAHEAD ? xa[XAHEAD ? st : 0][j] : __ldcg((const uint4*)x + c);
                acc[j] += dot8(tile[(st * BN + r) * SP + q % SP], xv);
            }
        }
    }
    static_assert(SP % 32 == 0, "a warp's pieces lie in one row");
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int q = threadIdx.x + 128 * j;
        float a = acc[j];
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
        if (q < BN * SP && threadIdx.x % 32 == 0) atomicAdd(&sums[q / SP], a);
    }
    __syncthreads();
    if (threadIdx.x < nr) y[n0 + threadIdx.x] = __float2bfloat16(epilogue(sums[threadIdx.x]));
}

template <int K, int BN, int STEP, bool XAHEAD>
void launch_tiles_steps(cudaStream_t s, const bf* x, const bf* w, bf* y, int N) {
    constexpr int smem = (K + STEP - 1) / STEP * BN * STEP * 2;
    allow_shared(tiles_steps<K, BN, STEP, XAHEAD>, smem);
    launch(tiles_steps<K, BN, STEP, XAHEAD>, (N + BN - 1) / BN, 128, smem, s, true, x, w, y, N);
}

// ------------------------------------------------------------------- host

struct Model {
    const char* name;
    int c, layers, stage_bytes;
};

static float bf2f(bf v) { return __bfloat162float(v); }

int main(int argc, char** argv) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;

    // Copy bandwidth (read + write) of a 1 GiB device copy.
    void *src, *dst;
    const size_t cb = 1u << 30;
    CK(cudaMalloc(&src, cb));
    CK(cudaMalloc(&dst, cb));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best_copy = 1e9;
    for (int r = 0; r < 10; r++) {
        cudaEventRecord(e0, s);
        cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s);
        cudaEventRecord(e1, s);
        CK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        best_copy = std::min(best_copy, ms);
    }
    CK(cudaFree(src));
    CK(cudaFree(dst));
    const double copy_bw = 2.0 * cb / (best_copy * 1e-3);
    printf("%s, %d SMs, L2 %d MB, copy %.0f GB/s\n", prop.name, sms, prop.l2CacheSize >> 20, copy_bw / 1e9);

    const Model models[] = {{"gpt2-xl", 1600, 48, 12800}, {"gpt2", 768, 12, 12288}};
    for (const Model& m : models) {
        if (argc > 1 && strcmp(argv[1], "all") && strcmp(argv[1], m.name)) continue;
        const int C = m.c, kinds[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // {K, N}
        const int count = 4 * m.layers;

        // Weights: one pattern, a copy per product (distinct bytes in DRAM).
        std::vector<bf> h((size_t)4 * C * C);
        for (size_t j = 0; j < h.size(); j++) h[j] = __float2bfloat16(((j * 2654435761u) % 1000) / 1000.f - 0.5f);
        std::vector<bf*> ws;
        size_t bytes = 0;
        for (int p = 0; p < count; p++) {
            const size_t n = (size_t)kinds[p % 4][0] * kinds[p % 4][1];
            bf* w;
            CK(cudaMalloc(&w, n * 2));
            CK(cudaMemcpy(w, h.data(), n * 2, cudaMemcpyHostToDevice));
            ws.push_back(w);
            bytes += n * 2;
        }
        bf *a, *qkv, *bb, *cc;
        for (bf** p : {&a, &qkv, &bb, &cc}) CK(cudaMalloc(p, 4 * C * 2));
        bf* ins[4] = {a, qkv, bb, cc};
        bf* outs[4] = {qkv, bb, cc, a};

        // The CPU reference of one step, from x = 0.1: each buffer's last value.
        std::vector<std::vector<float>> want(4);
        {
            std::vector<float> hf(h.size());
            for (size_t j = 0; j < h.size(); j++) hf[j] = bf2f(h[j]);
            std::vector<float> x(C, bf2f(__float2bfloat16(0.1f)));
            for (int p = 0; p < count; p++) {
                const int K = kinds[p % 4][0], N = kinds[p % 4][1];
                std::vector<float> y(N);
                for (int n = 0; n < N; n++) {
                    float acc = 0.f;
                    const float* row = &hf[(size_t)n * K];
                    for (int k = 0; k < K; k++) acc += x[k] * row[k];
                    y[n] = bf2f(__float2bfloat16(epilogue(acc)));
                }
                want[p % 4] = y;
                x = y;
            }
        }
        const std::vector<bf> x0(4 * C, __float2bfloat16(0.1f)), poison(4 * C, __ushort_as_bfloat16(0x7fc0));

        unsigned* ready;
        CK(cudaMalloc(&ready, MAX_PRODUCTS * 4));
        CK(cudaMemset(ready, 0, MAX_PRODUCTS * 4));
        std::vector<Product> table;
        for (int p = 0; p < count; p++)
            table.push_back({ws[p], ins[p % 4], outs[p % 4], kinds[p % 4][1], kinds[p % 4][0]});
        CK(cudaMemcpyToSymbol(products, table.data(), table.size() * sizeof(Product)));
        for (const void* k : {(const void*)persistent<4>, (const void*)persistent<8>, (const void*)persistent<16>})
            CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    16 * (m.stage_bytes + STAGE_GAP) + 16 * 16 + 2 * 4 * C + 256));
        const double bound_us = bytes / copy_bw * 1e6;
        printf("\n%s: %d products, weights %.1f MB, bound %.1f us\n", m.name, count, bytes / 1e6, bound_us);

        // One step of the chain of kernels, in the stream.
        auto chain = [&](int mode, int per_sm) {
            const int blocks = per_sm * sms;
            for (int p = 0; p < count; p++) {
                const Product& q = table[p];
                if (q.k == C && C == 1600)
                    launch_gemv<1600, 2>(s, mode, blocks, q.x, q.w, q.y, q.n);
                else if (q.k == C)
                    launch_gemv<768, 2>(s, mode, blocks, q.x, q.w, q.y, q.n);
                else if (C == 1600)
                    launch_gemv<6400, 1>(s, mode, blocks, q.x, q.w, q.y, q.n);
                else
                    launch_gemv<3072, 1>(s, mode, blocks, q.x, q.w, q.y, q.n);
            }
        };
        // One step of the chain of staged kernels (W consumer warps, a ring
        // of `ring` slots, dependents launched at the start or after the wait).
        auto staged_chain = [&](int warps, int ring, bool early) {
            for (int p = 0; p < count; p++) {
                const Product& q = table[p];
#define STAGED(K, R)                                                                   \
    do {                                                                               \
        if (warps == 4 && early)                                                       \
            launch_staged<K, R, 4, true>(s, sms, ring, q.x, q.w, q.y, q.n);           \
        else if (warps == 4)                                                           \
            launch_staged<K, R, 4, false>(s, sms, ring, q.x, q.w, q.y, q.n);          \
        else if (early)                                                                \
            launch_staged<K, R, 8, true>(s, sms, ring, q.x, q.w, q.y, q.n);           \
        else                                                                           \
            launch_staged<K, R, 8, false>(s, sms, ring, q.x, q.w, q.y, q.n);          \
    } while (0)
                if (q.k == C && C == 1600)
                    STAGED(1600, 4);
                else if (q.k == C)
                    STAGED(768, 8);
                else if (C == 1600)
                    STAGED(6400, 1);
                else
                    STAGED(3072, 2);
#undef STAGED
            }
        };
        // Calls `launch(q, K, BN)` for every product q of a step, K and BN
        // as std::integral_constant: a block per BN whole rows, 4 (`wide`: 8)
        // where K is the width and a quarter of that where it is 4 widths.
        auto by_block_rows = [&](bool wide, auto&& launch) {
            using std::integral_constant;
            for (int p = 0; p < count; p++) {
                const Product& q = table[p];
                if (q.k == C && C == 1600 && wide)
                    launch(q, integral_constant<int, 1600>{}, integral_constant<int, 8>{});
                else if (q.k == C && C == 1600)
                    launch(q, integral_constant<int, 1600>{}, integral_constant<int, 4>{});
                else if (q.k == C && wide)
                    launch(q, integral_constant<int, 768>{}, integral_constant<int, 8>{});
                else if (q.k == C)
                    launch(q, integral_constant<int, 768>{}, integral_constant<int, 4>{});
                else if (C == 1600 && wide)
                    launch(q, integral_constant<int, 6400>{}, integral_constant<int, 2>{});
                else if (C == 1600)
                    launch(q, integral_constant<int, 6400>{}, integral_constant<int, 1>{});
                else if (wide)
                    launch(q, integral_constant<int, 3072>{}, integral_constant<int, 2>{});
                else
                    launch(q, integral_constant<int, 3072>{}, integral_constant<int, 1>{});
            }
        };
        // One step of the chain of tile-shaped staged kernels (each row one
        // bulk copy, or as `chunk` says).
        auto tiles_chain = [&](bool early, int scale, int chunk) {
            by_block_rows(scale == 2, [&](const Product& q, auto k, auto bn) {
                constexpr int K = decltype(k)::value, BN = decltype(bn)::value;
                if (early)
                    launch_tiles_chunked<K, BN, true>(s, chunk, q.x, q.w, q.y, q.n);
                else
                    launch_tiles_chunked<K, BN, false>(s, chunk, q.x, q.w, q.y, q.n);
            });
        };
        // One step of the chain of column tiles in registers, `rows` rows a
        // block where K is the width.
        auto column_chain = [&](int rows) {
            by_block_rows(rows == 8, [&](const Product& q, auto k, auto bn) {
                launch_column_tiles<decltype(k)::value, decltype(bn)::value>(s, q.x, q.w, q.y, q.n);
            });
        };
        // One step of the chain of stepped block tiles (tile's ring form):
        // 8 rows in steps of 256 columns where K is the width, 2 rows in
        // steps of 1,024 where it is 4 widths.
        auto steps_chain = [&](bool xahead, bool one) {
            for (int p = 0; p < count; p++) {
                const Product& q = table[p];
#define STEPS(K, BN, STEP)                                                              \
    do {                                                                                \
        if (xahead)                                                                     \
            launch_tiles_steps<K, BN, STEP, true>(s, q.x, q.w, q.y, q.n);               \
        else                                                                            \
            launch_tiles_steps<K, BN, STEP, false>(s, q.x, q.w, q.y, q.n);              \
    } while (0)
                if (one && q.k == C && C == 1600)
                    STEPS(1600, 8, 1792);
                else if (one && q.k == C)
                    STEPS(768, 8, 768);
                else if (one && C == 1600)
                    STEPS(6400, 2, 6400);
                else if (one)
                    STEPS(3072, 2, 3072);
                else if (q.k == C && C == 1600)
                    STEPS(1600, 8, 256);
                else if (q.k == C)
                    STEPS(768, 8, 256);
                else if (C == 1600)
                    STEPS(6400, 2, 1024);
                else
                    STEPS(3072, 2, 1024);
#undef STEPS
            }
        };
        // One step of the persistent kernel, or an error where it cannot run.
        auto persistent_step = [&](int consumers, int stages, int run) -> cudaError_t {
            const int smem = stages * (m.stage_bytes + STAGE_GAP) + 16 * stages + 2 * 4 * C + 256;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(sms);
            cfg.blockDim = dim3(32 * (consumers + 1));
            cfg.dynamicSmemBytes = smem;
            cfg.stream = s;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeCooperative;  // every block resident, or an error
            attr[0].val.cooperative = 1;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            if (consumers == 4)
                return cudaLaunchKernelEx(&cfg, persistent<4>, count, m.stage_bytes, stages, ready, run);
            if (consumers == 8)
                return cudaLaunchKernelEx(&cfg, persistent<8>, count, m.stage_bytes, stages, ready, run);
            return cudaLaunchKernelEx(&cfg, persistent<16>, count, m.stage_bytes, stages, ready, run);
        };

        struct Case {
            const char* name;
            int chain_mode;  // -1: the persistent kernel; -2: the staged chain (consumers, stages: its ring, run: early); -3: the block-tile staged chain (stages: rows a block x1 or x2, run: early); -4: the stepped block tiles (run: x loaded ahead); -5: column tiles in registers (stages: rows)
            int consumers, stages, run;
            int per_sm = 0;  // the chain's blocks an SM (co-resident grids); 0: a block per 4 R rows
            int chunk = -1;  // block tiles: bytes a bulk copy (-1: a row; 0: the block's rows at once)
        };
        const Case cases[] = {
            {"chain, dependent launch, own rows prefetched (as tile)", PDL | OWN, 0, 0, 0},
            {"chain, no dependent launch", 0, 0, 0, 0},
            {"chain, as tile, dependents launched at the start", PDL | OWN | EARLY, 0, 0, 0},
            {"chain co-resident, 1 block an SM, dependents at the start", PDL | OWN | EARLY, 0, 0, 0, 1},
            {"chain co-resident, 2 blocks an SM, dependents at the start", PDL | OWN | EARLY, 0, 0, 0, 2},
            {"chain co-resident, 3 blocks an SM, dependents at the start", PDL | OWN | EARLY, 0, 0, 0, 3},
            {"chain co-resident, 4 blocks an SM, dependents at the start", PDL | OWN | EARLY, 0, 0, 0, 4},
            {"chain co-resident, 2 blocks an SM, dependents after the wait", PDL | OWN, 0, 0, 0, 2},
            {"chain co-resident, 2 blocks an SM, no prefetch", PDL | EARLY, 0, 0, 0, 2},
            {"block-tile staged chain, 1x rows, dependents at the start", -3, 0, 1, 1},
            {"block-tile staged chain, 1x rows, dependents after the wait", -3, 0, 1, 0},
            {"block-tile staged chain, 2x rows, dependents at the start", -3, 0, 2, 1},
            {"block-tile staged chain, 2x rows, dependents after the wait", -3, 0, 2, 0},
            {"column tiles in registers, 4 rows (K = width)", -5, 0, 4, 0},
            {"column tiles in registers, 8 rows (K = width)", -5, 0, 8, 0},
            {"stepped block tiles (tile's ring), x after each wait", -4, 0, 0, 0},
            {"stepped block tiles (tile's ring), x loaded ahead", -4, 0, 0, 1},
            {"stepped block tiles, one step (STEP >= K)", -4, 0, 1, 0},
            {"block-tile staged chain, 2x rows, at the start, 2 KB copies", -3, 0, 2, 1, 0, 2048},
            {"block-tile staged chain, 2x rows, at the start, 512 B copies", -3, 0, 2, 1, 0, 512},
            {"block-tile staged chain, 2x rows, at the start, one copy", -3, 0, 2, 1, 0, 0},
            {"staged chain, 8 warps, 8 slots, dependents after the wait", -2, 8, 8, 0},
            {"staged chain, 4 warps, 8 slots, dependents at the start", -2, 4, 8, 1},
            {"staged chain, 8 warps, 8 slots, dependents at the start", -2, 8, 8, 1},
            {"staged chain, 4 warps, 6 slots, dependents at the start", -2, 4, 6, 1},
            {"staged chain, 4 warps, 4 slots, dependents at the start", -2, 4, 4, 1},
            {"staged chain, 4 warps, 16 slots, dependents at the start", -2, 4, 16, 1},
            {"staged chain, 4 warps, 8 slots, dependents after the wait", -2, 4, 8, 0},
            {"persistent, ring runs ahead, 4 consumer warps, 16 stages", -1, 4, 16, AHEAD},
            {"persistent, ring runs ahead, 8 consumer warps, 16 stages", -1, 8, 16, AHEAD},
            {"persistent, ring runs ahead, 16 consumer warps, 16 stages", -1, 16, 16, AHEAD},
            {"persistent, coupled (producer waits too), 16 warps, 16 stages", -1, 16, 16, COUPLED},
            {"persistent, independent (no waits), 16 warps, 16 stages", -1, 16, 16, INDEPENDENT},
            {"persistent, ring only (no waits, no math), 16 warps, 16 st.", -1, 16, 16, RING_ONLY},
            {"persistent, waits and counts only (no weights: sync chain)", -1, 16, 16, SYNC_ONLY},
        };
        for (int round = 0; round < 2; round++)
            for (const Case& c : cases) {
                if (argc > 2 && !strstr(c.name, argv[2])) continue;
                fprintf(stderr, "(%s: %s)\n", m.name, c.name);
                // Check one step from x = 0.1 with the intermediates poisoned.
                CK(cudaMemcpy(a, x0.data(), 4 * C * 2, cudaMemcpyHostToDevice));
                for (bf* p : {qkv, bb, cc}) CK(cudaMemcpy(p, poison.data(), 4 * C * 2, cudaMemcpyHostToDevice));
                cudaGraphExec_t ex = nullptr;
                if (c.chain_mode != -1) {
                    cudaGraph_t g;
                    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                    if (c.chain_mode == -5)
                        column_chain(c.stages);
                    else if (c.chain_mode == -4)
                        steps_chain(c.run != 0, c.stages != 0);
                    else if (c.chain_mode == -3)
                        tiles_chain(c.run != 0, c.stages, c.chunk);
                    else if (c.chain_mode == -2)
                        staged_chain(c.consumers, c.stages, c.run != 0);
                    else
                        chain(c.chain_mode, c.per_sm);
                    CK(cudaStreamEndCapture(s, &g));
                    CK(cudaGraphInstantiate(&ex, g, 0));
                    CK(cudaGraphDestroy(g));
                    CK(cudaGraphLaunch(ex, s));
                } else {
                    cudaError_t e = persistent_step(c.consumers, c.stages, c.run);
                    if (e) {
                        printf("round %d: %-64s n/a (%s)\n", round, c.name, cudaGetErrorString(e));
                        cudaGetLastError();
                        continue;
                    }
                }
                CK(cudaStreamSynchronize(s));
                double err = 0, norm = 0;
                bool all_written = true;
                for (int j = 0; j < 4; j++) {
                    const int n = want[j].size();
                    std::vector<bf> got(n);
                    CK(cudaMemcpy(got.data(), outs[j], n * 2, cudaMemcpyDeviceToHost));
                    for (int i = 0; i < n; i++) {
                        const float g = bf2f(got[i]);
                        all_written &= !std::isnan(g);
                        err += (g - want[j][i]) * (g - want[j][i]);
                        norm += want[j][i] * want[j][i];
                    }
                }
                const double rel = std::sqrt(err / norm);
                const char* verdict = c.chain_mode == -1 && c.run >= INDEPENDENT ? "not checked (not the product)"
                                      : all_written && rel < 1e-2             ? "ok"
                                                                              : "WRONG";
                // Time: median of 7 rounds of 10 steps, back to back.
                std::vector<float> per;
                for (int rep = 0; rep < 7; rep++) {
                    cudaEventRecord(e0, s);
                    for (int t = 0; t < 10; t++) {
                        if (ex)
                            CK(cudaGraphLaunch(ex, s));
                        else
                            CK(persistent_step(c.consumers, c.stages, c.run));
                    }
                    cudaEventRecord(e1, s);
                    CK(cudaEventSynchronize(e1));
                    float ms;
                    cudaEventElapsedTime(&ms, e0, e1);
                    per.push_back(ms * 100.f);  // us a step
                }
                std::sort(per.begin(), per.end());
                const float us = per[per.size() / 2];
                printf("round %d: %-64s %8.1f us a step, %5.1f%% of the bound; %s (rel. error %.1e)\n", round,
                       c.name, us, 100.0 * bound_us / us, verdict, rel);
                fflush(stdout);
                if (ex) CK(cudaGraphExecDestroy(ex));
            }
        for (bf* w : ws) CK(cudaFree(w));
        for (bf* p : {a, qkv, bb, cc}) CK(cudaFree(p));
        CK(cudaFree(ready));
    }
    return 0;
}
