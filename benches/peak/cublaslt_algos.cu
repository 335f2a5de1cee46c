// What NVIDIA's own kernels reach on this GPU for one bf16 GEMM, config by
// config: every cublasLt algorithm, tile and stage count that can run
// C = A^T B (m = n = k = 4096 unless given; bf16 in and out, f32
// accumulation), timed. The portable path's target is a fraction of
// cuBLAS's best (`wgmma`) kernel; this finds what cuBLAS's `mma.sync`
// (sm80-style, inner shape MMA16816) kernels reach on the same GPU.
//
//   nvcc -O2 -arch=sm_90 -o /tmp/cublaslt_algos benches/peak/cublaslt_algos.cu -lcublasLt
//   /tmp/cublaslt_algos [size]            # one line per config, TFLOP/s
//   /tmp/cublaslt_algos size once MIN     # each config reaching MIN TFLOP/s once
//                                         # (under ncu: the kernel behind each)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                              \
    do {                                                                      \
        auto status = (x);                                                    \
        if (status != 0) {                                                    \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, \
                    (int)status);                                             \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

struct Config {
    int id;
    unsigned tile, stages;
    unsigned short inner, cluster;
    double tflops;
};

static std::vector<unsigned> cap_list(const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    CHECK(cublasLtMatmulAlgoCapGetAttribute(algo, attr, nullptr, 0, &bytes));
    std::vector<unsigned> ids(bytes / sizeof(unsigned));
    if (!ids.empty())
        CHECK(cublasLtMatmulAlgoCapGetAttribute(algo, attr, ids.data(), bytes, &bytes));
    if (ids.empty()) ids.push_back(0);
    return ids;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4096;
    bool once = argc > 2 && !strcmp(argv[2], "once");
    double min_tflops = argc > 3 ? atof(argv[3]) : 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs, bf16 %dx%dx%d, C = A^T B\n", prop.name, prop.multiProcessorCount, n, n, n);

    size_t elems = (size_t)n * n, workspace_bytes = 256 << 20;
    __nv_bfloat16 *a, *b, *c;
    void* workspace;
    CHECK(cudaMalloc(&a, elems * 2));
    CHECK(cudaMalloc(&b, elems * 2));
    CHECK(cudaMalloc(&c, elems * 2));
    CHECK(cudaMalloc(&workspace, workspace_bytes));
    std::vector<__nv_bfloat16> host(elems);
    for (size_t i = 0; i < elems; ++i) host[i] = __float2bfloat16((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
    CHECK(cudaMemcpy(a, host.data(), elems * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, host.data(), elems * 2, cudaMemcpyHostToDevice));

    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t op;
    CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
    cublasLtMatrixLayout_t la, lb, lc;
    CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n));
    CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n));
    CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n));
    float alpha = 1, beta = 0;

    int ids[1024], count = 0;
    CHECK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, 1024, ids, &count));
    cudaEvent_t start, end;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&end));
    std::vector<Config> configs;
    for (int i = 0; i < count; ++i) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, ids[i], &algo) != CUBLAS_STATUS_SUCCESS)
            continue;
        for (unsigned tile : cap_list(&algo, CUBLASLT_ALGO_CAP_TILE_IDS)) {
            for (unsigned stages : cap_list(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS)) {
                CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile)));
                CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                                           sizeof(stages)));
                cublasLtMatmulHeuristicResult_t result;
                if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &algo, &result) != CUBLAS_STATUS_SUCCESS ||
                    result.workspaceSize > workspace_bytes)
                    continue;
                Config config{ids[i], tile, stages, 0, 0, 0};
                size_t written;
                cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &config.inner,
                                                     sizeof(config.inner), &written);
                cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &config.cluster,
                                                     sizeof(config.cluster), &written);
                auto launch = [&] {
                    return cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &algo, workspace,
                                          workspace_bytes, 0);
                };
                if (launch() != CUBLAS_STATUS_SUCCESS || cudaDeviceSynchronize() != cudaSuccess) continue;
                const int iters = 10;
                CHECK(cudaEventRecord(start));
                for (int r = 0; r < iters; ++r) CHECK(launch());
                CHECK(cudaEventRecord(end));
                CHECK(cudaEventSynchronize(end));
                float ms;
                CHECK(cudaEventElapsedTime(&ms, start, end));
                config.tflops = 2.0 * n * n * (double)n * iters / ms / 1e9;
                configs.push_back(config);
                if (!once)
                    printf("algo %3d tile %3u stages %2u inner %u cluster %2u: %7.1f TFLOP/s\n", config.id, tile,
                           stages, config.inner, config.cluster, config.tflops);
            }
        }
    }
    if (once) {
        // One launch per config above the threshold, in order, so that a
        // profiler's kernel list lines up with this list.
        for (const Config& config : configs) {
            if (config.tflops < min_tflops) continue;
            cublasLtMatmulAlgo_t algo;
            CHECK(cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                         CUDA_R_16BF, config.id, &algo));
            CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &config.tile,
                                                       sizeof(config.tile)));
            CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &config.stages,
                                                       sizeof(config.stages)));
            printf("once: algo %3d tile %3u stages %2u: %7.1f TFLOP/s\n", config.id, config.tile, config.stages,
                   config.tflops);
            CHECK(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &algo, workspace,
                                 workspace_bytes, 0));
            CHECK(cudaDeviceSynchronize());
        }
    }
    printf("%zu configs ran\n", configs.size());
    return 0;
}
