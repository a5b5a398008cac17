/* Frees the allocator must refuse: a block freed twice (the second cudaFree returns 1) and cuMemFree_v2
 * of an address 256 bytes inside a live block (1); then 1,000 allocations of mixed sizes, none of which
 * may overlap a live block. Prints the first block's address (the pool's plan base under record
 * --pool: the fake's first allocation), each result, whether the fake still has an allocation holding a
 * live block, the frees of unknown and interior addresses the fake saw, and the safety report. */
#include "safety.h"

#define MANY 1000

int main(void) {
	void *a = NULL, *b = NULL;
	static void *v[MANY];
	cudaSetDevice(0);
	cudaMalloc(&a, 500); /* the pool's first class: its block is at the plan's base */
	printf("first block: %#llx\n", (unsigned long long)(uintptr_t)a);
	printf("free: %d\n", (int)cudaFree(a));
	printf("second free: %d\n", (int)cudaFree(a));
	cudaMalloc(&b, 4096);
	live_add(b, 4096);
	printf("cuMemFree_v2 inside a live block: %d\n", (int)cuMemFree_v2((CUdeviceptr)(uintptr_t)b + 256));
	long failed = 0;
	for (int i = 0; i < MANY; i++) {
		size_t n = (size_t)(i % 7 == 0 ? 1u << 20 : 256u << (i % 5)) + (size_t)(i % 3) * 8;
		failed += cudaMalloc(&v[i], n) != 0;
		live_add(v[i], n);
		fakecuda_launch(NULL, (uint64_t)(uintptr_t)v[i], n, new_owner());
	}
	printf("failed allocations: %ld\n", failed);
	CUdeviceptr base = 0;
	size_t size = 0;
	printf("fake allocation holding a live block: %d\n",
	       (int)cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)b));
	printf("unknown frees: %ld\ninterior frees: %ld\n", fakecuda_unknown_frees(), fakecuda_interior_frees());
	report();
	return 0;
}
