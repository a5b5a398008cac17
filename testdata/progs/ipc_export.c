/* An IPC export under record --pool (testdata/progs): a served block of 4,000 bytes, then a block of
 * 12,345 bytes exported with cudaIpcGetMemHandle. The pool refuses a handle of its own blocks (1);
 * with pool.json's pass_through_sizes naming 12,345 the block is CUDA's and the export works (0).
 * Without the pool the export works too, and the recording notes the exported size. Prints each
 * result, exits 0. */
#include "fakecuda.h"

#include <stdio.h>

int main(void) {
	void *a = NULL, *x = NULL;
	char handle[64];
	printf("cudaMalloc 4000: %d\n", (int)cudaMalloc(&a, 4000));
	printf("cudaMalloc 12345: %d\n", (int)cudaMalloc(&x, 12345));
	printf("cudaIpcGetMemHandle: %d\n", (int)cudaIpcGetMemHandle(handle, x));
	printf("cudaFree: %d %d\n", (int)cudaFree(x), (int)cudaFree(a));
	return 0;
}
