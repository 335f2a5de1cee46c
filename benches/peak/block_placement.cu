// Which SM each block of a grid of 264 lands on, at two blocks per SM (the
// portable 128x128x64 bf16 matmul's occupancy on a 132-SM H100): the
// hardware places blocks breadth-first, one per SM before the second, so a
// grid's first blocks are spread over the SMs. Prints how blocks 0..119 (a
// 1.45-wave grid's tail, were it persistent) share SMs, then every block's SM.
//   nvcc -O2 -arch=sm_90 -o /tmp/place benches/peak/block_placement.cu && /tmp/place
#include <cstdio>
__global__ void where(int *sm) {
  extern __shared__ char s[];
  if (threadIdx.x == 0) { unsigned id; asm volatile("mov.u32 %0, %%smid;" : "=r"(id)); sm[blockIdx.x] = id; s[0] = 1; }
  // hold the SM a while so the whole grid is resident together
  long long t0 = clock64(); while (clock64() - t0 < 2000000) {}
}
int main() {
  int n = 264, *d, h[264];
  cudaMalloc(&d, n * sizeof(int));
  cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, 98304);
  where<<<n, 128, 98304>>>(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int count[200] = {0};
  for (int i = 0; i < 120; i++) count[h[i]]++;
  int two = 0, one = 0; for (int i = 0; i < 200; i++) { two += count[i] == 2; one += count[i] == 1; }
  printf("blocks 0..119: %d SMs hold one, %d hold two\n", one, two);
  for (int i = 0; i < n; i++) printf("%d%c", h[i], i % 33 == 32 ? '\n' : ' ');
  printf("\n");
}
