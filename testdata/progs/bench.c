/* Times alloc/free pairs of cuMemAlloc_v2/cuMemFree_v2 (plain symbols) on the fake driver.
 * Usage: bench threads pairs_per_thread. Prints the median ns per call over batches of 1000 pairs
 * (thread 0), the calls per second of all threads (wall clock) and thread 0's calls per second of its
 * own CPU time (unaffected by other processes on a busy machine). */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCH 1000

static long pairs;
static pthread_barrier_t barrier;
static double *batch_ns;
static long nbatches;

static double cpu_ns;

static double thread_cpu(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *worker(void *arg) {
	int t = (int)(intptr_t)arg;
	pthread_barrier_wait(&barrier);
	double c0 = thread_cpu();
	for (long b = 0; b < pairs / BATCH; b++) {
		double t0 = now();
		for (int i = 0; i < BATCH; i++) {
			CUdeviceptr p;
			cuMemAlloc_v2(&p, 4096);
			cuMemFree_v2(p);
		}
		if (t == 0)
			batch_ns[b] = (now() - t0) / (2.0 * BATCH);
	}
	if (t == 0)
		cpu_ns = thread_cpu() - c0;
	return NULL;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	pairs = argc > 2 ? atol(argv[2]) : 1000000;
	if (pairs < BATCH)
		pairs = BATCH;
	nbatches = pairs / BATCH;
	batch_ns = calloc((size_t)nbatches, sizeof(double));
	pthread_t th[64];
	pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
	for (int t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
	pthread_barrier_wait(&barrier);
	double t0 = now();
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	double total = now() - t0;
	qsort(batch_ns, (size_t)nbatches, sizeof(double), cmp);
	double calls = 2.0 * (double)(nbatches * BATCH) * threads;
	printf("median_ns_per_call %.2f calls_per_second %.0f thread0_calls_per_cpu_second %.0f\n", batch_ns[nbatches / 2],
	       calls / (total / 1e9), 2.0 * (double)(nbatches * BATCH) / (cpu_ns / 1e9));
	return 0;
}
