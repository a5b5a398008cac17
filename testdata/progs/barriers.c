/* How `record --pool` orders the device before it reuses blocks freed with cudaFree, on the fake
 * driver. While the program made no non-blocking stream, a barrier on the legacy stream (an event
 * recorded on it) does, and the host does not wait; while a blocking stream captures a graph the
 * pool neither synchronizes nor records a barrier (either would break the capture) but grows; a
 * second stream that is blocking costs a barrier; once the program made a non-blocking stream an
 * ordering is a join barrier (an event on each non-blocking stream, the legacy stream waiting for
 * them, the barrier, each non-blocking stream waiting for it), no ordering while a non-blocking
 * stream captures (the pool grows), and a join that waits for an event recorded on a non-blocking
 * stream when it was destroyed; a non-blocking stream made after a barrier waits for it (it does not
 * wait for the legacy stream, and blocks were reused after the barrier). Prints one line per fact (counts since the line before), exits 0.
 * With sizeclass.json's pool: its 512-byte class has 1,024 slots, its 1 MiB class 16; the first
 * line's driver call is the pool's plan. */
#include "fakecuda.h"

#include <stdio.h>

#define SLOTS 1024

static void *v[SLOTS];

/* changes prints the synchronizations, barriers and driver calls since its last call (what NULL only
 * takes as the start). */
static void changes(const char *what) {
	static long s0, b0, a0;
	long e, g;
	fakecuda_calls(&e, &g);
	long s = fakecuda_syncs(), b = fakecuda_barriers(), a = e + g;
	if (what != NULL)
		printf("%s: syncs %ld, barriers %ld, driver calls %ld\n", what, s - s0, b - b0, a - a0);
	s0 = s, b0 = b, a0 = a;
}

/* events prints the events recorded on streams other than the legacy one and the streams made to
 * wait since its last call (what NULL only takes as the start). */
static void events(const char *what) {
	static long r0, w0;
	long r, w, h;
	fakecuda_events(&r, &w, &h);
	if (what != NULL)
		printf("%s: events %ld, stream waits %ld\n", what, r - r0, w - w0);
	r0 = r, w0 = w;
}

/* full_mib makes every slot of the 1 MiB class pending: it allocates its n free ones and frees them
 * with the live block keep (when not NULL), then starts the counts. */
static void full_mib(int n, void *keep) {
	static void *m[16];
	for (int i = 0; i < n; i++)
		cudaMalloc(&m[i], 1 << 20);
	for (int i = 0; i < n; i++)
		cudaFree(m[i]);
	if (keep != NULL)
		cudaFree(keep);
	changes(NULL);
	events(NULL);
}

/* fill_and_free allocates the class's slots from first on, then frees all of them: every slot pending. */
static void fill_and_free(int first) {
	for (int i = first; i < SLOTS; i++)
		cudaMalloc(&v[i], 500);
	for (int i = 0; i < SLOTS; i++)
		cudaFree(v[i]);
}

int main(void) {
	cudaSetDevice(0);
	void *w, *x, *a, *b;
	changes(NULL);
	fill_and_free(0);
	cudaMalloc(&w, 500);
	changes("a full class with frees pending");
	v[0] = w;
	fill_and_free(1);
	fakecuda_capture(1);
	cudaMalloc(&x, 500);
	changes("the same while a blocking stream captures");
	fakecuda_capture(0);
	cudaFree(x);
	cudaStream_t blocking, apart;
	cudaStreamCreateWithFlags(&blocking, 0);
	cudaMallocAsync(&a, 4000, blocking);
	changes("a second stream, blocking");
	events(NULL);
	cudaStreamCreateWithFlags(&apart, 1 /* cudaStreamNonBlocking */);
	events("  a non-blocking stream made after barriers waits for the last");
	cudaStreamDestroy(blocking);
	cudaMallocAsync(&b, 4000, apart);
	changes("a non-blocking stream made, a stream destroyed");
	cudaFreeAsync(a, apart);
	cudaFreeAsync(b, apart);
	void *mib;
	full_mib(16, NULL);
	cudaMalloc(&mib, 1 << 20);
	changes("a full class, one non-blocking stream");
	events("  the join");
	full_mib(15, mib);
	fakecuda_capture(2);
	cudaMalloc(&x, 1 << 20);
	changes("the same while a non-blocking stream captures");
	fakecuda_capture(0);
	events(NULL);
	cudaStreamDestroy(apart);
	cudaMallocAsync(&a, 4000, 0);
	changes("the non-blocking stream destroyed, then a stream-ordered call");
	events("  the join");
	cudaFreeAsync(a, 0);
	cudaFree(x);
	return 0;
}
