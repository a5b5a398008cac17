/* A device synchronization racing with frees (run with FAKECUDA_SYNC_DELAY_US set, long enough for
 * the workers' few calls): thread A calls cudaDeviceSynchronize; while it waits, WORKERS threads each
 * launch on their blocks on one non-blocking stream and cudaFree them; once it returned, they allocate
 * the same sizes again and launch on the new blocks (new owners) on a second non-blocking stream.
 * CUDA's cudaFree waits for the device, so no new work may overlap old work still pending. Prints failures, then the safety report (hazards 0, misuses 0, overlaps 0). */
#include "safety.h"

#include <sched.h>

#define WORKERS 4
#define BLOCKS 8

static pthread_barrier_t start;
static long failures;
static const size_t sizes[BLOCKS] = {500, 4000, 4096, 60000, 65536, 1u << 20, 3u << 20, 700};

static int sync_returned;

/* syncer is thread A: one device synchronization once the workers are ready. */
static void *syncer(void *arg) {
	(void)arg;
	cudaSetDevice(0);
	pthread_barrier_wait(&start);
	if (cudaDeviceSynchronize() != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&sync_returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* take allocates the blocks and launches on them on s (new owners). */
static long take(void **p, cudaStream_t s) {
	long bad = 0;
	for (int i = 0; i < BLOCKS; i++) {
		bad += cudaMalloc(&p[i], sizes[i]) != 0;
		live_add(p[i], sizes[i]);
		fakecuda_launch(s, (uint64_t)(uintptr_t)p[i], sizes[i], new_owner());
	}
	return bad;
}

/* give frees the blocks with cudaFree. */
static long give(void **p) {
	long bad = 0;
	for (int i = 0; i < BLOCKS; i++) {
		live_remove(p[i]);
		bad += cudaFree(p[i]) != 0;
	}
	return bad;
}

/* worker: blocks used and freed before the synchronization; then, once the synchronization took its
 * snapshot (fakecuda_syncs_waiting) and before it returns, blocks used on sa and freed; once it
 * returned, the same sizes again, used on sb: work the synchronization did not wait for is still
 * pending on sa. Two more rounds follow. */
static void *worker(void *arg) {
	(void)arg;
	void *p[BLOCKS];
	long bad = 0;
	cudaSetDevice(0);
	cudaStream_t sa, sb;
	cudaStreamCreateWithFlags(&sa, 1);
	cudaStreamCreateWithFlags(&sb, 1);
	bad += take(p, sa) + give(p);
	pthread_barrier_wait(&start);
	while (fakecuda_syncs_waiting() == 0 && !__atomic_load_n(&sync_returned, __ATOMIC_ACQUIRE))
		sched_yield();
	bad += take(p, sa) + give(p);
	while (!__atomic_load_n(&sync_returned, __ATOMIC_ACQUIRE))
		sched_yield();
	bad += take(p, sb) + give(p);
	for (int r = 0; r < 2; r++)
		bad += take(p, sa) + give(p) + take(p, sb) + give(p);
	__atomic_fetch_add(&failures, bad, __ATOMIC_RELAXED);
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
