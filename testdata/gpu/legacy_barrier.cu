// legacy_barrier: does an event recorded on the legacy stream order the device's work as record
// --pool's barrier relies on? Each case starts a kernel that spins for SPIN_MS and then sets a flag,
// records (or not) an event on CU_STREAM_LEGACY through the driver API as the shim does, then
// launches a kernel on another stream that reads the flag. 1 = the reader ran after the spinner.
//
//   blocking streams, no barrier          expect 0 (the control: the two streams overlap)
//   blocking streams, barrier             expect 1
//   two threads' per-thread streams, no   expect 0
//   two threads' per-thread streams, yes  expect 1
//   non-blocking spinner, barrier         expect 0 (why a non-blocking stream turns barriers off)
// Then the cost of one cuEventRecord on the legacy stream (median of 20 x 1,000).
//
// Build: nvcc -O2 -o legacy_barrier legacy_barrier.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <thread>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e)); exit(3); } } while (0)

static const long long SPIN_CYCLES = 400000000LL; // about 200 ms at 2 GHz

__global__ void spin_then_set(volatile int *flag) {
  long long t0 = clock64();
  while (clock64() - t0 < SPIN_CYCLES) {}
  __threadfence_system();
  *flag = 1;
}

__global__ void read_flag(const volatile int *flag, int *out) { *out = *flag; }

static int *g_flag, *g_out;
static CUevent g_barrier;

// run_case launches the spinner with launch_spin, the barrier if asked, the reader on reader, and
// returns what the reader saw.
template <typename F> static int run_case(F launch_spin, bool barrier, cudaStream_t reader) {
  CHECK(cudaMemset(g_flag, 0, sizeof(int)));
  CHECK(cudaMemset(g_out, 0xff, sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  launch_spin();
  if (barrier && cuEventRecord(g_barrier, CU_STREAM_LEGACY) != CUDA_SUCCESS) {
    fprintf(stderr, "cuEventRecord on the legacy stream failed\n");
    exit(3);
  }
  read_flag<<<1, 1, 0, reader>>>(g_flag, g_out);
  CHECK(cudaGetLastError());
  int out = -1;
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(&out, g_out, sizeof(int), cudaMemcpyDeviceToHost));
  return out;
}

static double now_ns() {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&g_flag, sizeof(int)));
  CHECK(cudaMalloc(&g_out, sizeof(int)));
  if (cuEventCreate(&g_barrier, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return 3;
  cudaStream_t s1, s2, apart;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaStreamCreateWithFlags(&apart, cudaStreamNonBlocking));
  // Load both kernels first: a kernel's first launch loads its module, which waits for the device.
  spin_then_set<<<1, 1>>>(g_out);
  read_flag<<<1, 1>>>(g_flag, g_out);
  std::thread([] { read_flag<<<1, 1, 0, cudaStreamPerThread>>>(g_flag, g_out); }).join();
  CHECK(cudaDeviceSynchronize());
  auto on_s1 = [&] { spin_then_set<<<1, 1, 0, s1>>>(g_flag); };
  auto other_thread = [&] {
    std::thread t([] { spin_then_set<<<1, 1, 0, cudaStreamPerThread>>>(g_flag); });
    t.join();
  };
  auto on_apart = [&] { spin_then_set<<<1, 1, 0, apart>>>(g_flag); };
  printf("blocking streams, no barrier: %d\n", run_case(on_s1, false, s2));
  printf("blocking streams, barrier: %d\n", run_case(on_s1, true, s2));
  printf("two threads' per-thread streams, no barrier: %d\n", run_case(other_thread, false, cudaStreamPerThread));
  printf("two threads' per-thread streams, barrier: %d\n", run_case(other_thread, true, cudaStreamPerThread));
  printf("non-blocking spinner, barrier: %d\n", run_case(on_apart, true, s2));
  std::vector<double> per;
  for (int r = 0; r < 20; r++) {
    double t0 = now_ns();
    for (int i = 0; i < 1000; i++) cuEventRecord(g_barrier, CU_STREAM_LEGACY);
    per.push_back((now_ns() - t0) / 1000);
  }
  std::sort(per.begin(), per.end());
  printf("cuEventRecord on the legacy stream: median %.0f ns\n", per[per.size() / 2]);
  CHECK(cudaDeviceSynchronize());
  return 0;
}
