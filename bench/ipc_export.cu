// ipc_export: does a block exported with cudaIpcGetMemHandle still name that block under record
// --pool? The parent cudaMallocs two other blocks first (4 KiB and 1 MiB, filled with 99, so that the
// exported one does not start a region of its own), then a 1 MiB block filled with 1234 by a kernel,
// exports it and runs itself again as the child (`ipc_export child HEX`, the handle in hex: CUDA and
// fork do not mix, so the child is a fresh process), which opens the handle and reads the block's
// first and last elements back. The parent prints the child's lines after its own.
//   ipc get handle: 0
//   child open: 0
//   child first: 1234
//   child last: 1234
//   child close: 0
//   child exit: 0               ("not run" when there was no handle to give it)
// Under record --pool the shim refuses the handle of a pool block (`ipc get handle: 1`, `child exit:
// not run`; docs/record-pool.md): the output differs there by design.
// Exit 0 when every value is as above, 1 otherwise, 3 when a CUDA call fails (printed on stderr).
//
// Build: nvcc -O2 -o ipc_export ipc_export.cu -lcuda
#include <cuda_runtime.h>
#include "safety.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>

static const size_t WORDS = (1 << 20) / sizeof(int);

__global__ void fill(int *p, size_t n, int v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

// to_hex writes the handle's bytes as 2 hex digits each.
static std::string to_hex(const cudaIpcMemHandle_t &h) {
  std::string s;
  char two[3];
  for (size_t i = 0; i < sizeof h.reserved; i++) {
    snprintf(two, sizeof two, "%02x", (unsigned char)h.reserved[i]);
    s += two;
  }
  return s;
}

// from_hex reads a handle written by to_hex; it returns false when hex is not one.
static bool from_hex(const char *hex, cudaIpcMemHandle_t *h) {
  if (strlen(hex) != 2 * sizeof h->reserved) return false;
  for (size_t i = 0; i < sizeof h->reserved; i++) {
    unsigned int b;
    if (sscanf(hex + 2 * i, "%2x", &b) != 1) return false;
    h->reserved[i] = (char)b;
  }
  return true;
}

// child opens the handle, reads the first and last elements and prints them; it returns the exit code.
static int child(const char *hex) {
  cudaIpcMemHandle_t h;
  if (!from_hex(hex, &h)) {
    fprintf(stderr, "ipc_export child: not a handle: %s\n", hex);
    return 2;
  }
  CHECK(cudaSetDevice(0));
  int *p = NULL, first = -1, last = -1;
  cudaError_t open = cudaIpcOpenMemHandle((void **)&p, h, cudaIpcMemLazyEnablePeerAccess);
  printf("child open: %d\n", (int)open);
  if (open != cudaSuccess) return 1;
  CHECK(cudaMemcpy(&first, p, sizeof first, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&last, p + WORDS - 1, sizeof last, cudaMemcpyDeviceToHost));
  cudaError_t close = cudaIpcCloseMemHandle(p);
  printf("child first: %d\nchild last: %d\nchild close: %d\n", first, last, (int)close);
  return first == 1234 && last == 1234 && close == cudaSuccess ? 0 : 1;
}

// run_child runs this program as the child with hex and returns its exit code (-1 when it could not).
static int run_child(const std::string &hex) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  self[n] = 0;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execl(self, self, "child", hex.c_str(), (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  if (argc != 1) {
    fprintf(stderr, "usage: ipc_export (the parent; it runs `ipc_export child HEX` itself)\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  int *small = NULL, *other = NULL, *exported = NULL;
  CHECK(cudaMalloc(&small, 4096));
  CHECK(cudaMalloc(&other, 1 << 20));
  CHECK(cudaMalloc(&exported, 1 << 20));
  fill<<<64, 256>>>(small, 4096 / sizeof(int), 99);
  fill<<<64, 256>>>(other, WORDS, 99);
  fill<<<64, 256>>>(exported, WORDS, 1234);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  memset(&h, 0, sizeof h);
  cudaError_t get = cudaIpcGetMemHandle(&h, exported);
  printf("ipc get handle: %d\n", (int)get);
  int code = get == cudaSuccess ? run_child(to_hex(h)) : -1;
  if (get == cudaSuccess) printf("child exit: %d\n", code);
  else printf("child exit: not run\n");
  CHECK(cudaFree(exported));
  CHECK(cudaFree(other));
  CHECK(cudaFree(small));
  return get == cudaSuccess && code == 0 ? 0 : 1;
}
