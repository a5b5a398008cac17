// oom_retry: does record --pool give memory back to CUDA when the program needs it, and keep the
// blocks of a nearly full device apart? On the whole device:
//   filled: yes          1 MiB blocks cudaMalloc'd until 90 % of the memory free at the start is used
//                        (by cudaMemGetInfo; their count depends on the machine and is not printed)
//   fill corrupted: 0    blocks whose first 64 KiB did not hold their own pattern (one kernel wrote
//                        them all, another checked them all)
//   big cudaMalloc: 0    after all are freed with cudaFree, ONE cudaMalloc of 95 % of the memory that
//                        was free at the start (a pool that keeps what it took fails here with 2)
//   big corrupted: no    a kernel filled the big block and another found every word right
//                        ("not allocated" when the big cudaMalloc failed)
//   small drop: yes      cudaMemGetInfo's free fell by at most 2 MiB for one 1 MiB cudaMalloc
// On the H200 (2026-12-04) record --pool's shim gave `big cudaMalloc: 2`: it kept the 1 MiB blocks'
// fallback reservations after their frees (docs/benchmarks.md).
// Exit 0 when every value is as above, 1 otherwise, 3 when a CUDA call fails (printed on stderr).
//
// Build: nvcc -O2 -o oom_retry oom_retry.cu -lcuda
#include <cuda_runtime.h>
#include "safety.cuh"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static const size_t MIB = 1 << 20, TOUCHED = 64 << 10;

// fill_blocks writes block b's pattern into the first words of blocks[b], one CUDA block per block.
__global__ void fill_blocks(uint32_t *const *blocks, size_t words) {
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) blocks[blockIdx.x][i] = pattern(blockIdx.x, i);
}

// check_blocks counts into *bad the blocks whose first words do not hold their pattern.
__global__ void check_blocks(uint32_t *const *blocks, size_t words, unsigned int *bad) {
  __shared__ int wrong;
  if (threadIdx.x == 0) wrong = 0;
  __syncthreads();
  for (size_t i = threadIdx.x; i < words; i += blockDim.x)
    if (blocks[blockIdx.x][i] != pattern(blockIdx.x, i)) wrong = 1;
  __syncthreads();
  if (threadIdx.x == 0 && wrong) atomicAdd(bad, 1u);
}

__global__ void count_wrong(const uint32_t *p, size_t n, uint32_t seed, unsigned long long *bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    mine += p[i] != pattern(seed, i);
  if (mine) atomicAdd(bad, mine);
}

static size_t free_now() {
  size_t f = 0, total = 0;
  CHECK(cudaMemGetInfo(&f, &total));
  return f;
}

// fill_device allocates 1 MiB blocks until used reaches the goal, writes and checks them, frees them
// and returns how many were corrupted (-1 when cudaMalloc failed before the goal).
static int fill_device(size_t free0, size_t goal) {
  std::vector<uint32_t *> blocks;
  bool reached = false;
  while (!reached) {
    uint32_t *p = NULL;
    cudaError_t e = cudaMalloc(&p, MIB);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fprintf(stderr, "cudaMalloc of block %zu: %s\n", blocks.size(), cudaGetErrorName(e));
      break;
    }
    blocks.push_back(p);
    if (blocks.size() % 64 == 0) reached = free0 - free_now() >= goal;
  }
  int bad = -1;
  if (reached) {
    uint32_t **table = NULL;
    unsigned int *bad_dev = NULL, bad_host = 0;
    CHECK(cudaMalloc(&table, blocks.size() * sizeof(uint32_t *)));
    CHECK(cudaMalloc(&bad_dev, sizeof *bad_dev));
    CHECK(cudaMemset(bad_dev, 0, sizeof *bad_dev));
    CHECK(cudaMemcpy(table, blocks.data(), blocks.size() * sizeof(uint32_t *), cudaMemcpyHostToDevice));
    fill_blocks<<<(unsigned)blocks.size(), 256>>>(table, TOUCHED / 4);
    CHECK(cudaGetLastError());
    check_blocks<<<(unsigned)blocks.size(), 256>>>(table, TOUCHED / 4, bad_dev);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&bad_host, bad_dev, sizeof bad_host, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(table));
    CHECK(cudaFree(bad_dev));
    bad = (int)bad_host;
  }
  for (uint32_t *p : blocks) CHECK(cudaFree(p));
  return bad;
}

// big_block makes the one large cudaMalloc, fills and checks it; it returns its code and sets *corrupted.
static cudaError_t big_block(size_t bytes, bool *corrupted) {
  uint32_t *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  *corrupted = true;
  if (e != cudaSuccess) {
    cudaGetLastError();
    return e;
  }
  unsigned long long *bad = NULL, host = 1;
  CHECK(cudaMalloc(&bad, sizeof *bad));
  CHECK(cudaMemset(bad, 0, sizeof *bad));
  fill<<<1024, 256>>>(p, bytes / 4, 77);
  CHECK(cudaGetLastError());
  count_wrong<<<1024, 256>>>(p, bytes / 4, 77, bad);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&host, bad, sizeof host, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(bad));
  CHECK(cudaFree(p));
  *corrupted = host != 0;
  return e;
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(0));
  size_t free0 = free_now();
  int fill_bad = fill_device(free0, free0 / 10 * 9);
  printf("filled: %s\n", fill_bad >= 0 ? "yes" : "no");
  printf("fill corrupted: %d\n", fill_bad < 0 ? 0 : fill_bad);
  bool big_bad = true;
  cudaError_t big = big_block(free0 / 100 * 95 / MIB * MIB, &big_bad);
  printf("big cudaMalloc: %d\n", (int)big);
  printf("big corrupted: %s\n", big != cudaSuccess ? "not allocated" : big_bad ? "yes" : "no");
  size_t before = free_now();
  void *one = NULL;
  CHECK(cudaMalloc(&one, MIB));
  size_t after = free_now();
  bool small = after <= before && before - after <= 2 * MIB;
  printf("small drop: %s\n", small ? "yes" : "no");
  CHECK(cudaFree(one));
  return fill_bad == 0 && big == cudaSuccess && !big_bad && small ? 0 : 1;
}
