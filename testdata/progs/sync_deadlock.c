/* A device synchronization the allocator makes must not hold a lock another thread's allocation needs
 * (run with FAKECUDA_SYNC_PROBE=1: inside cuCtxSynchronize and cuEventSynchronize the fake makes another
 * thread allocate and free, and waits for it). The program fills the 512-byte class with blocks it
 * launched on and freed, so the next allocation must order the device or grow; hands a block freed on a
 * non-blocking stream to cudaMalloc (a host wait under record --pool); allocates on device 1 and fills
 * device 0's class again (with two devices' pools, an ordering of the device); then synchronizes the
 * device itself. Prints the results and the safety report; a deadlock never ends. */
#include "safety.h"

#define FILL 1100

/* fill_class makes the 512-byte class full of freed blocks the program launched on: the next
 * allocation must order the device or grow. */
static long fill_class(void **v) {
	long failed = 0;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < FILL; i++) {
			failed += cudaMalloc(&v[i], 500) != 0;
			live_add(v[i], 500);
			fakecuda_launch(NULL, (uint64_t)(uintptr_t)v[i], 500, new_owner());
		}
		for (int i = 0; i < FILL; i++) {
			live_remove(v[i]);
			failed += cudaFree(v[i]) != 0;
		}
	}
	return failed;
}

/* use_one allocates a block of size with cudaMalloc and launches on it on the legacy stream. */
static long use_one(void **p, size_t size) {
	long failed = cudaMalloc(p, size) != 0;
	live_add(*p, size);
	fakecuda_launch(NULL, (uint64_t)(uintptr_t)*p, size, new_owner());
	return failed;
}

int main(void) {
	static void *v[FILL];
	void *w = NULL, *a = NULL, *b = NULL, *c = NULL;
	cudaSetDevice(0);
	long failed = fill_class(v) + use_one(&w, 500);
	/* A block freed on a non-blocking stream, then cudaMalloc of its size: a host wait for that stream. */
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, 1);
	failed += cudaMallocAsync(&a, 4000, s) != 0;
	fakecuda_launch(s, (uint64_t)(uintptr_t)a, 4000, new_owner());
	failed += cudaFreeAsync(a, s) != 0;
	failed += use_one(&b, 4000);
	/* A second device's pool, then device 0's full class again: an ordering of the device. */
	cudaSetDevice(1);
	failed += use_one(&c, 500);
	cudaSetDevice(0);
	failed += fill_class(v) + use_one(&w, 500);
	printf("failed calls: %ld\n", failed);
	printf("cudaDeviceSynchronize: %d\n", (int)cudaDeviceSynchronize());
	report();
	return 0;
}
