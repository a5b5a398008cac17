/* Reaches the fake driver the way CuPy does: dlopen libcuda.so.1 and dlsym each function by its
 * versioned name. Not linked with the fake libraries. Exits with 13. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>

int main(void) {
	printf("before dlopen: cudaMalloc %s, cuMemAlloc_v2 %s\n", dlsym(RTLD_DEFAULT, "cudaMalloc") ? "visible" : "absent",
	       dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "visible" : "absent");
	/* RTLD_NEXT lookups are answered as if the program asked glibc itself. */
	printf("RTLD_NEXT malloc: %s\n", dlsym(RTLD_NEXT, "malloc") == dlsym(RTLD_DEFAULT, "malloc") ? "same as default" : "other");
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	printf("after dlopen: cuMemAlloc_v2 %s\n", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "visible" : "absent");
	PFN_cuMemAlloc_v2 alloc = (PFN_cuMemAlloc_v2)dlsym(h, "cuMemAlloc_v2");
	PFN_cuMemAlloc_v2 alloc_again = (PFN_cuMemAlloc_v2)dlsym(h, "cuMemAlloc_v2");
	PFN_cuMemFree_v2 mfree = (PFN_cuMemFree_v2)dlsym(h, "cuMemFree_v2");
	PFN_cuMemAllocAsync aasync = (PFN_cuMemAllocAsync)dlsym(h, "cuMemAllocAsync");
	PFN_cuMemFreeAsync fasync = (PFN_cuMemFreeAsync)dlsym(h, "cuMemFreeAsync");
	printf("same pointer twice: %s\n", alloc == alloc_again ? "yes" : "no");
	printf("missing symbol: %s\n", dlsym(h, "cuMemNoSuchThing") ? "found" : "null");
	CUdeviceptr p[3];
	for (int i = 0; i < 3; i++) {
		int r = alloc(&p[i], 1000u * (unsigned)(i + 1));
		printf("cuMemAlloc_v2(%d) = %d %#llx\n", 1000 * (i + 1), r, p[i]);
	}
	CUdeviceptr q = 0;
	int r = aasync(&q, 64, (CUstream)0x31); printf("cuMemAllocAsync(64) = %d %#llx\n", r, q);
	r = fasync(q, (CUstream)0x31); printf("cuMemFreeAsync = %d\n", r);
	for (int i = 0; i < 3; i++) {
		r = mfree(p[i]);
		printf("cuMemFree_v2 = %d\n", r);
	}
	PFN_fakecuda_calls calls = (PFN_fakecuda_calls)dlsym(h, "fakecuda_calls");
	long exported = 0, via = 0;
	calls(&exported, &via);
	printf("driver calls: exported %ld, through proc address %ld\n", exported, via);
	return 13;
}
