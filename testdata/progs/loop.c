/* Allocates and frees in a loop on the main thread: pair i is an allocation of 512 * (i % 8 + 1)
 * bytes and its free, through the runtime (cudaMalloc/cudaFree, the default) or the driver
 * (cuMemAlloc_v2/cuMemFree_v2, plain symbols). Usage: loop [pairs] [runtime|driver] (default
 * 1000 runtime). Prints "loop: PAIRS pairs through the MODE, F failures" and exits with 0. */
#include "fakecuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
	long pairs = argc > 1 ? atol(argv[1]) : 1000, failures = 0;
	int driver = argc > 2 && strcmp(argv[2], "driver") == 0;
	for (long i = 0; i < pairs; i++) {
		size_t n = 512u * (size_t)(i % 8 + 1);
		if (driver) {
			CUdeviceptr p = 0;
			failures += cuMemAlloc_v2(&p, n) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS;
		} else {
			void *p = NULL;
			failures += cudaMalloc(&p, n) != 0 || cudaFree(p) != 0;
		}
	}
	printf("loop: %ld pairs through the %s, %ld failures\n", pairs, driver ? "driver" : "runtime", failures);
	return 0;
}
