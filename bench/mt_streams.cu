// mt_streams: many threads allocating on four kinds of stream, in an order that varies from run to
// run, for record --pool's bars (docs/record-pool.md). Each of THREADS threads (default 8) uses one
// kind of stream, by its index mod 4: the legacy default stream, a blocking stream of its own, a
// non-blocking stream of its own, the per-thread default stream. Every round it allocates 6 blocks
// of sizes drawn from its own seeded generator (4 KiB to 24 MiB), half with cudaMalloc and half
// with cudaMallocAsync on its stream, fills each with a kernel and adds it into the thread's device
// checksum with another, frees the blocks of the round before (cudaFree right after the launches, as
// cudaFree's wait for the device allows, and cudaFreeAsync on the stream), and sleeps a random few
// microseconds seeded by the clock, so the threads interleave differently each run. The output, one
// checksum per thread, does not depend on the order: it differs only if a block was handed out while
// another thread's kernel still used it.
//
// usage: mt_streams [ROUNDS [THREADS]]    (default 150 rounds, 8 threads)
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <ctime>
#include <thread>
#include <vector>
#include <unistd.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

__global__ void fill(uint32_t *p, size_t n, uint32_t v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v ^ (uint32_t)(i * 2654435761u);
}

__global__ void sum(const uint32_t *p, size_t n, unsigned long long *acc) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += p[i];
  atomicAdd(acc, s);
}

struct Block {
  void *p;
  size_t bytes;
  bool async;
};

static uint64_t next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void worker(int t, int rounds, unsigned long long *acc, uint64_t jitter_seed) {
  CHECK(cudaSetDevice(0));
  cudaStream_t s = 0;
  int kind = t % 4;
  if (kind == 1) CHECK(cudaStreamCreate(&s));
  if (kind == 2) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (kind == 3) s = cudaStreamPerThread;
  uint64_t rng = 1000 + t, jit = jitter_seed + 77 * t;
  std::vector<Block> prev;
  for (int r = 0; r < rounds; r++) {
    std::vector<Block> cur;
    for (int b = 0; b < 6; b++) {
      size_t bytes = (size_t)4096 << (next(&rng) % 13);  // 4 KiB .. 16 MiB
      bytes += (next(&rng) % 8) * (bytes / 8);             // and up to 7/8 more
      Block blk{nullptr, bytes, b % 2 == 1};
      if (blk.async)
        CHECK(cudaMallocAsync(&blk.p, bytes, s));
      else
        CHECK(cudaMalloc(&blk.p, bytes));
      size_t n = bytes / 4;
      fill<<<64, 256, 0, s>>>((uint32_t *)blk.p, n, (uint32_t)(t * 1000003 + r * 101 + b));
      sum<<<64, 256, 0, s>>>((const uint32_t *)blk.p, n, acc + t);
      cur.push_back(blk);
    }
    for (Block &blk : prev) {
      if (blk.async)
        CHECK(cudaFreeAsync(blk.p, s));
      else
        CHECK(cudaFree(blk.p));
    }
    prev.swap(cur);
    usleep(next(&jit) % 40);
  }
  for (Block &blk : prev) CHECK(blk.async ? cudaFreeAsync(blk.p, s) : cudaFree(blk.p));
  CHECK(cudaStreamSynchronize(s));
  if (kind == 1 || kind == 2) CHECK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 150;
  int threads = argc > 2 ? atoi(argv[2]) : 8;
  if (rounds <= 0 || threads <= 0 || threads > 256) {
    fprintf(stderr, "usage: mt_streams [ROUNDS [THREADS]]\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  unsigned long long *acc;
  CHECK(cudaMalloc(&acc, threads * sizeof *acc));
  CHECK(cudaMemset(acc, 0, threads * sizeof *acc));
  CHECK(cudaDeviceSynchronize());
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seed = (uint64_t)ts.tv_nsec;
  std::vector<std::thread> ws;
  for (int t = 0; t < threads; t++) ws.emplace_back(worker, t, rounds, acc, seed);
  for (auto &w : ws) w.join();
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> h(threads);
  CHECK(cudaMemcpy(h.data(), acc, threads * sizeof *acc, cudaMemcpyDeviceToHost));
  for (int t = 0; t < threads; t++) printf("thread %d checksum %llu\n", t, h[t]);
  CHECK(cudaFree(acc));
  return 0;
}
