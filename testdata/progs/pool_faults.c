/* record --pool's requests that go to CUDA (run with FAKECUDA_LAZY_CONTEXT=1): the main thread makes
 * three cudaMalloc/cudaFree pairs on device 0 (served by the pool, or passed to CUDA when its pool
 * cannot be made), then a thread without a current context makes two cuMemAlloc_v2/cuMemFree_v2
 * pairs, which the shim cannot place on a device (passed: no context). Prints the results, exits 0. */
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>

static int driver_results;

static void *no_context(void *arg) {
	(void)arg;
	for (int i = 0; i < 2; i++) {
		CUdeviceptr p = 0;
		driver_results |= cuMemAlloc_v2(&p, 8192) | cuMemFree_v2(p);
	}
	return NULL;
}

int main(void) {
	int runtime_results = 0;
	cudaSetDevice(0);
	for (int i = 0; i < 3; i++) {
		void *p = NULL;
		runtime_results |= cudaMalloc(&p, 4000) | cudaFree(p);
	}
	pthread_t t;
	pthread_create(&t, NULL, no_context, NULL);
	pthread_join(t, NULL);
	printf("runtime calls: %d, driver calls without a context: %d\n", runtime_results, driver_results);
	return 0;
}
