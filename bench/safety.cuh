// What the safety programs (sync_race, graph_capture, double_free, reset_midrun, oom_retry,
// ipc_export; safety.sh) share: checks that exit 3 on a CUDA error, a per-word pattern of a seed, the
// device's global timer, and kernels that fill a buffer with the pattern (after a spin, so that an
// overlap with a later user of the memory would really happen).
#ifndef ALLOCSCOPE_SAFETY_CUH
#define ALLOCSCOPE_SAFETY_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e)); exit(3); } } while (0)
#define CU(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s: error %d\n", __FILE__, __LINE__, #x, (int)r); exit(3); } } while (0)

// pattern is word i of seed's pattern.
__host__ __device__ static inline uint32_t pattern(uint32_t seed, size_t i) {
  return seed * 2654435761u ^ (uint32_t)(i * 40503u + 17u);
}

// global_ns reads the device's global timer (ns).
__device__ static inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// spin_fill waits spin_ns on the device's global timer, then fills p[0..n) with seed's pattern.
__global__ void spin_fill(uint32_t *p, size_t n, uint32_t seed, unsigned long long spin_ns) {
  unsigned long long t0 = global_ns();
  while (global_ns() - t0 < spin_ns) {}
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = pattern(seed, i);
}

// fill fills p[0..n) with seed's pattern.
__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = pattern(seed, i);
}

#endif
