/* cuMemGetAddressRange_v2 and cudaMemGetInfo of a 1 MiB block: the range containing p + 100 is the
 * block itself (base p, size 1 MiB), and the free memory cudaMemGetInfo reports after it can be had:
 * one cudaMalloc of all of it but 4 MiB succeeds (record --pool counts its whole reservation as used,
 * as PyTorch's caching allocator counts its cache, so that what a program measures is there). Run with
 * FAKECUDA_CAPACITY. Prints each check. */
#include "safety.h"

int main(void) {
	void *p = NULL;
	size_t free0 = 0, free1 = 0, total = 0;
	cudaSetDevice(0);
	cudaMemGetInfo(&free0, &total);
	printf("cudaMalloc: %d\n", (int)cudaMalloc(&p, 1u << 20));
	cudaMemGetInfo(&free1, &total);
	CUdeviceptr base = 0;
	size_t size = 0;
	CUresult r = cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)p + 100);
	printf("cuMemGetAddressRange_v2: %d\n", (int)r);
	printf("base is the block: %s\nsize: %zu\n", base == (CUdeviceptr)(uintptr_t)p ? "yes" : "no", size);
	printf("free dropped: %s\n", free0 > free1 ? "yes" : "no");
	void *all = NULL;
	printf("cudaMalloc of the free memory but 4 MiB: %d\n", (int)cudaMalloc(&all, free1 - (4u << 20)));
	printf("cudaFree of it: %d\n", (int)cudaFree(all));
	report();
	return 0;
}
