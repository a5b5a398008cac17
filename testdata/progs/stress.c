/* A seeded random mix on 64 threads over two devices (run with FAKECUDA_DEVICES=2). Usage: stress SEED
 * OPS. Each thread (device = thread number % 2) holds up to 16 blocks: cudaMalloc/cudaFree, and
 * cudaMallocAsync/cudaFreeAsync on its blocking, non-blocking and per-thread streams; it launches on
 * every block it holds (a cudaMalloc block on any of its streams, a stream-ordered one on its own
 * stream), synchronizes the device, a stream or an event, and now and then captures a graph on a
 * private non-blocking stream (thread-local mode). Half way, all threads free their blocks, meet at a
 * barrier, thread 0 resets both devices (cudaDeviceReset), and after a second barrier each makes new
 * streams. Prints the seed, op count, failed calls of each kind and the safety report (0 hazards, 0 overlaps). */
#include "safety.h"

#include <string.h>

#define THREADS 64
#define HOLD 16
#define PER_THREAD_STREAM ((cudaStream_t)0x2)

enum { F_MALLOC, F_FREE, F_MALLOC_ASYNC, F_FREE_ASYNC, F_SYNC, F_CAPTURE, F_SETUP, F_KINDS };
static const char *const failure_names[F_KINDS] = {"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
						   "synchronizations", "captures", "streams, events and resets"};

struct block { void *p; size_t size; cudaStream_t s; int async; uint64_t owner; };
struct thread { int id, device; uint64_t rng; cudaStream_t blocking, apart, capture; CUevent ev;
	struct block held[HOLD]; int n; long failed[F_KINDS]; };

static long ops;
static pthread_barrier_t meet;

static uint64_t next_rand(struct thread *t) {
	t->rng ^= t->rng << 13, t->rng ^= t->rng >> 7, t->rng ^= t->rng << 17;
	return t->rng;
}

/* pick_stream is one of the thread's streams (legacy, per-thread, blocking, non-blocking). */
static cudaStream_t pick_stream(struct thread *t) {
	cudaStream_t all[4] = {NULL, PER_THREAD_STREAM, t->blocking, t->apart};
	return all[next_rand(t) % 4];
}

static void make_streams(struct thread *t) {
	cudaSetDevice(t->device);
	t->failed[F_SETUP] += cudaStreamCreateWithFlags(&t->blocking, 0) != 0;
	t->failed[F_SETUP] += cudaStreamCreateWithFlags(&t->apart, 1) != 0;
	t->failed[F_SETUP] += cudaStreamCreateWithFlags(&t->capture, 1) != 0;
	t->failed[F_SETUP] += cuEventCreate(&t->ev, 0) != 0;
}

static void launch(struct block *b, cudaStream_t s) {
	fakecuda_launch(s, (uint64_t)(uintptr_t)b->p, b->size, b->owner);
}

static void take(struct thread *t, int async) {
	struct block *b = &t->held[t->n];
	b->size = (size_t)(256u << (next_rand(t) % 13)) + (size_t)(next_rand(t) % 4) * 512;
	b->async = async, b->s = pick_stream(t);
	int r = async ? cudaMallocAsync(&b->p, b->size, b->s) : cudaMalloc(&b->p, b->size);
	if (r != 0) {
		t->failed[async ? F_MALLOC_ASYNC : F_MALLOC]++;
		return;
	}
	b->owner = new_owner();
	live_add(b->p, b->size);
	launch(b, async ? b->s : pick_stream(t));
	t->n++;
}

static void give(struct thread *t, int i) {
	struct block *b = &t->held[i];
	live_remove(b->p);
	t->failed[b->async ? F_FREE_ASYNC : F_FREE] += (b->async ? cudaFreeAsync(b->p, b->s) : cudaFree(b->p)) != 0;
	t->held[i] = t->held[--t->n];
}

static void capture(struct thread *t) {
	void *p = NULL, *g = NULL;
	long *f = &t->failed[F_CAPTURE];
	*f += cudaStreamBeginCapture(t->capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != 0;
	*f += cudaMallocAsync(&p, 4096, t->capture) != 0;
	fakecuda_launch(t->capture, (uint64_t)(uintptr_t)p, 4096, new_owner());
	*f += cudaFreeAsync(p, t->capture) != 0;
	*f += cudaStreamEndCapture(t->capture, &g) != 0;
}

static void sync_something(struct thread *t) {
	long *f = &t->failed[F_SYNC];
	switch (next_rand(t) % 3) {
	case 0: *f += cudaDeviceSynchronize() != 0; break;
	case 1: *f += cuStreamSynchronize(pick_stream(t)) != 0; break;
	default:
		*f += cuEventRecord(t->ev, pick_stream(t)) != 0;
		*f += cuEventSynchronize(t->ev) != 0;
	}
}

static void one_op(struct thread *t) {
	unsigned k = (unsigned)(next_rand(t) % 100);
	if (k < 30 && t->n < HOLD)
		take(t, k < 15);
	else if (k < 60 && t->n > 0)
		give(t, (int)(next_rand(t) % (uint64_t)t->n));
	else if (k < 85)
		for (int i = 0; i < t->n; i++)
			launch(&t->held[i], t->held[i].async ? t->held[i].s : pick_stream(t));
	else if (k < 97)
		sync_something(t);
	else
		capture(t);
}

static void *run(void *arg) {
	struct thread *t = arg;
	make_streams(t);
	for (long i = 0; i < ops / 2; i++)
		one_op(t);
	while (t->n > 0)
		give(t, t->n - 1);
	pthread_barrier_wait(&meet);
	if (t->id == 0)
		for (int d = 0; d < 2; d++) {
			cudaSetDevice(d);
			t->failed[F_SETUP] += cudaDeviceReset() != 0;
		}
	pthread_barrier_wait(&meet);
	make_streams(t);
	for (long i = ops / 2; i < ops; i++)
		one_op(t);
	while (t->n > 0)
		give(t, t->n - 1);
	return NULL;
}

int main(int argc, char **argv) {
	char *end = NULL;
	unsigned long long seed = argc == 3 ? strtoull(argv[1], &end, 10) : 0;
	if (argc != 3 || *end != 0 || (ops = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: stress SEED OPS (OPS > 0)\n");
		return 2;
	}
	static struct thread th[THREADS];
	pthread_t id[THREADS];
	pthread_barrier_init(&meet, NULL, THREADS);
	for (int i = 0; i < THREADS; i++) {
		th[i].id = i, th[i].device = i % 2, th[i].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i + 1;
		pthread_create(&id[i], NULL, run, &th[i]);
	}
	long failed[F_KINDS] = {0};
	for (int i = 0; i < THREADS; i++) {
		pthread_join(id[i], NULL);
		for (int k = 0; k < F_KINDS; k++)
			failed[k] += th[i].failed[k];
	}
	printf("seed: %llu\nops: %ld\n", seed, ops);
	for (int k = 0; k < F_KINDS; k++)
		printf("failed %s: %ld\n", failure_names[k], failed[k]);
	report();
	return 0;
}
