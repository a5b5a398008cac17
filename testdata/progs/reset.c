/* A context reset under the program's blocks. Usage: reset runtime|release|destroy. The program
 * allocates blocks in a context and launches on them on a non-blocking stream, then resets it
 * (cudaDeviceReset; the last cuDevicePrimaryCtxRelease of a retained primary context; cuCtxDestroy_v2
 * of a context made with cuCtxCreate_v2), then allocates 300 MiB and 200 small blocks and launches on
 * them on another non-blocking stream: no two live blocks may overlap. It frees those, then frees a
 * pre-reset pointer and prints what that returns, then the safety report. */
#include "safety.h"

#include <string.h>

#define BEFORE 16
#define AFTER 200

/* use_blocks allocates n blocks of size (plus one of big when big != 0) and launches on s. */
static long use_blocks(void **v, int n, size_t size, void **bigp, size_t big, cudaStream_t s) {
	long failed = 0;
	if (big != 0) {
		failed += cudaMalloc(bigp, big) != 0;
		live_add(*bigp, big);
		fakecuda_launch(s, (uint64_t)(uintptr_t)*bigp, big, new_owner());
	}
	for (int i = 0; i < n; i++) {
		failed += cudaMalloc(&v[i], size + (size_t)i * 512) != 0;
		live_add(v[i], size + (size_t)i * 512);
		fakecuda_launch(s, (uint64_t)(uintptr_t)v[i], size + (size_t)i * 512, new_owner());
	}
	return failed;
}

/* do_reset resets the context the way mode names; its result. */
static int do_reset(const char *mode, CUcontext made) {
	if (strcmp(mode, "runtime") == 0)
		return (int)cudaDeviceReset();
	if (strcmp(mode, "release") == 0)
		return (int)cuDevicePrimaryCtxRelease(0);
	return (int)cuCtxDestroy_v2(made);
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "";
	if (strcmp(mode, "runtime") != 0 && strcmp(mode, "release") != 0 && strcmp(mode, "destroy") != 0) {
		fprintf(stderr, "usage: reset runtime|release|destroy\n");
		return 2;
	}
	static void *before[BEFORE], *after[AFTER];
	void *big0 = NULL, *big = NULL;
	CUcontext made = NULL;
	cudaSetDevice(0);
	if (strcmp(mode, "release") == 0)
		cuDevicePrimaryCtxRetain(&made, 0);
	if (strcmp(mode, "destroy") == 0)
		cuCtxCreate_v2(&made, 0, 0);
	cudaStream_t s1, s2;
	cudaStreamCreateWithFlags(&s1, 1);
	long failed = use_blocks(before, BEFORE, 4096, &big0, 64u << 20, s1);
	printf("reset: %d\n", do_reset(mode, made));
	for (int i = 0; i < BEFORE; i++)
		live_remove(before[i]);
	live_remove(big0);
	cudaSetDevice(0);
	cudaStreamCreateWithFlags(&s2, 1);
	failed += use_blocks(after, AFTER, 512, &big, 300u << 20, s2);
	printf("failed allocations: %ld\n", failed);
	long bad = 0;
	for (int i = 0; i < AFTER; i++) {
		live_remove(after[i]);
		bad += cudaFree(after[i]) != 0;
	}
	live_remove(big);
	bad += cudaFree(big) != 0;
	printf("failed frees after the reset: %ld\n", bad);
	printf("free of a pre-reset pointer: %d\n", (int)cudaFree(before[3]));
	report();
	return 0;
}
