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
//   spinner on a blocking stream destroyed before the barrier  expect 1 (its work still counts)
// and record --pool's join barrier over the non-blocking streams it knows (an event on each, the
// legacy stream waiting for them and for the events recorded on destroyed ones, the barrier, each
// non-blocking stream waiting for it):
//   non-blocking spinner and reader, no join         expect 0 (the control)
//   non-blocking spinner, join, blocking reader      expect 1
//   non-blocking spinner, join, non-blocking reader  expect 1
//   blocking spinner, join, non-blocking reader      expect 1
//   non-blocking spinner, join, another thread's per-thread reader  expect 1
//   spinner on a non-blocking stream destroyed before the join, blocking reader  expect 1
// Then the cost of one cuEventRecord on the legacy stream (median of 20 x 1,000), and of a join over
// 34 non-blocking streams (the two above and 32 more, as PyTorch's stream pool makes; median of 20).
//
// Build: nvcc -O2 -o legacy_barrier legacy_barrier.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <functional>
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

#define CU(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s: error %d\n", __FILE__, __LINE__, #x, (int)r); exit(3); } } while (0)

static void barrier() { CU(cuEventRecord(g_barrier, CU_STREAM_LEGACY)); }

// The join barrier as the shim makes it: g_apart are the non-blocking streams it knows, g_gone the
// events it recorded on the ones destroyed since the last join.
static std::vector<cudaStream_t> g_apart;
static std::vector<CUevent> g_events, g_gone;

static void join() {
  while (g_events.size() < g_apart.size()) {
    CUevent e;
    CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    g_events.push_back(e);
  }
  for (size_t i = 0; i < g_apart.size(); i++) {
    CU(cuEventRecord(g_events[i], (CUstream)g_apart[i]));
    CU(cuStreamWaitEvent(CU_STREAM_LEGACY, g_events[i], 0));
  }
  for (CUevent e : g_gone) CU(cuStreamWaitEvent(CU_STREAM_LEGACY, e, 0));
  g_gone.clear();
  CU(cuEventRecord(g_barrier, CU_STREAM_LEGACY));
  for (cudaStream_t s : g_apart) CU(cuStreamWaitEvent((CUstream)s, g_barrier, 0));
}

// run_case launches the spinner with launch_spin, then order (when not null), then the reader on
// reader, and returns what the reader saw.
template <typename F> static int run_case(F launch_spin, std::function<void()> order, cudaStream_t reader) {
  CHECK(cudaMemset(g_flag, 0, sizeof(int)));
  CHECK(cudaMemset(g_out, 0xff, sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  launch_spin();
  if (order) order();
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
  cudaStream_t s1, s2, apart, apart2;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaStreamCreateWithFlags(&apart, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&apart2, cudaStreamNonBlocking));
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
  printf("blocking streams, no barrier: %d\n", run_case(on_s1, nullptr, s2));
  printf("blocking streams, barrier: %d\n", run_case(on_s1, barrier, s2));
  printf("two threads' per-thread streams, no barrier: %d\n", run_case(other_thread, nullptr, cudaStreamPerThread));
  printf("two threads' per-thread streams, barrier: %d\n", run_case(other_thread, barrier, cudaStreamPerThread));
  printf("non-blocking spinner, barrier: %d\n", run_case(on_apart, barrier, s2));
  auto on_destroyed = [&] {
    cudaStream_t tmp;
    CHECK(cudaStreamCreate(&tmp));
    spin_then_set<<<1, 1, 0, tmp>>>(g_flag);
    CHECK(cudaStreamDestroy(tmp));
  };
  printf("spinner on a blocking stream destroyed before the barrier: %d\n", run_case(on_destroyed, barrier, s2));
  g_apart = {apart, apart2};
  printf("non-blocking spinner and reader, no join: %d\n", run_case(on_apart, nullptr, apart2));
  printf("non-blocking spinner, join, blocking reader: %d\n", run_case(on_apart, join, s2));
  printf("non-blocking spinner, join, non-blocking reader: %d\n", run_case(on_apart, join, apart2));
  printf("blocking spinner, join, non-blocking reader: %d\n", run_case(on_s1, join, apart2));
  auto thread_reader = [&] {
    int got = -1;
    std::thread([&] {
      CHECK(cudaMemset(g_flag, 0, sizeof(int)));
      CHECK(cudaDeviceSynchronize());
      spin_then_set<<<1, 1, 0, apart>>>(g_flag);
      join();
      read_flag<<<1, 1, 0, cudaStreamPerThread>>>(g_flag, g_out);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(&got, g_out, sizeof(int), cudaMemcpyDeviceToHost));
    }).join();
    return got;
  };
  printf("non-blocking spinner, join, another thread's per-thread reader: %d\n", thread_reader());
  auto on_gone = [&] {
    cudaStream_t tmp;
    CHECK(cudaStreamCreateWithFlags(&tmp, cudaStreamNonBlocking));
    spin_then_set<<<1, 1, 0, tmp>>>(g_flag);
    CUevent e;
    CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CU(cuEventRecord(e, (CUstream)tmp)); // as the shim does before the program's cudaStreamDestroy
    g_gone.push_back(e);
    CHECK(cudaStreamDestroy(tmp));
  };
  printf("spinner on a destroyed non-blocking stream, join, blocking reader: %d\n", run_case(on_gone, join, s2));
  std::vector<double> per;
  for (int r = 0; r < 20; r++) {
    double t0 = now_ns();
    for (int i = 0; i < 1000; i++) cuEventRecord(g_barrier, CU_STREAM_LEGACY);
    per.push_back((now_ns() - t0) / 1000);
  }
  std::sort(per.begin(), per.end());
  printf("cuEventRecord on the legacy stream: median %.0f ns\n", per[per.size() / 2]);
  for (int i = 0; i < 32; i++) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g_apart.push_back(s);
  }
  per.clear();
  for (int r = 0; r < 20; r++) {
    double t0 = now_ns();
    join();
    per.push_back(now_ns() - t0);
  }
  std::sort(per.begin(), per.end());
  printf("a join over %zu non-blocking streams: median %.1f us\n", g_apart.size(), per[per.size() / 2] / 1000);
  CHECK(cudaDeviceSynchronize());
  return 0;
}
