// reset_midrun: does record --pool survive the end of the context its memory came from? After each
// way a program can end a context, it allocates a 300 MiB block and 200 small ones (4 KiB .. 64 KiB),
// fills each with a pattern of its own, checks all of them, and frees a pointer from before the end.
//  1. driver, primary context: cuDevicePrimaryCtxRetain, cuMemAlloc of 12 blocks (256 B .. 8 MiB),
//     filled, then cuDevicePrimaryCtxRelease down to zero (the runtime is not used before it).
//       primary active after release: 0
//       primary stale cuMemFree before: <code>   after: <code>   (a block of the released context,
//                                                freed before the new blocks and after they are freed)
//       primary corrupted blocks: 0
//  2. driver, cuCtxCreate (CUDA 13: cuCtxCreate_v4, a CUctxCreateParams* second) / cuCtxDestroy, the
//     same way:  created stale cuMemFree before/after: <code>, created corrupted blocks: 0
//  3. runtime: cudaMalloc of 12 blocks (256 B .. 8 MiB) filled by a kernel, half freed with cudaFree,
//     cudaDeviceReset, the same way:  reset stale cudaFree before/after: <code>, reset corrupted blocks: 0
// The codes are CUDA's, whatever they are: the same must come out under record --pool. On the H200
// (driver 580.159.04, CUDA 13.0) every stale free returned 1 (invalid value), before and after.
// Exit 0 when the primary context was gone and no block was corrupted, 1 otherwise, 3 when a CUDA
// call fails (printed on stderr).
//
// Build: nvcc -O2 -o reset_midrun reset_midrun.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include "safety.cuh"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static const size_t OLD_SIZES[] = {256, 4096, 65536, 1 << 20, 3 << 20, 8 << 20};
static const size_t BIG = 300u << 20;
static const int SMALL = 200;

static size_t new_size(int i) { return i == 0 ? BIG : (size_t)4096 << (i % 5); }

__global__ void count_wrong(const uint32_t *p, size_t n, uint32_t seed, unsigned int *bad) {
  unsigned int mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    mine += p[i] != pattern(seed, i);
  if (mine) atomicAdd(bad, mine);
}

// driver_blocks allocates the new blocks in the current context, sets each to its own value with
// cuMemsetD32, copies each back, frees them and returns how many did not hold their value.
static int driver_blocks() {
  std::vector<CUdeviceptr> ptrs(SMALL + 1);
  for (int i = 0; i <= SMALL; i++) {
    CU(cuMemAlloc(&ptrs[i], new_size(i)));
    CU(cuMemsetD32(ptrs[i], 0x5000 + i, new_size(i) / 4));
  }
  CU(cuCtxSynchronize());
  int bad = 0;
  std::vector<uint32_t> host(BIG / 4);
  for (int i = 0; i <= SMALL; i++) {
    size_t words = new_size(i) / 4;
    CU(cuMemcpyDtoH(host.data(), ptrs[i], words * 4));
    size_t wrong = 0;
    for (size_t j = 0; j < words; j++) wrong += host[j] != (uint32_t)(0x5000 + i);
    bad += wrong != 0;
  }
  for (CUdeviceptr p : ptrs) CU(cuMemFree(p));
  return bad;
}

// driver_old allocates the 12 blocks that the context's end takes away, filled, in the current context.
static std::vector<CUdeviceptr> driver_old() {
  std::vector<CUdeviceptr> old;
  for (int i = 0; i < 12; i++) {
    CUdeviceptr p;
    CU(cuMemAlloc(&p, OLD_SIZES[i % 6]));
    CU(cuMemsetD32(p, 0x7000 + i, OLD_SIZES[i % 6] / 4));
    old.push_back(p);
  }
  CU(cuCtxSynchronize());
  return old;
}

// primary_part is part 1; it returns whether the primary context was gone and no block corrupted.
static bool primary_part(CUdevice dev) {
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxPushCurrent(ctx));
  std::vector<CUdeviceptr> old = driver_old();
  CU(cuCtxPopCurrent(&ctx));
  CU(cuDevicePrimaryCtxRelease(dev));
  unsigned int flags = 0;
  int active = -1;
  CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxPushCurrent(ctx));
  CUresult before = cuMemFree(old[0]);
  int bad = driver_blocks();
  CUresult after = cuMemFree(old[11]);
  CU(cuCtxPopCurrent(&ctx));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("primary active after release: %d\n", active);
  printf("primary stale cuMemFree before: %d\n", (int)before);
  printf("primary stale cuMemFree after: %d\n", (int)after);
  printf("primary corrupted blocks: %d\n", bad);
  return active == 0 && bad == 0;
}

// created_part is part 2; it returns whether no block was corrupted.
static bool created_part(CUdevice dev) {
  CUcontext ctx;
  CU(cuCtxCreate(&ctx, NULL, 0, dev));
  std::vector<CUdeviceptr> old = driver_old();
  CU(cuCtxDestroy(ctx));
  CU(cuCtxCreate(&ctx, NULL, 0, dev));
  CUresult before = cuMemFree(old[0]);
  int bad = driver_blocks();
  CUresult after = cuMemFree(old[11]);
  CU(cuCtxDestroy(ctx));
  printf("created stale cuMemFree before: %d\n", (int)before);
  printf("created stale cuMemFree after: %d\n", (int)after);
  printf("created corrupted blocks: %d\n", bad);
  return bad == 0;
}

// runtime_part is part 3; it returns whether no block was corrupted.
static bool runtime_part() {
  CHECK(cudaSetDevice(0));
  std::vector<uint32_t *> old(12);
  for (int i = 0; i < 12; i++) {
    CHECK(cudaMalloc(&old[i], OLD_SIZES[i % 6]));
    fill<<<64, 256>>>(old[i], OLD_SIZES[i % 6] / 4, 900 + i);
    CHECK(cudaGetLastError());
  }
  for (int i = 1; i < 12; i += 2) CHECK(cudaFree(old[i]));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceReset());
  cudaError_t before = cudaFree(old[0]);
  cudaGetLastError();
  std::vector<uint32_t *> ptrs(SMALL + 1);
  unsigned int *bad_words = NULL;
  CHECK(cudaMalloc(&bad_words, (SMALL + 1) * sizeof *bad_words));
  CHECK(cudaMemset(bad_words, 0, (SMALL + 1) * sizeof *bad_words));
  for (int i = 0; i <= SMALL; i++) {
    CHECK(cudaMalloc(&ptrs[i], new_size(i)));
    fill<<<64, 256>>>(ptrs[i], new_size(i) / 4, 100 + i);
    CHECK(cudaGetLastError());
  }
  for (int i = 0; i <= SMALL; i++) {
    count_wrong<<<64, 256>>>(ptrs[i], new_size(i) / 4, 100 + i, bad_words + i);
    CHECK(cudaGetLastError());
  }
  std::vector<unsigned int> host(SMALL + 1);
  CHECK(cudaMemcpy(host.data(), bad_words, host.size() * sizeof host[0], cudaMemcpyDeviceToHost));
  int bad = 0;
  for (unsigned int w : host) bad += w != 0;
  for (uint32_t *p : ptrs) CHECK(cudaFree(p));
  CHECK(cudaFree(bad_words));
  cudaError_t after = cudaFree(old[10]);
  cudaGetLastError();
  printf("reset stale cudaFree before: %d\n", (int)before);
  printf("reset stale cudaFree after: %d\n", (int)after);
  printf("reset corrupted blocks: %d\n", bad);
  return bad == 0;
}

int main() {
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  bool ok = primary_part(dev);
  ok = created_part(dev) && ok;
  ok = runtime_part() && ok;
  CHECK(cudaDeviceSynchronize());
  return ok ? 0 : 1;
}
