// sync_race: can record --pool hand out a block that a kernel still writes, when many threads free
// with cudaFree right after a launch while another thread synchronizes the device in a loop?
// THREADS worker threads (default 8), ROUNDS rounds each (default 40). Each worker has its own stream:
// even workers a non-blocking one, odd workers a blocking one. Each round it cudaMallocs a block (4 KiB
// .. 3 MiB), launches a kernel that spins SPIN_NS (2 ms, %globaltimer) and then fills the block with
// the pattern of (worker, round), a second kernel that counts the words that do not hold the pattern
// and sums them, and cudaFrees the block right after these launches (cudaFree waits for the device
// in CUDA, so the kernels have finished before the memory is reused). Every 10th round the worker
// also keeps one block alive (filled the same way) until the end. The main thread calls
// cudaDeviceSynchronize in a loop until the workers are done (the pool reuses deferred blocks then).
// At the end every kept block is checked again on the device and copied back and checked on the host.
//
//   threads: 8                     the arguments
//   rounds: 40
//   corrupted round blocks: 0      rounds whose block did not hold its pattern when read back
//   corrupted kept blocks: 0       kept blocks that did not hold their pattern at the end
//   checksum: <a number>           the sum of all words read back, the same in every correct run
//   checksum matches: yes          it equals the sum computed on the host
// Exit 0 when all hold, 1 otherwise, 3 when a CUDA call fails (printed on stderr).
//
//   sync_race [THREADS [ROUNDS]]
// Build: nvcc -O2 -o sync_race sync_race.cu -lcuda
#include <cuda_runtime.h>
#include "safety.cuh"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <atomic>
#include <thread>
#include <vector>

static const unsigned long long SPIN_NS = 2000000ULL;
static const int KEEP_EVERY = 10;
static const size_t SIZES[] = {4096, 256 << 10, 1 << 20, 2 << 20, 3 << 20};

// verify counts into *bad the words of p[0..n) that do not hold seed's pattern and adds all words to *sum.
__global__ void verify(const uint32_t *p, size_t n, uint32_t seed, unsigned int *bad, unsigned long long *sum) {
  unsigned int my_bad = 0;
  unsigned long long my_sum = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t v = p[i];
    my_bad += v != pattern(seed, i);
    my_sum += v;
  }
  if (my_bad) atomicAdd(bad, my_bad);
  atomicAdd(sum, my_sum);
}

// expected_sum is the sum of the n words of seed's pattern.
static unsigned long long expected_sum(uint32_t seed, size_t n) {
  unsigned long long s = 0;
  for (size_t i = 0; i < n; i++) s += pattern(seed, i);
  return s;
}

static int g_rounds;
static unsigned int *g_bad;         // per (worker, round) and per kept block: words that were wrong
static unsigned long long *g_sums;  // the same slots: sums of the words read back

struct Kept { uint32_t *p; size_t words; uint32_t seed; int slot; bool host_bad; };

static uint32_t seed_of(int worker, int round) { return (uint32_t)(worker * 100003 + round + 1); }

// run_worker does one worker's rounds on its own stream and returns the blocks it kept.
static void run_worker(int w, std::vector<Kept> *kept) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, w % 2 == 0 ? cudaStreamNonBlocking : cudaStreamDefault));
  int slots_per_worker = g_rounds + g_rounds / KEEP_EVERY + 1;
  for (int r = 0; r < g_rounds; r++) {
    size_t bytes = SIZES[(w + r) % 5];
    size_t words = bytes / 4;
    uint32_t *p = NULL;
    CHECK(cudaMalloc(&p, bytes));
    int slot = w * slots_per_worker + r;
    spin_fill<<<8, 256, 0, s>>>(p, words, seed_of(w, r), SPIN_NS);
    CHECK(cudaGetLastError());
    verify<<<8, 256, 0, s>>>(p, words, seed_of(w, r), g_bad + slot, g_sums + slot);
    CHECK(cudaGetLastError());
    CHECK(cudaFree(p));
    if (r % KEEP_EVERY == 0) {
      Kept k = {NULL, words, seed_of(w, 1000 + r), w * slots_per_worker + g_rounds + r / KEEP_EVERY, false};
      CHECK(cudaMalloc(&k.p, bytes));
      spin_fill<<<8, 256, 0, s>>>(k.p, words, k.seed, SPIN_NS);
      CHECK(cudaGetLastError());
      kept->push_back(k);
    }
  }
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
}

// check_kept verifies every kept block on the device (into its slot) and on the host (into host_bad),
// frees it and adds its expected sum to *want.
static void check_kept(std::vector<std::vector<Kept>> &kept, unsigned long long *want) {
  std::vector<uint32_t> host;
  for (auto &list : kept)
    for (Kept &k : list) {
      verify<<<8, 256>>>(k.p, k.words, k.seed, g_bad + k.slot, g_sums + k.slot);
      CHECK(cudaGetLastError());
      host.resize(k.words);
      CHECK(cudaMemcpy(host.data(), k.p, k.words * 4, cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < k.words; i++) wrong += host[i] != pattern(k.seed, i);
      k.host_bad = wrong != 0;
      *want += expected_sum(k.seed, k.words);
      CHECK(cudaFree(k.p));
    }
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 8;
  g_rounds = argc > 2 ? atoi(argv[2]) : 40;
  if (threads < 1 || threads > 64 || g_rounds < 1 || g_rounds > 10000) {
    fprintf(stderr, "usage: sync_race [THREADS (1..64) [ROUNDS (1..10000)]]\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  int slots_per_worker = g_rounds + g_rounds / KEEP_EVERY + 1, slots = threads * slots_per_worker;
  CHECK(cudaMalloc(&g_bad, slots * sizeof *g_bad));
  CHECK(cudaMalloc(&g_sums, slots * sizeof *g_sums));
  CHECK(cudaMemset(g_bad, 0, slots * sizeof *g_bad));
  CHECK(cudaMemset(g_sums, 0, slots * sizeof *g_sums));
  spin_fill<<<1, 1>>>(g_bad, 0, 0, 0); // load the module before the threads start
  verify<<<1, 1>>>(g_bad, 0, 0, g_bad, g_sums);
  CHECK(cudaDeviceSynchronize());
  std::vector<std::vector<Kept>> kept(threads);
  std::atomic<int> running(threads);
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; w++)
    workers.emplace_back([w, &kept, &running] { run_worker(w, &kept[w]); running--; });
  while (running.load() > 0) CHECK(cudaDeviceSynchronize());
  for (auto &t : workers) t.join();
  CHECK(cudaDeviceSynchronize());
  unsigned long long want = 0;
  check_kept(kept, &want);
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned int> bad(slots);
  std::vector<unsigned long long> sums(slots);
  CHECK(cudaMemcpy(bad.data(), g_bad, slots * sizeof *g_bad, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sums.data(), g_sums, slots * sizeof *g_sums, cudaMemcpyDeviceToHost));
  int round_bad = 0, kept_bad = 0;
  unsigned long long got = 0;
  for (int w = 0; w < threads; w++)
    for (int r = 0; r < g_rounds; r++) {
      int slot = w * slots_per_worker + r;
      round_bad += bad[slot] != 0;
      got += sums[slot];
      want += expected_sum(seed_of(w, r), SIZES[(w + r) % 5] / 4);
    }
  for (const auto &list : kept)
    for (const Kept &k : list) {
      kept_bad += bad[k.slot] != 0 || k.host_bad;
      got += sums[k.slot];
    }
  printf("threads: %d\nrounds: %d\n", threads, g_rounds);
  printf("corrupted round blocks: %d\n", round_bad);
  printf("corrupted kept blocks: %d\n", kept_bad);
  printf("checksum: %llu\n", got);
  printf("checksum matches: %s\n", got == want ? "yes" : "no");
  CHECK(cudaFree(g_bad));
  CHECK(cudaFree(g_sums));
  return round_bad == 0 && kept_bad == 0 && got == want ? 0 : 1;
}
