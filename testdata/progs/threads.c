/* 16 threads allocate and free at once through the runtime (and so the nested driver), started
 * together at a barrier. Usage: threads [threads] [iterations]. Exits with 17. */
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t barrier;
static int iterations = 1000;
static long failures;

static void *worker(void *arg) {
	int t = (int)(intptr_t)arg;
	pthread_barrier_wait(&barrier);
	for (int i = 0; i < iterations; i++) {
		void *p = NULL;
		size_t n = 256u * (unsigned)(t + 1) + (size_t)(i % 3);
		if (cudaMalloc(&p, n) != 0 || cudaFree(p) != 0)
			__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(int argc, char **argv) {
	int threads = argc > 1 ? atoi(argv[1]) : 16;
	if (argc > 2)
		iterations = atoi(argv[2]);
	pthread_t th[256];
	if (threads < 1 || threads > 256)
		return 2;
	pthread_barrier_init(&barrier, NULL, (unsigned)threads);
	for (int t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	printf("threads %d, iterations %d, failures %ld\n", threads, iterations, failures);
	return 17;
}
