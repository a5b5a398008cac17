// alloc_loop: a CUDA program with a known number of allocations, for checking what `record` sees.
//
//   alloc_loop N M          N cudaMalloc/cudaFree pairs (sizes cycle 256 B .. 64 MiB), then
//                           M cudaMallocAsync/cudaFreeAsync pairs on a non-default stream.
//   alloc_loop bench K S    K cudaMallocAsync/cudaFreeAsync pairs of S bytes on one stream with a
//                           retaining pool; prints the median ns per pair (for shim overhead).
//   alloc_loop threads T N  T threads, each N cudaMalloc/cudaFree pairs (sizes 256 B .. 1 MiB) at
//                           once; prints the expected counts (for the recorder's many-thread case).
//   alloc_loop checksum N   N cudaMalloc/cudaFree pairs (sizes as above); each block is filled and
//                           summed by kernels before its free, with no host synchronization in the
//                           loop; prints the checksum of all sums (bit-identical with record --pool).
//   alloc_loop costs        median cost of cudaMalloc+cudaFree and of cudaMallocAsync+cudaFreeAsync
//                           (retaining pool) pairs for sizes 256 B .. 1 GiB (README's figures).
//
// Build: nvcc -O2 -o alloc_loop_static alloc_loop.cu              (static cudart, the default)
//        nvcc -O2 -cudart shared -o alloc_loop_shared alloc_loop.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e)); exit(3); } } while (0)

static int64_t now_ns() {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__global__ void fill(uint32_t *p, int n, uint32_t v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v * 2654435761u + (uint32_t)i;
}

__global__ void sum(const uint32_t *p, int n, unsigned long long *acc) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(acc, (unsigned long long)p[i]);
}

static int run_checksum(int n) {
  static const size_t sizes[] = {256, 4096, 1 << 20, 3 << 20, 16 << 20, 64 << 20};
  unsigned long long *acc = NULL, host = 0;
  CHECK(cudaMalloc(&acc, sizeof *acc));
  CHECK(cudaMemset(acc, 0, sizeof *acc));
  for (int i = 0; i < n; i++) {
    uint32_t *p = NULL;
    size_t s = sizes[i % 6];
    int words = (int)std::min(s / 4, (size_t)65536);
    CHECK(cudaMalloc(&p, s));
    fill<<<(words + 255) / 256, 256>>>(p, words, (uint32_t)i);
    sum<<<(words + 255) / 256, 256>>>(p, words, acc);
    CHECK(cudaFree(p));
  }
  CHECK(cudaMemcpy(&host, acc, sizeof host, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(acc));
  printf("checksum %llu over %d blocks\n", host, n);
  return 0;
}

static int run_counts(int n, int m) {
  static const size_t sizes[] = {256, 4096, 1 << 20, 3 << 20, 16 << 20, 64 << 20};
  uint64_t bytes = 0;
  for (int i = 0; i < n; i++) {
    void *p = NULL;
    size_t s = sizes[i % 6];
    CHECK(cudaMalloc(&p, s));
    CHECK(cudaMemset(p, 0, s < 4096 ? s : 4096));
    CHECK(cudaFree(p));
    bytes += s;
  }
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  for (int i = 0; i < m; i++) {
    void *p = NULL;
    size_t s = sizes[i % 6];
    CHECK(cudaMallocAsync(&p, s, st));
    CHECK(cudaFreeAsync(p, st));
    bytes += s;
  }
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaStreamDestroy(st));
  printf("expected: cudaMalloc=%d cudaFree=%d cudaMallocAsync=%d cudaFreeAsync=%d bytes=%llu\n",
         n, n, m, m, (unsigned long long)bytes);
  return 0;
}

static int run_bench(int k, size_t s) {
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t thr = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
  std::vector<int64_t> t(k);
  for (int i = 0; i < k; i++) {
    void *p = NULL;
    int64_t a = now_ns();
    CHECK(cudaMallocAsync(&p, s, st));
    CHECK(cudaFreeAsync(p, st));
    t[i] = now_ns() - a;
  }
  CHECK(cudaStreamSynchronize(st));
  std::sort(t.begin(), t.end());
  printf("bench: pairs=%d size=%zu median_ns=%lld p99_ns=%lld\n", k, s, (long long)t[k / 2],
         (long long)t[(size_t)(k * 0.99)]);
  return 0;
}

static int run_threads(int threads, int n) {
  CHECK(cudaFree(0));
  std::atomic<long> failures{0};
  std::vector<std::thread> pool;
  int64_t t0 = now_ns();
  for (int t = 0; t < threads; t++)
    pool.emplace_back([&, t] {
      for (int i = 0; i < n; i++) {
        void *p = NULL;
        size_t s = (size_t)256 << ((t + i) % 13);
        if (cudaMalloc(&p, s) != cudaSuccess || cudaFree(p) != cudaSuccess) failures++;
      }
    });
  for (auto &th : pool) th.join();
  printf("expected: cudaMalloc=%d cudaFree=%d threads=%d failures=%ld wall_ms=%.1f\n", threads * n, threads * n,
         threads, failures.load(), (now_ns() - t0) / 1e6);
  return failures.load() == 0 ? 0 : 4;
}

static int64_t median_pair(size_t s, int n, bool async, cudaStream_t st) {
  std::vector<int64_t> t(n);
  for (int i = 0; i < n; i++) {
    void *p = NULL;
    int64_t a = now_ns();
    if (async) {
      CHECK(cudaMallocAsync(&p, s, st));
      CHECK(cudaFreeAsync(p, st));
    } else {
      CHECK(cudaMalloc(&p, s));
      CHECK(cudaFree(p));
    }
    t[i] = now_ns() - a;
  }
  std::sort(t.begin(), t.end());
  return t[n / 2];
}

static int run_costs() {
  static const size_t sizes[] = {256, 4096, 1 << 20, 16 << 20, 256 << 20, 1ull << 30};
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t thr = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
  CHECK(cudaFree(0));
  for (size_t s : sizes) {
    int n = s >= (256 << 20) ? 50 : 1000;
    int64_t sync = median_pair(s, n, false, st);
    int64_t async = median_pair(s, n, true, st);
    printf("costs: size=%zu pairs=%d cudaMalloc+cudaFree_median_ns=%lld cudaMallocAsync+cudaFreeAsync_median_ns=%lld\n",
           s, n, (long long)sync, (long long)async);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "costs") == 0) return run_costs();
  if (argc == 3 && strcmp(argv[1], "checksum") == 0) return run_checksum(atoi(argv[2]));
  if (argc == 4 && strcmp(argv[1], "bench") == 0) return run_bench(atoi(argv[2]), strtoull(argv[3], 0, 10));
  if (argc == 4 && strcmp(argv[1], "threads") == 0) return run_threads(atoi(argv[2]), atoi(argv[3]));
  if (argc != 3) {
    fprintf(stderr, "usage: alloc_loop N M | alloc_loop bench K S | alloc_loop threads T N | alloc_loop costs\n");
    return 2;
  }
  return run_counts(atoi(argv[1]), atoi(argv[2]));
}
