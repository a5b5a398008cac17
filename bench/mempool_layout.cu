// mempool_layout: where a CUDA memory pool (cudaMallocAsync) places blocks and how its reserved
// memory follows, for analyze's model of backend:cudaMallocAsync. Each case runs on a fresh pool
// that keeps its memory (release threshold UINT64_MAX) and prints, after each step, the block's
// offset from the case's first block and the pool's reserved bytes, in KiB.
//
// Build: nvcc -O2 -o mempool_layout mempool_layout.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e)); exit(3); } } while (0)

static const size_t K = 1024, M = 1024 * 1024;
static cudaMemPool_t pool;
static cudaStream_t s1, s2;
static char *first;
static std::vector<void *> slot(64);

static long long reservedK() {
  uint64_t r = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &r));
  return (long long)(r >> 10);
}

// a i n S: allocate n bytes into slot i on stream S (1 or 2); f i S: free slot i on stream S;
// y: synchronize the device; t: trim the pool to 0.
static void step(char op, int i, size_t n, int s) {
  cudaStream_t st = s == 2 ? s2 : s1;
  if (op == 'a') {
    CHECK(cudaMallocFromPoolAsync(&slot[i], n, pool, st));
    if (!first) first = (char *)slot[i];
    printf(" a%d:%zuK@%lldK", i, n / K, (long long)(((char *)slot[i] - first) / (long long)K));
  } else if (op == 'f') {
    CHECK(cudaFreeAsync(slot[i], st));
    slot[i] = 0;
    printf(" f%d", i);
  } else if (op == 'y') {
    CHECK(cudaDeviceSynchronize());
    printf(" y");
  } else if (op == 't') {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemPoolTrimTo(pool, 0));
    printf(" t");
  }
  printf("[%lldK]", reservedK());
}

struct Step { char op; int i; size_t n; int s; };

static void run(const char *name, std::vector<Step> steps) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  first = 0;
  printf("%s:", name);
  for (Step st : steps) step(st.op, st.i, st.n, st.s);
  printf("\n");
  for (void *&p : slot) if (p) { CHECK(cudaFreeAsync(p, s1)); p = 0; }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemPoolDestroy(pool));
}

int main() {
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  std::vector<Step> small, mixed;
  for (int i = 0; i < 6; i++) small.push_back({'a', i, 512, 1});
  for (int i = 0; i < 6; i++) small.push_back({'a', 6 + i, 100 * K + 7, 1});
  run("alignment", small);
  run("span", {{'a', 0, 30 * M, 1}, {'a', 1, 4 * M, 1}, {'a', 2, 1 * M, 1}, {'a', 3, 40 * M, 1}});
  run("hole", {{'a', 0, 10 * M, 1}, {'a', 1, 10 * M, 1}, {'a', 2, 10 * M, 1}, {'f', 1, 0, 1}, {'y', 0, 0, 0},
               {'a', 3, 4 * M, 1}, {'a', 4, 4 * M, 1}, {'a', 5, 4 * M, 1}, {'a', 6, 1 * M, 1}});
  run("bestfit", {{'a', 0, 8 * M, 1}, {'a', 1, 2 * M, 1}, {'a', 2, 3 * M, 1}, {'a', 3, 2 * M, 1}, {'a', 4, 8 * M, 1},
                  {'f', 0, 0, 1}, {'f', 2, 0, 1}, {'y', 0, 0, 0}, {'a', 5, 3 * M, 1}, {'a', 6, 5 * M, 1}});
  run("tail", {{'a', 0, 20 * M, 1}, {'a', 1, 10 * M, 1}, {'f', 1, 0, 1}, {'y', 0, 0, 0}, {'a', 2, 20 * M, 1}});
  run("stream", {{'a', 0, 4 * M, 1}, {'f', 0, 0, 1}, {'a', 1, 4 * M, 2}, {'a', 2, 4 * M, 1}, {'y', 0, 0, 0},
                 {'a', 3, 4 * M, 2}});
  run("nosync", {{'a', 0, 4 * M, 1}, {'f', 0, 0, 1}, {'a', 1, 4 * M, 1}, {'f', 1, 0, 1}, {'a', 2, 2 * M, 1}});
  run("trim", {{'a', 0, 40 * M, 1}, {'a', 1, 40 * M, 1}, {'a', 2, 40 * M, 1}, {'f', 2, 0, 1}, {'t', 0, 0, 0},
               {'f', 0, 0, 1}, {'t', 0, 0, 0}, {'a', 3, 10 * M, 1}});
  run("big", {{'a', 0, 1 * M, 1}, {'a', 1, 300 * M, 1}, {'a', 2, 1 * M, 1}, {'a', 3, 2 * K, 1}});
  run("coalesce", {{'a', 0, 6 * M, 1}, {'a', 1, 6 * M, 1}, {'a', 2, 6 * M, 1}, {'a', 3, 6 * M, 1},
                   {'f', 1, 0, 1}, {'f', 2, 0, 1}, {'y', 0, 0, 0}, {'a', 4, 12 * M, 1}});
  for (int n : {1, 2}) {
    std::vector<Step> many;
    for (int i = 0; i < 40; i++) many.push_back({'a', i, (size_t)n * 1536 * K, 1});
    run(n == 1 ? "many 1.5M" : "many 3M", many);
  }
  return 0;
}
