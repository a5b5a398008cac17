// mempool_growth: how a CUDA memory pool (cudaMallocAsync) grows its reserved memory, for analyze's
// model of backend:cudaMallocAsync. For each sequence, a fresh pool that keeps its memory
// (release threshold UINT64_MAX) gets cudaMallocAsync calls of the sizes listed, all kept live, and
// the pool's reserved bytes (cudaMemPoolAttrReservedMemCurrent) are printed after each call.
//
// Build: nvcc -O2 -o mempool_growth mempool_growth.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e)); return 3; } } while (0)

static int run(const char *name, const std::vector<size_t> &sizes) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::vector<void *> live;
  printf("%s:", name);
  for (size_t n : sizes) {
    void *p;
    CHECK(cudaMallocFromPoolAsync(&p, n, pool, s));
    live.push_back(p);
    uint64_t reserved = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    printf(" %zu->%llu", n, (unsigned long long)(reserved >> 10));
  }
  printf(" (KiB reserved after each)\n");
  for (void *p : live) CHECK(cudaFreeAsync(p, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaMemPoolDestroy(pool));
  return 0;
}

int main() {
  const size_t K = 1024, M = 1024 * 1024;
  std::vector<size_t> small(40, 512), kb(40, 100 * K), mb(24, 1 * M), mixed;
  size_t mix[] = {3 * M, 40 * M, 64 * K, 100 * M, 7 * M, 512, 33 * M, 2 * M, 1 * M + 1, 300 * M, 21 * M};
  for (size_t n : mix) mixed.push_back(n);
  std::vector<size_t> grow;
  for (size_t n = 1 * M; n <= 64 * M; n += 3 * M) grow.push_back(n);
  if (run("512 B x40", small) || run("100 KiB x40", kb) || run("1 MiB x24", mb) || run("mixed", mixed) ||
      run("growing 1..64 MiB by 3 MiB", grow))
    return 3;
  return 0;
}
