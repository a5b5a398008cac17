/* Another LD_PRELOAD interposer, as profilers and debuggers bring their own: exports cuMemAlloc_v2 and
 * cuMemFree_v2, counts its calls and forwards them to the next definition, which it resolves with
 * dlsym(RTLD_NEXT, ...) in its constructor (before a shim loaded ahead of it has run its own).
 * interposer_calls(&allocs, &frees) reports the counts; a destructor prints them on stderr:
 * "interposer: cuMemAlloc_v2 N, cuMemFree_v2 M". Build: cc -shared -fPIC -o libinterposer.so interposer.c -ldl */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>

static PFN_cuMemAlloc_v2 next_alloc;
static PFN_cuMemFree_v2 next_free;
static long allocs, frees;

__attribute__((constructor)) static void interposer_init(void) {
	next_alloc = (PFN_cuMemAlloc_v2)dlsym(RTLD_NEXT, "cuMemAlloc_v2");
	next_free = (PFN_cuMemFree_v2)dlsym(RTLD_NEXT, "cuMemFree_v2");
}

__attribute__((destructor)) static void interposer_fini(void) {
	fprintf(stderr, "interposer: cuMemAlloc_v2 %ld, cuMemFree_v2 %ld\n", allocs, frees);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	__atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);
	return next_alloc ? next_alloc(p, n) : CUDA_ERROR_NOT_FOUND;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	__atomic_fetch_add(&frees, 1, __ATOMIC_RELAXED);
	return next_free ? next_free(p) : CUDA_ERROR_NOT_FOUND;
}

void interposer_calls(long *a, long *f) {
	*a = allocs;
	*f = frees;
}
