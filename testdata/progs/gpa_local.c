/* dlopens a driver library by path with RTLD_NOW | RTLD_LOCAL (argv[1]; default exported/libcuda.so.1
 * next to this program: the fake driver whose cuGetProcAddress hands out its exported functions),
 * dlsyms cuGetProcAddress_v2 from it, resolves cuMemAlloc, cuMemFree, cuMemAllocAsync and
 * cuMemFreeAsync through it and calls them: allocations of 1000 and 3000 bytes (the second on stream
 * 0x71), then their frees. Prints each result. Not linked with the fake libraries. Exits with 29. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
	char path[PATH_MAX], self[PATH_MAX];
	if (argc > 1) {
		snprintf(path, sizeof path, "%s", argv[1]);
	} else {
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		self[n > 0 ? n : 0] = 0;
		snprintf(path, sizeof path, "%s/exported/libcuda.so.1", dirname(self));
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	PFN_cuGetProcAddress_v2 gpa = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
	PFN_cuMemAlloc_v2 alloc = NULL;
	PFN_cuMemFree_v2 mfree = NULL;
	PFN_cuMemAllocAsync aasync = NULL;
	PFN_cuMemFreeAsync fasync = NULL;
	int r1 = gpa("cuMemAlloc", (void **)&alloc, 12000, 0, NULL);
	int r2 = gpa("cuMemFree", (void **)&mfree, 12000, 0, NULL);
	int r3 = gpa("cuMemAllocAsync", (void **)&aasync, 12000, 0, NULL);
	int r4 = gpa("cuMemFreeAsync", (void **)&fasync, 12000, 0, NULL);
	printf("cuGetProcAddress: %d %d %d %d\n", r1, r2, r3, r4);
	if (!alloc || !mfree || !aasync || !fasync)
		return 2;
	CUdeviceptr a = 0, b = 0;
	int r = alloc(&a, 1000);
	printf("cuMemAlloc(1000) = %d %#llx\n", r, a);
	r = aasync(&b, 3000, (CUstream)0x71);
	printf("cuMemAllocAsync(3000) = %d %#llx\n", r, b);
	r = fasync(b, (CUstream)0x71);
	printf("cuMemFreeAsync = %d\n", r);
	r = mfree(a);
	printf("cuMemFree = %d\n", r);
	return 29;
}
