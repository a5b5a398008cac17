// graph_capture: does record --pool keep CUDA's graph-capture semantics and hand out no memory a
// captured graph uses?
//  1. On a non-blocking stream, a global-mode capture of cudaMallocAsync(tmp), a kernel that spins
//     SPIN_NS (2 ms, %globaltimer) and writes 1 into tmp, a copy of tmp into result (allocated before
//     the capture) and cudaFreeAsync(tmp). A block freed with cudaFree just before the capture waits
//     in the pool. The graph is instantiated, a block of the same size is cudaMalloc'd and filled with
//     7 (a spinning kernel), and the graph is launched 10 times with no wait in between.
//       graph nodes: 4              alloc, kernel, copy, free
//       sevens intact: yes          the cudaMalloc'd block holds only 7
//       result ones: yes            result holds only 1
//  2. cudaMalloc inside a global-mode capture on another non-blocking stream:
//       global capture cudaMalloc: 900   cudaErrorStreamCaptureUnsupported
//       global capture end: 901          cudaErrorStreamCaptureInvalidated
//  3. cudaMalloc inside a relaxed-mode capture (allowed there), a captured kernel filling the block
//     with 5, the graph launched once, then cudaFree of the block:
//       relaxed capture cudaMalloc: 0 / relaxed capture end: 0 / relaxed graph nodes: 1
//       relaxed block fives: yes / relaxed cudaFree: 0
// Exit 0 when every value is as above, 1 otherwise, 3 when a CUDA call fails (printed on stderr).
//
// Build: nvcc -O2 -o graph_capture graph_capture.cu -lcuda
#include <cuda_runtime.h>
#include "safety.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static const unsigned long long SPIN_NS = 2000000ULL;
static const size_t BYTES = 1 << 20, WORDS = BYTES / 4;

// spin_fill waits spin_ns on the device's global timer, then sets p[0..n) to v.
__global__ void spin_fill(int *p, size_t n, int v, unsigned long long spin_ns) {
  unsigned long long t0 = global_ns();
  while (global_ns() - t0 < spin_ns) {}
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

// all_equal copies n ints of d back and says whether all of them are v.
static bool all_equal(const int *d, size_t n, int v) {
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++)
    if (h[i] != v) return false;
  return true;
}

static size_t node_count(cudaGraph_t g) {
  size_t n = 0;
  CHECK(cudaGraphGetNodes(g, NULL, &n));
  return n;
}

// captured_alloc is part 1; it returns whether its values were as expected.
static bool captured_alloc() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *result = NULL, *before = NULL, *tmp = NULL, *sevens = NULL;
  CHECK(cudaMalloc(&result, BYTES));
  CHECK(cudaMemset(result, 0, BYTES));
  CHECK(cudaMalloc(&before, BYTES));
  spin_fill<<<8, 256>>>(before, WORDS, 3, SPIN_NS);
  CHECK(cudaGetLastError());
  CHECK(cudaFree(before));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocAsync((void **)&tmp, BYTES, s));
  spin_fill<<<8, 256, 0, s>>>(tmp, WORDS, 1, SPIN_NS);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(result, tmp, BYTES, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(tmp, s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaMalloc(&sevens, BYTES));
  spin_fill<<<8, 256>>>(sevens, WORDS, 7, SPIN_NS);
  CHECK(cudaGetLastError());
  for (int i = 0; i < 10; i++) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaDeviceSynchronize());
  size_t nodes = node_count(graph);
  bool sevens_ok = all_equal(sevens, WORDS, 7), ones_ok = all_equal(result, WORDS, 1);
  printf("graph nodes: %zu\n", nodes);
  printf("sevens intact: %s\n", sevens_ok ? "yes" : "no");
  printf("result ones: %s\n", ones_ok ? "yes" : "no");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(sevens));
  CHECK(cudaFree(result));
  CHECK(cudaStreamDestroy(s));
  return nodes == 4 && sevens_ok && ones_ok;
}

// global_capture is part 2; it returns whether CUDA refused as expected.
static bool global_capture() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void *p = NULL;
  cudaError_t alloc = cudaMalloc(&p, 4096);
  cudaGraph_t g = NULL;
  cudaError_t end = cudaStreamEndCapture(s, &g);
  cudaGetLastError(); // clear the errors made on purpose
  printf("global capture cudaMalloc: %d\n", (int)alloc);
  printf("global capture end: %d\n", (int)end);
  if (g) CHECK(cudaGraphDestroy(g));
  if (alloc == cudaSuccess && p) CHECK(cudaFree(p));
  CHECK(cudaStreamDestroy(s));
  return alloc == cudaErrorStreamCaptureUnsupported && end == cudaErrorStreamCaptureInvalidated;
}

// relaxed_capture is part 3; it returns whether its values were as expected.
static bool relaxed_capture() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  int *p = NULL;
  cudaError_t alloc = cudaMalloc(&p, BYTES);
  if (alloc == cudaSuccess) {
    spin_fill<<<8, 256, 0, s>>>(p, WORDS, 5, SPIN_NS);
    CHECK(cudaGetLastError());
  }
  cudaGraph_t g = NULL;
  cudaError_t end = cudaStreamEndCapture(s, &g);
  cudaGetLastError();
  printf("relaxed capture cudaMalloc: %d\n", (int)alloc);
  printf("relaxed capture end: %d\n", (int)end);
  bool fives = false;
  size_t nodes = 0;
  if (end == cudaSuccess && g) {
    nodes = node_count(g);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    if (alloc == cudaSuccess) fives = all_equal(p, WORDS, 5);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
  }
  printf("relaxed graph nodes: %zu\n", nodes);
  printf("relaxed block fives: %s\n", fives ? "yes" : "no");
  cudaError_t freed = alloc == cudaSuccess ? cudaFree(p) : cudaErrorInvalidValue;
  printf("relaxed cudaFree: %d\n", (int)freed);
  CHECK(cudaStreamDestroy(s));
  return alloc == cudaSuccess && end == cudaSuccess && nodes == 1 && fives && freed == cudaSuccess;
}

int main() {
  CHECK(cudaSetDevice(0));
  bool ok = captured_alloc();
  ok = global_capture() && ok;
  ok = relaxed_capture() && ok;
  CHECK(cudaDeviceSynchronize());
  return ok ? 0 : 1;
}
