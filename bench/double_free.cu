// double_free: does record --pool answer wrong frees as CUDA does, and keep every block intact after them?
//   first cudaFree: 0                a 1 MiB block freed once
//   second cudaFree: 1               and again (cudaErrorInvalidValue)
//   cudaFree inside a block: 1       an address 256 B inside a live 1 MiB block (whatever CUDA returns:
//                                    the same must come out under the pool)
//   cudaFree(NULL): 0
//   first cuMemFree: 0 / second cuMemFree: 1   the same through the driver API
//   inner block intact: yes          the live block (filled before the wrong free) still holds its pattern
//   buffers: 100 / corrupted buffers: 0   100 blocks (256 B .. 2 MiB) allocated after the wrong frees,
//                                    each filled by a kernel that spins SPIN_NS first, freed every
//                                    third right after its fill, the rest checked
//   devices: 1                       a second device's part runs only when there are more (a block of
//                                    device 1 freed while device 0 is current: cross-device free: <code>)
// Exit 0 when every value is as above, 1 otherwise, 3 when a CUDA call fails (printed on stderr).
//
// Build: nvcc -O2 -o double_free double_free.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include "safety.cuh"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static const unsigned long long SPIN_NS = 1000000ULL;
static const size_t SIZES[] = {256, 4096, 65536, 1 << 20, 2 << 20};

// holds copies n words of d back and says whether they hold seed's pattern.
static bool holds(const uint32_t *d, size_t n, uint32_t seed) {
  std::vector<uint32_t> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++)
    if (h[i] != pattern(seed, i)) return false;
  return true;
}

// wrong_frees prints the codes of the wrong frees and returns whether they were CUDA's and the live
// block survived.
static bool wrong_frees() {
  void *a = NULL;
  CHECK(cudaMalloc(&a, 1 << 20));
  cudaError_t first = cudaFree(a), second = cudaFree(a);
  cudaGetLastError();
  uint32_t *live = NULL;
  CHECK(cudaMalloc(&live, 1 << 20));
  spin_fill<<<8, 256>>>(live, (1 << 20) / 4, 42, SPIN_NS);
  CHECK(cudaGetLastError());
  cudaError_t inner = cudaFree((char *)live + 256);
  cudaGetLastError();
  cudaError_t null_free = cudaFree(NULL);
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, 1 << 20));
  CUresult cu_first = cuMemFree(d), cu_second = cuMemFree(d);
  CHECK(cudaDeviceSynchronize());
  bool intact = holds(live, (1 << 20) / 4, 42);
  CHECK(cudaFree(live));
  printf("first cudaFree: %d\nsecond cudaFree: %d\n", (int)first, (int)second);
  printf("cudaFree inside a block: %d\ncudaFree(NULL): %d\n", (int)inner, (int)null_free);
  printf("first cuMemFree: %d\nsecond cuMemFree: %d\n", (int)cu_first, (int)cu_second);
  printf("inner block intact: %s\n", intact ? "yes" : "no");
  return first == cudaSuccess && second == cudaErrorInvalidValue && inner == cudaErrorInvalidValue &&
         null_free == cudaSuccess && cu_first == CUDA_SUCCESS && cu_second == CUDA_ERROR_INVALID_VALUE && intact;
}

// many_buffers allocates, fills and checks the 100 buffers; it returns how many were corrupted.
static int many_buffers() {
  std::vector<uint32_t *> ptrs(100);
  for (int i = 0; i < 100; i++) {
    CHECK(cudaMalloc(&ptrs[i], SIZES[i % 5]));
    spin_fill<<<8, 256>>>(ptrs[i], SIZES[i % 5] / 4, 500 + i, SPIN_NS);
    CHECK(cudaGetLastError());
    if (i % 3 == 2) {
      CHECK(cudaFree(ptrs[i]));
      ptrs[i] = NULL;
    }
  }
  CHECK(cudaDeviceSynchronize());
  int bad = 0;
  for (int i = 0; i < 100; i++) {
    if (!ptrs[i]) continue;
    bad += !holds(ptrs[i], SIZES[i % 5] / 4, 500 + i);
    CHECK(cudaFree(ptrs[i]));
  }
  printf("buffers: 100\ncorrupted buffers: %d\n", bad);
  return bad;
}

// two_devices frees a block of device 1 while device 0 is current and prints CUDA's code.
static void two_devices() {
  void *p = NULL;
  CHECK(cudaSetDevice(1));
  CHECK(cudaMalloc(&p, 1 << 20));
  CHECK(cudaSetDevice(0));
  cudaError_t e = cudaFree(p);
  cudaGetLastError();
  printf("cross-device free: %d\n", (int)e);
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(0));
  bool ok = wrong_frees();
  ok = many_buffers() == 0 && ok;
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  printf("devices: %d\n", devices);
  if (devices > 1) two_devices();
  CHECK(cudaDeviceSynchronize());
  return ok ? 0 : 1;
}
