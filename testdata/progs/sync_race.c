/* A device synchronization racing with frees (run with FAKECUDA_SYNC_DELAY_US set): thread A calls
 * cudaDeviceSynchronize while WORKERS threads each launch on their blocks on one non-blocking stream,
 * cudaFree them, allocate the same sizes again and launch on the new blocks (new owners) on a second
 * non-blocking stream. CUDA's cudaFree waits for the device, so no new work may overlap old work still
 * pending. Prints failures, then the safety report (hazards 0, misuses 0, overlaps 0). */
#include "safety.h"

#include <unistd.h>

#define WORKERS 4
#define BLOCKS 8

static pthread_barrier_t start;
static long failures;
static const size_t sizes[BLOCKS] = {500, 4000, 4096, 60000, 65536, 1u << 20, 3u << 20, 700};

/* syncer is thread A: one device synchronization once the workers are ready. */
static void *syncer(void *arg) {
	(void)arg;
	cudaSetDevice(0);
	pthread_barrier_wait(&start);
	if (cudaDeviceSynchronize() != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* one_round allocates, launches on sa, frees, reallocates and launches on sb. */
static void one_round(cudaStream_t sa, cudaStream_t sb) {
	void *p[BLOCKS];
	long bad = 0;
	for (int i = 0; i < BLOCKS; i++) {
		bad += cudaMalloc(&p[i], sizes[i]) != 0;
		live_add(p[i], sizes[i]);
		fakecuda_launch(sa, (uint64_t)(uintptr_t)p[i], sizes[i], new_owner());
	}
	for (int i = 0; i < BLOCKS; i++) {
		live_remove(p[i]);
		bad += cudaFree(p[i]) != 0;
	}
	for (int i = 0; i < BLOCKS; i++) {
		bad += cudaMalloc(&p[i], sizes[i]) != 0;
		live_add(p[i], sizes[i]);
		fakecuda_launch(sb, (uint64_t)(uintptr_t)p[i], sizes[i], new_owner());
	}
	for (int i = 0; i < BLOCKS; i++) {
		live_remove(p[i]);
		bad += cudaFree(p[i]) != 0;
	}
	__atomic_fetch_add(&failures, bad, __ATOMIC_RELAXED);
}

static void *worker(void *arg) {
	(void)arg;
	cudaSetDevice(0);
	cudaStream_t sa, sb;
	cudaStreamCreateWithFlags(&sa, 1);
	cudaStreamCreateWithFlags(&sb, 1);
	one_round(sa, sb); /* before the synchronization */
	pthread_barrier_wait(&start);
	for (int r = 0; r < 4; r++) /* while it runs (and after) */
		one_round(sa, sb);
	return NULL;
}

int main(void) {
	pthread_t t[WORKERS + 1];
	cudaSetDevice(0);
	pthread_barrier_init(&start, NULL, WORKERS + 1);
	pthread_create(&t[0], NULL, syncer, NULL);
	for (int i = 1; i <= WORKERS; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (int i = 0; i <= WORKERS; i++)
		pthread_join(t[i], NULL);
	printf("failures: %ld\n", failures);
	report();
	return 0;
}
