/* record --pool under contention: THREADS threads (default 64) each hold BLOCKS blocks (default 32)
 * of sizes across the pool's classes and its arena, ROUNDS times (default 20); between rounds every
 * live block of every thread is checked against every other for overlap, and every block is freed
 * (cudaFree: pending until thread 0 synchronizes the device, every other round). Prints the overlaps
 * found, the calls that failed, and the calls made (all served by the pool or CUDA), exits 0.
 *   pooled_threads [THREADS [ROUNDS [BLOCKS]]] */
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int nthreads = 64, rounds = 20, nblocks = 32;
static uint64_t *addrs, *sizes;
static long failed, calls;
static pthread_barrier_t barrier;

static uint64_t size_of(int t, int r, int i) {
	if ((t + r + i) % 16 == 0)
		return (uint64_t)(1 + (t + i) % 5) << 20; /* 1-5 MiB: beyond the classes */
	return 256 * (uint64_t)(1 + (t * 7 + r * 3 + i * 11) % 48);
}

static int by_addr(const void *a, const void *b) {
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* overlaps counts the pairs of neighbouring live blocks that overlap. */
static long overlaps(void) {
	long n = (long)nthreads * nblocks, bad = 0;
	uint64_t (*pairs)[2] = malloc(sizeof *pairs * (size_t)n);
	for (long i = 0; i < n; i++)
		pairs[i][0] = addrs[i], pairs[i][1] = sizes[i];
	qsort(pairs, (size_t)n, sizeof *pairs, by_addr);
	for (long i = 1; i < n; i++)
		if (pairs[i - 1][0] + pairs[i - 1][1] > pairs[i][0])
			bad++;
	free(pairs);
	return bad;
}

static void *worker(void *arg) {
	int t = (int)(intptr_t)arg;
	long bad = 0, n = 0;
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < nblocks; i++) {
			void *p = NULL;
			long k = (long)t * nblocks + i;
			sizes[k] = size_of(t, r, i);
			bad += cudaMalloc(&p, sizes[k]) != 0, n++;
			addrs[k] = (uint64_t)(uintptr_t)p;
		}
		pthread_barrier_wait(&barrier);
		if (t == 0)
			printf("round %d overlaps: %ld\n", r, overlaps());
		pthread_barrier_wait(&barrier);
		for (int i = 0; i < nblocks; i++)
			bad += cudaFree((void *)(uintptr_t)addrs[(long)t * nblocks + i]) != 0, n++;
		if (t == 0 && r % 2 == 1)
			bad += cudaDeviceSynchronize() != 0;
		pthread_barrier_wait(&barrier);
	}
	__atomic_add_fetch(&failed, bad, __ATOMIC_RELAXED);
	__atomic_add_fetch(&calls, n, __ATOMIC_RELAXED);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc > 1)
		nthreads = atoi(argv[1]);
	if (argc > 2)
		rounds = atoi(argv[2]);
	if (argc > 3)
		nblocks = atoi(argv[3]);
	addrs = calloc((size_t)nthreads * nblocks, sizeof *addrs);
	sizes = calloc((size_t)nthreads * nblocks, sizeof *sizes);
	pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
	pthread_t *th = malloc(sizeof *th * (size_t)nthreads);
	cudaSetDevice(0);
	for (int t = 0; t < nthreads; t++)
		pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	printf("failed calls: %ld\ncalls: %ld\n", failed, calls);
	return 0;
}
