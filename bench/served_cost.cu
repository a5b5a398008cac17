// served_cost: cudaMalloc/cudaFree of four sizes in a loop, with the host touching THRASH bytes of its
// own memory between the allocations and the frees (as a real program does: its caches are cold at
// each call). THRASH_MODE says how: lines (default: every cache line, on 4 KiB pages), pages (one
// line per 4 KiB page: the TLB goes cold, most of the caches do not) or huge (every line, on 2 MiB
// pages where the kernel gives them: the caches go cold, the TLB mostly does not). Recorded without and with record --pool, analyze --compare gives the time per request
// of each. Also prints the host's clock source and the cost of clock_gettime and cuCtxGetDevice, warm
// and after the thrash.
//
//   served_cost N THRASH
// Build: nvcc -O2 -o served_cost served_cost.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns() {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static volatile long sink;

static long g_step = 64;

static void thrash(char *buf, long n) {
  for (long j = 0; j < n; j += g_step) sink += buf[j]++;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000, t = argc > 2 ? atol(argv[2]) : 0;
  const char *mode = getenv("THRASH_MODE") ? getenv("THRASH_MODE") : "lines";
  size_t bytes = ((size_t)(t > 0 ? t : 1) + (2 << 20) - 1) & ~(size_t)((2 << 20) - 1);
  char *buf = (char *)aligned_alloc(2 << 20, bytes);
  madvise(buf, bytes, strcmp(mode, "huge") == 0 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  if (strcmp(mode, "pages") == 0) g_step = 4096;
  memset(buf, 1, bytes);
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) return 3;
  const size_t sizes[4] = {256, 4096, 65536, 1 << 20};
  void *p[4];
  for (long i = 0; i < n; i++) {
    for (int k = 0; k < 4; k++)
      if (cudaMalloc(&p[k], sizes[k]) != cudaSuccess) return 3;
    thrash(buf, t);
    for (int k = 0; k < 4; k++)
      if (cudaFree(p[k]) != cudaSuccess) return 3;
  }
  if (getenv("SERVED_COST_PROBE")) {
    CUdevice d;
    double t0 = now_ns();
    for (int i = 0; i < 100000; i++) cuCtxGetDevice(&d);
    double warm = (now_ns() - t0) / 100000;
    t0 = now_ns();
    for (int i = 0; i < 100000; i++) now_ns();
    double clk = (now_ns() - t0) / 100000;
    double cold = 0;
    for (int i = 0; i < 200; i++) {
      thrash(buf, t);
      double a = now_ns();
      cuCtxGetDevice(&d);
      cold += now_ns() - a;
    }
    fprintf(stderr, "clock_gettime %.0f ns, cuCtxGetDevice warm %.0f ns, after the thrash %.0f ns (incl. a clock read)\n",
            clk, warm, cold / 200);
  }
  printf("done %ld\n", n);
  return 0;
}
