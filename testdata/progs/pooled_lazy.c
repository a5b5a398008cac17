/* record --pool and a thread's first runtime call (run with FAKECUDA_LAZY_CONTEXT=1): a new thread
 * has no current context until the runtime binds it to device 0 inside its first call, so the shim
 * cannot ask the driver for the device before that call. Its cudaMalloc is still served, from
 * device 0's pool, which the main thread made. Prints whether the new thread's block came from the
 * pool (it is the block the main thread freed and synchronized), exits 0. */
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>

static void *first, *second;

static void *worker(void *arg) {
	(void)arg;
	cudaMalloc(&second, 4000);
	cudaFree(second);
	return NULL;
}

int main(void) {
	cudaSetDevice(0);
	cudaMalloc(&first, 4000);
	cudaFree(first);
	cudaDeviceSynchronize();
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	pthread_join(t, NULL);
	printf("new thread's block from the pool: %s\n", first == second ? "yes" : "no");
	return 0;
}
