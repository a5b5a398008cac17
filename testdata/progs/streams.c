/* What `record --pool` does with stream-ordered calls, on the fake driver (where work on a stream
 * completes only when the program waits for it). Device 0: a block freed on the only stream is
 * reused at once on it, with no synchronization and no event; the second stream makes the pool
 * order the device once; from then on every stream-ordered free records an event, a block freed on one
 * stream and handed out on another makes that stream wait for the event (on the GPU, not the host),
 * a block handed out on the stream that freed it waits for nothing, and one handed out by cudaMalloc
 * makes the host wait. After cudaDeviceSynchronize nothing waits. Device 1: destroying the only
 * stream makes the pool synchronize once before its handle is used again. Device 2: the per-thread
 * default streams of two threads are two streams. The program makes a non-blocking stream first, so the
 * pool's ordering on device 0 is a join barrier (barriers.c has the details), and once two devices
 * have pools, a synchronization of the device. Prints one line per fact (counts since the line
 * before: the last free of each part is counted in the next), exits 0. */
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>

#define S1 ((cudaStream_t)0x1000)
#define S2 ((cudaStream_t)0x2000)

static long recorded, stream_waits, host_waits;

/* changes prints the synchronizations, events recorded and waits since its last call. */
static void changes(const char *what) {
	static long syncs0, rec0, sw0, hw0;
	long syncs = fakecuda_syncs();
	fakecuda_events(&recorded, &stream_waits, &host_waits);
	printf("%s: syncs %ld, events %ld, stream waits %ld, host waits %ld\n", what, syncs - syncs0,
	       recorded - rec0, stream_waits - sw0, host_waits - hw0);
	syncs0 = syncs, rec0 = recorded, sw0 = stream_waits, hw0 = host_waits;
}

static void *per_thread(void *arg) {
	CUdeviceptr *p = arg;
	cuCtxSetCurrent((CUcontext)(intptr_t)3); /* device 2 */
	cuMemAllocAsync_ptsz(p, 4000, NULL);
	return NULL;
}

int main(void) {
	void *a, *b, *c, *d, *e, *f;
	cudaSetDevice(0);
	cudaStream_t apart; /* runs apart from the legacy stream: the orderings join it */
	cudaStreamCreateWithFlags(&apart, 1 /* cudaStreamNonBlocking */);
	changes("start");
	cudaMallocAsync(&a, 4000, S1);
	cudaFreeAsync(a, S1);
	cudaMallocAsync(&b, 4000, S1);
	printf("reused at once on the same stream: %s\n", a == b ? "yes" : "no");
	changes("one stream");
	cudaMallocAsync(&c, 4000, S2);
	changes("a second stream");
	cudaFreeAsync(b, S1);
	cudaMallocAsync(&d, 4000, S2);
	printf("reused on another stream: %s\n", d == b ? "yes" : "no");
	changes("freed on S1, handed out on S2");
	cudaFreeAsync(d, S2);
	cudaMallocAsync(&e, 4000, S2);
	printf("reused on the same stream: %s\n", e == d ? "yes" : "no");
	changes("freed on S2, handed out on S2");
	cudaFreeAsync(e, S2);
	cudaMalloc(&f, 4000);
	printf("reused by cudaMalloc: %s\n", f == e ? "yes" : "no");
	changes("freed on S2, handed out by cudaMalloc");
	cudaFree(f);
	cudaFreeAsync(c, S2);
	cudaDeviceSynchronize();
	changes("device synchronized");
	cudaMallocAsync(&a, 4000, S1);
	changes("after the synchronization");
	cudaFreeAsync(a, S1);

	cudaSetDevice(1);
	cudaMallocAsync(&a, 4000, S1);
	cudaFreeAsync(a, S1);
	changes("device 1, one stream");
	cudaStreamDestroy(S1);
	cudaMallocAsync(&b, 4000, S1);
	printf("device 1 reused after the stream was destroyed: %s\n", a == b ? "yes" : "no");
	changes("device 1, a destroyed stream's handle again");
	cudaFreeAsync(b, S1);

	CUdeviceptr p1 = 0, p2 = 0;
	pthread_t t;
	pthread_create(&t, NULL, per_thread, &p1);
	pthread_join(t, NULL);
	changes("device 2, one thread's default stream");
	pthread_create(&t, NULL, per_thread, &p2);
	pthread_join(t, NULL);
	changes("device 2, another thread's default stream");
	return 0;
}
