/* Reaches the fake driver the way an nvcc default build (static cudart) does: dlopen libcuda.so.1,
 * dlsym cuGetProcAddress_v2, ask it for "cuGetProcAddress" itself, resolve everything through that.
 * Not linked with the fake libraries. Expected events: internal/intercept/shim_test.go. Exits with 11. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	PFN_cuGetProcAddress_v2 boot = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
	PFN_cuGetProcAddress_v2 gpa = 0;
	int st = -1;
	int r = boot("cuGetProcAddress", (void **)&gpa, 12080, 0, &st);
	printf("cuGetProcAddress(cuGetProcAddress) = %d status %d\n", r, st);
	PFN_cuMemAlloc_v2 alloc = 0, alloc_old = 0, alloc1 = 0;
	PFN_cuMemFree_v2 mfree = 0;
	PFN_cuMemAllocAsync aasync = 0, aasync_ptsz = 0;
	PFN_cuMemFreeAsync fasync = 0, fasync_ptsz = 0;
	PFN_cuMemCreate create = 0;
	PFN_cuMemRelease release = 0;
	gpa("cuMemAlloc", (void **)&alloc, 12080, 0, NULL);
	gpa("cuMemFree", (void **)&mfree, 12080, 0, NULL);
	gpa("cuMemAllocAsync", (void **)&aasync, 12080, 0, NULL);
	gpa("cuMemAllocAsync", (void **)&aasync_ptsz, 12080, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL);
	gpa("cuMemFreeAsync", (void **)&fasync, 12080, 0, NULL);
	gpa("cuMemFreeAsync", (void **)&fasync_ptsz, 12080, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL);
	gpa("cuMemCreate", (void **)&create, 12080, 0, NULL);
	gpa("cuMemRelease", (void **)&release, 12080, 0, NULL);
	r = gpa("cuMemAlloc", (void **)&alloc_old, 2000, 0, NULL);
	printf("cuGetProcAddress(cuMemAlloc, 2000) = %d %s\n", r, alloc_old ? "found" : "null");
	PFN_cuGetProcAddress_v1 gpa1 = 0;
	r = gpa("cuGetProcAddress", (void **)&gpa1, 11030, 0, NULL);
	printf("cuGetProcAddress(cuGetProcAddress, 11030) = %d\n", r);
	r = gpa1("cuMemAlloc", (void **)&alloc1, 11030, 0);
	printf("v1 cuGetProcAddress(cuMemAlloc) = %d\n", r);
	r = gpa("cuMemDoesNotExist", (void **)&alloc_old, 12080, 0, NULL);
	printf("cuGetProcAddress(cuMemDoesNotExist) = %d\n", r);

	CUdeviceptr p[5];
	for (int i = 0; i < 5; i++) {
		r = alloc(&p[i], (size_t)(i + 1) << 20);
		printf("cuMemAlloc(%d MiB) = %d %#llx\n", i + 1, r, p[i]);
	}
	for (int i = 4; i >= 0; i--) {
		r = mfree(p[i]);
		printf("cuMemFree = %d\n", r);
	}
	CUdeviceptr q = 0, s = 0, t = 0;
	r = aasync(&q, 4096, (CUstream)0x21); printf("cuMemAllocAsync(4096) = %d %#llx\n", r, q);
	r = aasync_ptsz(&s, 8192, (CUstream)0x22); printf("cuMemAllocAsync_ptsz(8192) = %d %#llx\n", r, s);
	r = fasync_ptsz(q, (CUstream)0x22); printf("cuMemFreeAsync_ptsz = %d\n", r);
	r = fasync(s, (CUstream)0x21); printf("cuMemFreeAsync = %d\n", r);
	r = alloc1(&t, 100); printf("v1-resolved cuMemAlloc(100) = %d %#llx\n", r, t);
	r = mfree(t); printf("cuMemFree = %d\n", r);
	CUmemAllocationProp prop = {0};
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CUmemGenericAllocationHandle hd = 0;
	r = create(&hd, 4u << 20, &prop, 0); printf("cuMemCreate(4 MiB) = %d %#llx\n", r, hd);
	r = release(hd); printf("cuMemRelease = %d\n", r);
	PFN_fakecuda_calls calls = (PFN_fakecuda_calls)dlsym(h, "fakecuda_calls");
	long exported = 0, via = 0;
	calls(&exported, &via);
	printf("driver calls: exported %ld, through proc address %ld\n", exported, via);
	return 11;
}
