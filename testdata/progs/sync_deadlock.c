/* A device synchronization the allocator makes must not hold a lock another thread's allocation needs
 * (run with FAKECUDA_SYNC_PROBE=1: inside cuCtxSynchronize and cuEventSynchronize the fake makes another
 * thread allocate and free, and waits for it). The program fills the 512-byte class with blocks it
 * launched on and freed, so the next allocation must order the device or grow; then synchronizes the
 * device itself. Prints the results and the safety report; a deadlock never ends. */
#include "safety.h"

#define FILL 1100

int main(void) {
	static void *v[FILL];
	long failed = 0;
	cudaSetDevice(0);
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
	void *w = NULL;
	failed += cudaMalloc(&w, 500) != 0;
	live_add(w, 500);
	fakecuda_launch(NULL, (uint64_t)(uintptr_t)w, 500, new_owner());
	printf("failed calls: %ld\n", failed);
	printf("cudaDeviceSynchronize: %d\n", (int)cudaDeviceSynchronize());
	report();
	return 0;
}
