/*
 * `record --pool`: the shim serves the program's synchronous device allocations (cudaMalloc,
 * cuMemAlloc_v2) from the C pool (pool.h) that ALLOCSCOPE_POOL describes, one pool per device,
 * made at that device's first allocation over the real cuMemAlloc_v2/cuMemFree_v2. Every call is
 * still recorded.
 *
 * Reuse is as safe as the calls it replaces. cudaFree and cuMemFree_v2 wait for the device, so a
 * block freed that way is kept pending, not reusable, until all device work issued before the free
 * has completed: until the program synchronizes the device (cudaDeviceSynchronize, cuCtxSynchronize),
 * or until the pool would otherwise have to grow, when it orders once itself (one ordering for many
 * frees). While every stream the program can use waits for the legacy stream (it made no
 * non-blocking stream, and one device has a pool) that ordering is a barrier: an event recorded on
 * the legacy stream, which CUDA starts only after all earlier work of every blocking stream and
 * which all their later work waits for, so work that uses a block handed out afterwards runs after
 * all work issued before its free; the host does not wait. Otherwise it is a synchronization of the
 * device. Neither is made while a blocking stream captures a graph (the legacy stream cannot be used
 * then): the pool grows instead.
 *
 * The stream-ordered calls (cudaMallocAsync, cudaFreeAsync, cuMemAllocAsync, cuMemFreeAsync) are
 * served too, with CUDA's stream-ordered rules. A block freed on stream S is reusable at once: work
 * that a later allocation on S enqueues runs after the work before the free. While the program has
 * used only one stream (the synchronous calls count as a stream of their own), that is all. When a
 * second stream appears (or a stream is destroyed: its handle may come back), the pool orders once
 * as above, and from then on records an event on S at every stream-ordered free; a block
 * handed out on another stream T while that event has not completed makes T wait for it
 * (cuStreamWaitEvent), and one handed out by a synchronous allocation makes the host wait
 * (cuEventSynchronize). If an event cannot be recorded, the block stays pending like a synchronous
 * free's. A request the pool cannot serve goes to CUDA, which then returns
 * what it returns; an address the pool did not hand out is freed by CUDA. A call made while the
 * same thread is inside the pool (a signal handler) goes to CUDA. A forked child starts without the
 * parent's pools.
 */
#ifndef ALLOCSCOPE_SERVE_H
#define ALLOCSCOPE_SERVE_H

#include "common.h"
#include "pool.h"

#define SERVE_DEVICES 64

/* A block freed on a stream whose work before the free may still run: [addr, end), the stream's key
 * and the event recorded on it at the free. */
struct inflight { uint64_t addr, end, key; void *event; };

/* The stream a call names: key tells streams apart (a per-thread default stream is a stream per
 * thread), handle names it in a driver call from this thread, policy is what the trace records and
 * package pool's per-stream lists see. The synchronous calls have a key of their own. */
struct stream_ref { uint64_t key, handle, policy; int async; };

#define KEY_SYNC (~0ull)
#define STREAM_LEGACY 0x1ull     /* CU_STREAM_LEGACY */
#define STREAM_PER_THREAD 0x2ull /* CU_STREAM_PER_THREAD */
#define CU_STREAM_NON_BLOCKING 0x1u
#define CUDA_ERROR_STREAM_CAPTURE_IMPLICIT 906

/* A device's pool; what every call reads comes first, beside the lock. */
struct served {
	pthread_mutex_t mu;
	int state; /* 0: not made yet, 1: serving, 2: could not be made (calls go to CUDA) */
	int multi;              /* more than one stream seen: stream-ordered frees record events */
	int keyed;              /* one stream seen so far: only_key */
	unsigned destroyed;     /* g_sv.destroyed when last looked at */
	uint64_t only_key;
	struct cp_vec inflight; /* struct inflight */
	struct cp_vec events;   /* void *: spare events */
	size_t prune_at;        /* inflight length at which completed entries are dropped */
	void *barrier;          /* the event recorded on the legacy stream as a barrier; NULL: none yet */
	struct cp_pool pool;    /* its deferred blocks: freed by cudaFree, not reusable before a sync */
} __attribute__((aligned(64)));

static struct cp_config g_serve_cfg;
static struct served g_served[SERVE_DEVICES];
static TLS int t_serving;           /* this thread is inside a pool */
static TLS uint64_t t_thread_serial; /* this thread's number, from 1, for its per-thread stream */
static uint64_t g_thread_serials;
/* What every served call reads, in one cache line. */
static struct {
	int on;             /* ALLOCSCOPE_POOL was set and parsed */
	unsigned destroyed; /* streams the program destroyed */
	unsigned apart;     /* non-blocking streams the program made: the legacy stream orders none of their work */
	uint64_t pools;     /* bit d: device d's pool is serving */
} g_sv __attribute__((aligned(64)));

typedef CUresult (*real_alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*real_free_fn)(CUdeviceptr);
typedef CUresult (*real_sync_fn)(void);
typedef CUresult (*real_event_create_fn)(void **, unsigned);
typedef CUresult (*real_event_fn)(void *);
typedef CUresult (*real_event_record_fn)(void *, CUstream);
typedef CUresult (*real_stream_wait_fn)(CUstream, void *, unsigned);
typedef CUresult (*real_is_capturing_fn)(CUstream, int *);
static real_alloc_fn g_real_alloc;
static real_free_fn g_real_free;
static real_sync_fn g_real_sync;
static struct {
	real_event_create_fn create;
	real_event_record_fn record;
	real_event_fn query, synchronize;
	real_stream_wait_fn wait;
	real_is_capturing_fn is_capturing; /* NULL: a driver without stream capture */
} g_real_event;

/* stream_of names the stream of a stream-ordered call; ptsz: the call came through a per-thread
 * default stream variant, where stream 0 is this thread's own. */
static struct stream_ref stream_of(uint64_t s, int ptsz) {
	if ((ptsz && s == 0) || s == STREAM_PER_THREAD) {
		if (t_thread_serial == 0)
			t_thread_serial = __atomic_add_fetch(&g_thread_serials, 1, __ATOMIC_RELAXED);
		return (struct stream_ref){t_thread_serial << 2 | STREAM_PER_THREAD, STREAM_PER_THREAD, s, 1};
	}
	return (struct stream_ref){s == STREAM_LEGACY ? 0 : s, s, s, 1};
}

static const struct stream_ref sync_stream = {KEY_SYNC, 0, 0, 0};

/* pool_count adds n to a counter of the control file's pool_counters, if there is one. */
#define POOL_COUNT(field, n)                                                                             \
	do {                                                                                             \
		if (g_ctl != NULL)                                                                       \
			__atomic_fetch_add(&g_ctl->pool.field, (uint64_t)(n), __ATOMIC_RELAXED);         \
	} while (0)

/* pool_note_peak raises the control file's largest reserved bytes of a pool to v. */
static void pool_note_peak(uint64_t v) {
	if (g_ctl == NULL)
		return;
	uint64_t cur = __atomic_load_n(&g_ctl->pool.peak_reserved, __ATOMIC_RELAXED);
	while (cur < v && !__atomic_compare_exchange_n(&g_ctl->pool.peak_reserved, &cur, v, 0, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
}

/* serve_one_pool reports whether at most one device has a pool: work on another device cannot use
 * the blocks of this one's. */
static int serve_one_pool(void) { return __builtin_popcountll(__atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE)) <= 1; }

/* The non-blocking streams the program made and has not destroyed, so that a join barrier can order
 * their work with everybody's (serve_ordering_barrier), and events recorded on those it destroyed
 * (their work may still run), which the next join waits for. While a stream is being made, after one could not be
 * noted (more than APART_MAX, an event that could not be recorded, a stream made or destroyed from
 * a signal handler inside the pool) or once a green context made a stream, the pool synchronizes
 * the device instead. */
#define APART_MAX 256
static struct {
	pthread_mutex_t mu;
	unsigned making;         /* non-blocking streams being made */
	int lost;                /* one went unnoted: no more joins */
	size_t n, left;
	uint64_t stream[APART_MAX];
	void *event[APART_MAX];  /* recorded on stream[i] at a join; made on first use */
	void *gone[APART_MAX];   /* recorded on destroyed streams (left of them); made on first use */
} g_apart = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, {0}, {0}, {0}};

enum { JOIN_NO, JOIN_DONE, JOIN_CAPTURING };

/* serve_barrier_event makes s's barrier event on first use: 1 when s has one. */
static int serve_barrier_event(struct served *s) {
	if (s->barrier == NULL && g_real_event.create(&s->barrier, 0x2 /* CU_EVENT_DISABLE_TIMING */) != 0)
		s->barrier = NULL;
	return s->barrier != NULL;
}

/* serve_join_locked records a join barrier (g_apart's lock held): an event on every non-blocking
 * stream, the legacy stream made to wait for them all, the barrier event recorded on it (CUDA
 * starts it after all earlier work of every blocking stream too), and every non-blocking stream
 * made to wait for the barrier (every blocking stream's later work waits for it anyway). JOIN_NO
 * when it cannot (the caller synchronizes the device; waits already queued only add order). */
static int serve_join_locked(struct served *s) {
	size_t n = g_apart.n;
	for (size_t i = 0; i < n && g_real_event.is_capturing != NULL; i++) {
		int status = 0; /* first, as a synchronization would break a capture too */
		if (g_real_event.is_capturing((CUstream)(uintptr_t)g_apart.stream[i], &status) == 0 && status != 0)
			return JOIN_CAPTURING; /* not CU_STREAM_CAPTURE_STATUS_NONE: an event would join the graph */
	}
	if (g_apart.making != 0 || __atomic_load_n(&g_apart.lost, __ATOMIC_ACQUIRE) || g_real_event.is_capturing == NULL)
		return JOIN_NO;
	for (size_t i = 0; i < n; i++)
		if (g_apart.event[i] == NULL && g_real_event.create(&g_apart.event[i], 0x2 /* DISABLE_TIMING */) != 0) {
			g_apart.event[i] = NULL;
			return JOIN_NO;
		}
	if (!serve_barrier_event(s))
		return JOIN_NO;
	CUstream legacy = (CUstream)(uintptr_t)STREAM_LEGACY;
	for (size_t i = 0; i < g_apart.left; i++)
		if (g_real_event.wait(legacy, g_apart.gone[i], 0) != 0)
			return JOIN_NO;
	for (size_t i = 0; i < n; i++)
		if (g_real_event.record(g_apart.event[i], (CUstream)(uintptr_t)g_apart.stream[i]) != 0 ||
		    g_real_event.wait(legacy, g_apart.event[i], 0) != 0)
			return JOIN_NO;
	if (g_real_event.record(s->barrier, legacy) != 0)
		return JOIN_NO;
	for (size_t i = 0; i < n; i++)
		if (g_real_event.wait((CUstream)(uintptr_t)g_apart.stream[i], s->barrier, 0) != 0)
			return JOIN_NO;
	g_apart.left = 0;
	return JOIN_DONE;
}

static int serve_barrier(struct served *s);

/* serve_ordering_barrier orders all the device's work with a barrier while the program made no
 * non-blocking stream, else with a join barrier, when only one device has a pool: JOIN_DONE,
 * JOIN_NO (the caller synchronizes) or JOIN_CAPTURING. Under g_apart's lock, so that a stream being
 * made is either known here or made to wait for this barrier (serve_stream_made). */
static int serve_ordering_barrier(struct served *s) {
	if (!serve_one_pool())
		return JOIN_NO;
	pthread_mutex_lock(&g_apart.mu);
	int r;
	if (__atomic_load_n(&g_sv.apart, __ATOMIC_ACQUIRE) == 0)
		r = serve_barrier(s) ? JOIN_DONE : JOIN_NO;
	else
		r = serve_join_locked(s);
	pthread_mutex_unlock(&g_apart.mu);
	return r;
}

/* serve_apart_synced notes that the device synchronized: the work of the streams destroyed so far is
 * done, and no join needs to wait for it. */
static void serve_apart_synced(void) {
	pthread_mutex_lock(&g_apart.mu);
	g_apart.left = 0;
	pthread_mutex_unlock(&g_apart.mu);
}

/* serve_barrier records s's barrier event on the legacy stream: 1 on success. */
static int serve_barrier(struct served *s) {
	return serve_barrier_event(s) && g_real_event.record(s->barrier, (CUstream)(uintptr_t)STREAM_LEGACY) == 0;
}

/* serve_capturing reports whether a blocking stream of the current context captures a graph. */
static int serve_capturing(void) {
	int status = 0;
	return g_real_event.is_capturing != NULL &&
	       g_real_event.is_capturing((CUstream)(uintptr_t)STREAM_LEGACY, &status) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

/* serve_order makes all work issued so far on the device of s come before all work issued from now
 * on, for the pool, counted and timed: a barrier where it holds, a join barrier where the program
 * made non-blocking streams, else a synchronization of the device. 1 on success; 0 (nothing done)
 * while a stream captures a graph. */
static int serve_order(struct served *s) {
	if (serve_capturing())
		return 0;
	int64_t t0 = now_ns(CLOCK_MONOTONIC);
	int ok, r = serve_ordering_barrier(s);
	if (r == JOIN_CAPTURING)
		return 0;
	if (r == JOIN_DONE) {
		ok = 1;
		POOL_COUNT(barriers, 1);
	} else if ((ok = g_real_sync() == 0)) {
		serve_apart_synced();
	}
	POOL_COUNT(syncs, 1);
	POOL_COUNT(sync_ns, now_ns(CLOCK_MONOTONIC) - t0);
	return ok;
}

/* serve_parse reads ALLOCSCOPE_POOL (intercept.PoolSpec's line) into cfg; 0 on success. */
static int serve_parse(const char *s, struct cp_config *cfg) {
	uint64_t v[9];
	if (strncmp(s, "config ", 7) != 0)
		return -1;
	s += 7;
	for (int i = 0; i < 9; i++) {
		char *end;
		v[i] = strtoull(s, &end, 10);
		if (end == s)
			return -1;
		s = end;
	}
	if (v[8] > CP_MAX_CLASSES)
		return -1;
	*cfg = (struct cp_config){.align = v[0], .threshold = v[1], .arena_bytes = v[2], .grow_bytes = v[3],
				  .maximum = v[4], .grow_slots = v[5], .per_stream = (int)v[6],
				  .fit_aged = (int)v[7], .nclasses = (int)v[8]};
	for (int i = 0; i < cfg->nclasses; i++) {
		char *end;
		cfg->class_size[i] = strtoull(s, &end, 10);
		s = end;
		cfg->class_slots[i] = strtoull(s, &end, 10);
		if (end == s || cfg->class_size[i] == 0)
			return -1;
		s = end;
	}
	return 0;
}

/* serve_init reads the pool to serve from the environment; called by the constructor. */
static void serve_init(void) {
	const char *spec = getenv("ALLOCSCOPE_POOL");
	if (spec == NULL || spec[0] == '\0')
		return;
	if (serve_parse(spec, &g_serve_cfg) != 0) {
		static const char msg[] = "allocscope: ALLOCSCOPE_POOL is not a pool spec; allocations go to CUDA\n";
		say(msg, sizeof msg - 1);
		return;
	}
	for (int d = 0; d < SERVE_DEVICES; d++)
		pthread_mutex_init(&g_served[d].mu, NULL);
	__atomic_store_n(&g_sv.on, 1, __ATOMIC_RELEASE);
}

static int serve_reserve(void *ctx, uint64_t size, uint64_t *addr) {
	(void)ctx;
	CUdeviceptr p = 0;
	CUresult r = g_real_alloc(&p, size);
	if (r != 0)
		return r == 2 ? CP_OOM : CP_ERR; /* CUDA_ERROR_OUT_OF_MEMORY */
	POOL_COUNT(reservations, 1);
	*addr = p;
	return CP_OK;
}

/* serve_any_capturing reports whether a stream the shim knows captures a graph: a blocking one (the
 * legacy stream says so) or a non-blocking one the program made. */
static int serve_any_capturing(void) {
	if (serve_capturing())
		return 1;
	if (g_real_event.is_capturing == NULL)
		return 0;
	int found = 0;
	pthread_mutex_lock(&g_apart.mu);
	for (size_t i = 0; i < g_apart.n && !found; i++) {
		int status = 0;
		found = g_real_event.is_capturing((CUstream)(uintptr_t)g_apart.stream[i], &status) == 0 && status != 0;
	}
	pthread_mutex_unlock(&g_apart.mu);
	return found;
}

/* serve_release gives a region of the pool of ctx back to CUDA. cuMemFree_v2 waits for the device,
 * so a block of it whose stream-ordered free is still in flight is done with. While a stream captures
 * a graph, the pool's give-back of idle regions (cp_release_idle) is refused instead (CP_ERR: the
 * region stays), as the free could break the capture, and PyTorch's allocator frees no cached
 * blocks then either; closing the pool gives everything back. */
static int serve_release(void *ctx, uint64_t addr, uint64_t size) {
	struct served *s = ctx;
	(void)size;
	if (!s->pool.closed && serve_any_capturing())
		return CP_ERR;
	return g_real_free(addr) == 0 ? CP_OK : CP_ERR;
}

static int serve_upstream_sync(void *ctx) { return serve_order(ctx) ? 0 : -1; }

/* serve_resolve finds the real driver functions the pools use; 0 when libcuda is not loaded. */
static int serve_resolve(void) {
	if (__atomic_load_n(&g_real_sync, __ATOMIC_ACQUIRE) != NULL)
		return 1;
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	dlsym_fn rd = get_real_dlsym();
	if (h == NULL || rd == NULL)
		return 0;
	g_real_alloc = (real_alloc_fn)rd(h, "cuMemAlloc_v2");
	g_real_free = (real_free_fn)rd(h, "cuMemFree_v2");
	real_sync_fn sync = (real_sync_fn)rd(h, "cuCtxSynchronize");
	g_real_event.create = (real_event_create_fn)rd(h, "cuEventCreate");
	g_real_event.record = (real_event_record_fn)rd(h, "cuEventRecord");
	g_real_event.query = (real_event_fn)rd(h, "cuEventQuery");
	g_real_event.synchronize = (real_event_fn)rd(h, "cuEventSynchronize");
	g_real_event.wait = (real_stream_wait_fn)rd(h, "cuStreamWaitEvent");
	g_real_event.is_capturing = (real_is_capturing_fn)rd(h, "cuStreamIsCapturing");
	shim_dlclose(h);
	if (g_real_alloc == NULL || g_real_free == NULL || sync == NULL || g_real_event.create == NULL ||
	    g_real_event.record == NULL || g_real_event.query == NULL || g_real_event.synchronize == NULL ||
	    g_real_event.wait == NULL)
		return 0;
	__atomic_store_n(&g_real_sync, sync, __ATOMIC_RELEASE);
	return 1;
}

/* serve_on reports whether record --pool serves this process, for a hook that does not log (and so
 * may run before the shim's constructor, from another library's). */
static int serve_on(void) {
	(void)shim_enabled(); /* starts the shim */
	return __atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE);
}

/* The host side of the first pool made, readied when the program initializes the driver (cuInit),
 * so that its first allocation pays only for the device region: the driver functions the pools
 * use, whether the process sees one device, and a book for the plan's tables, whose pages cost
 * about 1.7 us each to touch on the H200 host. */
enum { SPARE_NONE, SPARE_MAKING, SPARE_READY, SPARE_TAKEN };
static struct {
	int state;
	struct cp_book book;
} g_spare;

/* serve_prepare readies g_spare, once; called after a successful cuInit. */
static void serve_prepare(void) {
	int none = SPARE_NONE;
	if (!serve_on() ||
	    !__atomic_compare_exchange_n(&g_spare.state, &none, SPARE_MAKING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	serve_resolve();
	one_device();
	struct cp_book book = {NULL, 0, 0};
	cp_book_open(&book, cp_book_bytes(&g_serve_cfg));
	g_spare.book = book;
	int making = SPARE_MAKING;
	if (book.base == NULL ||
	    !__atomic_compare_exchange_n(&g_spare.state, &making, SPARE_READY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		cp_book_close(&book); /* a pool was made meanwhile, with a book of its own */
		__atomic_store_n(&g_spare.state, SPARE_TAKEN, __ATOMIC_RELEASE);
	}
}

/* serve_take_spare returns the book serve_prepare made, once; an empty one when there is none. */
static struct cp_book serve_take_spare(void) {
	int ready = SPARE_READY, making = SPARE_MAKING;
	if (__atomic_compare_exchange_n(&g_spare.state, &ready, SPARE_TAKEN, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return g_spare.book;
	/* still being made: serve_prepare closes it */
	__atomic_compare_exchange_n(&g_spare.state, &making, SPARE_TAKEN, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	return (struct cp_book){NULL, 0, 0};
}

/* serve_make builds device d's pool (its lock held). */
static void serve_make(struct served *s, int d) {
	s->state = 2;
	s->inflight.elem = sizeof(struct inflight);
	s->events.elem = sizeof(void *);
	s->prune_at = 64;
	if (!serve_resolve())
		return;
	int err = cp_init_book(&s->pool, &g_serve_cfg,
			       (struct cp_upstream){serve_reserve, serve_release, s, serve_upstream_sync}, serve_take_spare());
	if (err != CP_OK) {
		cp_close(&s->pool);
		char buf[160];
		int n = snprintf(buf, sizeof buf, "allocscope: cannot reserve the pool on device %d (error %d); "
				 "its allocations go to CUDA\n", d, err);
		if (n > 0)
			say(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
		return;
	}
	s->state = 1;
	__atomic_or_fetch(&g_sv.pools, 1ull << d, __ATOMIC_RELEASE);
	pool_note_peak(s->pool.s.peak_reserved_bytes);
}

/* serve_drop_inflight forgets the in-flight entries whose events completed (all of them after a
 * synchronization of the device) and keeps their events for reuse. */
static void serve_drop_inflight(struct served *s, int all) {
	size_t kept = 0;
	for (size_t i = 0; i < s->inflight.len; i++) {
		struct inflight q = CP_AT(&s->inflight, struct inflight, i);
		if (all || g_real_event.query(q.event) == 0) {
			if (cp_vec_reserve(&s->events, s->events.len + 1) == 0)
				CP_AT(&s->events, void *, s->events.len++) = q.event;
			continue;
		}
		CP_AT(&s->inflight, struct inflight, kept++) = q;
	}
	s->inflight.len = kept;
	s->prune_at = kept * 2 > 64 ? kept * 2 : 64;
}

/* serve_synced notes that the device of s synchronized: every block freed before is reusable. */
static void serve_synced(struct served *s) {
	cp_synced(&s->pool);
	serve_drop_inflight(s, 1);
}

/* serve_note_stream notes a stream-ordered call on st (or an allocation by a synchronous call): the
 * second stream seen, or a stream destroyed, makes the pool order the device once and track
 * stream-ordered frees with events from then on. 1, or 0 when that ordering could not be made (a
 * stream captures a graph): nothing is noted, the call must not take a reusable block, and the next
 * call tries again. */
static int serve_note_stream(struct served *s, struct stream_ref st) {
	unsigned destroyed = __atomic_load_n(&g_sv.destroyed, __ATOMIC_ACQUIRE);
	if (s->multi) {
		if (destroyed == s->destroyed)
			return 1;
		if (!serve_order(s)) /* a stream's free list may pass to a new stream of its handle */
			return 0;
		s->destroyed = destroyed;
		serve_synced(s);
		return 1;
	}
	if (!s->keyed) {
		s->keyed = 1, s->only_key = st.key, s->destroyed = destroyed;
		return 1;
	}
	if (st.key == s->only_key && destroyed == s->destroyed)
		return 1;
	if (!serve_order(s))
		return 0;
	s->multi = 1, s->destroyed = destroyed;
	serve_synced(s);
	return 1;
}

/* serve_guard makes the user of a block just handed out at [addr, addr+size) wait for the work of
 * other streams that freed what overlaps it, when that work may still run. An entry the block
 * covers is done with: whoever frees the block next orders it after that wait. */
static void serve_guard(struct served *s, uint64_t addr, uint64_t size, struct stream_ref st) {
	uint64_t end = addr + (size > 0 ? size : 1);
	size_t kept = 0;
	for (size_t i = 0; i < s->inflight.len; i++) {
		struct inflight q = CP_AT(&s->inflight, struct inflight, i);
		if (q.addr < end && addr < q.end && !(st.async && q.key == st.key) &&
		    g_real_event.query(q.event) != 0) {
			if (st.async && g_real_event.wait((CUstream)(uintptr_t)st.handle, q.event, 0) == 0) {
				POOL_COUNT(stream_waits, 1);
			} else {
				g_real_event.synchronize(q.event);
				POOL_COUNT(host_waits, 1);
			}
		}
		if (q.addr >= addr && q.end <= end) {
			if (cp_vec_reserve(&s->events, s->events.len + 1) == 0)
				CP_AT(&s->events, void *, s->events.len++) = q.event;
			continue;
		}
		CP_AT(&s->inflight, struct inflight, kept++) = q;
	}
	s->inflight.len = kept;
}

/* serve_needs_event reports whether a block freed on st may be handed out on another stream: not
 * when the pool keeps freed blocks per stream and st is a stream of its own (a handle, not the
 * legacy or a per-thread default stream, which other threads and the synchronous calls share). */
static int serve_needs_event(struct served *s, struct stream_ref st) {
	return !(s->pool.cfg.per_stream && st.policy > STREAM_PER_THREAD);
}

/* serve_track records an event on the stream that freed [addr, addr+size): 0, or -1 when it could
 * not (the block must then wait for a synchronization). */
static int serve_track(struct served *s, uint64_t addr, uint64_t size, struct stream_ref st) {
	if (s->inflight.len >= s->prune_at)
		serve_drop_inflight(s, 0);
	void *ev = NULL;
	if (s->events.len > 0)
		ev = CP_AT(&s->events, void *, --s->events.len);
	else if (g_real_event.create(&ev, 0x2 /* CU_EVENT_DISABLE_TIMING */) != 0)
		return -1;
	POOL_COUNT(events, 1);
	if (cp_vec_reserve(&s->inflight, s->inflight.len + 1) != 0 ||
	    g_real_event.record(ev, (CUstream)(uintptr_t)st.handle) != 0) {
		if (cp_vec_reserve(&s->events, s->events.len + 1) == 0)
			CP_AT(&s->events, void *, s->events.len++) = ev;
		return -1;
	}
	CP_AT(&s->inflight, struct inflight, s->inflight.len++) = (struct inflight){addr, addr + (size ? size : 1), st.key, ev};
	return 0;
}

/* serve_count_idle adds what the pool of s gave back since its counters read idle and idle_bytes to
 * the control file's pool counters. */
static void serve_count_idle(struct served *s, uint64_t idle, uint64_t idle_bytes) {
	if (s->pool.s.idle_releases == idle)
		return;
	POOL_COUNT(idle_releases, s->pool.s.idle_releases - idle);
	POOL_COUNT(idle_released_bytes, s->pool.s.idle_released_bytes - idle_bytes);
}

/* serve_take serves size bytes from s (its lock held). Before a growth the pool makes its deferred
 * blocks reusable with one synchronization (cp_alloc); the in-flight entries are then done with. */
static int serve_take(struct served *s, uint64_t size, struct stream_ref st, uint64_t *addr) {
	if (!serve_note_stream(s, st))
		return CP_ERR; /* to CUDA */
	uint64_t fallbacks = s->pool.s.fallbacks, syncs = s->pool.s.syncs;
	uint64_t idle = s->pool.s.idle_releases, idle_bytes = s->pool.s.idle_released_bytes;
	int err = cp_alloc(&s->pool, size, st.policy, addr);
	if (s->pool.s.syncs != syncs)
		serve_drop_inflight(s, 1);
	serve_count_idle(s, idle, idle_bytes);
	if (s->pool.s.fallbacks != fallbacks) {
		POOL_COUNT(fallbacks, s->pool.s.fallbacks - fallbacks);
		pool_note_peak(s->pool.s.peak_reserved_bytes);
	}
	if (err == CP_OK && s->inflight.len > 0)
		serve_guard(s, *addr, size, st);
	return err;
}

/* serve_prefetch asks for what a served call reads of the first pool in pools (a process's only
 * one, mostly) before the call needs it: see cp_prefetch. (Prefetching also what the request
 * itself reads, its class and free-list top or the slab index, made no difference in programs.) */
static inline void serve_prefetch(uint64_t pools) {
	if (pools == 0)
		return;
	struct served *s = &g_served[__builtin_ctzll(pools)];
	__builtin_prefetch(s, 1);
	cp_prefetch(&s->pool);
}

/* serve_alloc serves size bytes on the current device for a call on stream st into *addr: 1, or 0
 * when the call is to go to CUDA. A runtime call on a thread with no current context is served on
 * device 0, where the runtime puts such a thread, when device 0 has a pool already. */
static int serve_alloc(uint64_t size, struct stream_ref st, int runtime, uint64_t *addr) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || size == 0)
		return 0;
	__builtin_prefetch(&g_ctx_epoch);
	serve_prefetch(__atomic_load_n(&g_sv.pools, __ATOMIC_RELAXED));
	int d = t_serving ? -1 : current_device();
	if (d < 0 && runtime && !t_serving && __atomic_load_n(&g_served[0].state, __ATOMIC_ACQUIRE) == 1)
		d = 0; /* a thread's first runtime call: the runtime binds it to device 0, whose pool exists */
	if (d < 0 || d >= SERVE_DEVICES) {
		POOL_COUNT(passed, 1);
		return 0;
	}
	struct served *s = &g_served[d];
	t_serving = 1;
	pthread_mutex_lock(&s->mu);
	if (s->state == 0)
		serve_make(s, d);
	int err = s->state == 1 ? serve_take(s, size, st, addr) : CP_ERR;
	pthread_mutex_unlock(&s->mu);
	t_serving = 0;
	if (err != CP_OK)
		POOL_COUNT(passed, 1);
	return err == CP_OK;
}

/* serve_give_back takes a free of addr on stream st into s (its lock held): 1 with *result the call's
 * result, or 0 when the block is not the pool's. */
static int serve_give_back(struct served *s, uint64_t addr, struct stream_ref st, int *result) {
	uint64_t size = 0;
	int state = cp_lookup(&s->pool, addr, &size);
	if (state == CP_UNKNOWN)
		return 0;
	if (state == CP_PENDING) {
		*result = 1; /* freed twice: CUDA_ERROR_INVALID_VALUE / cudaErrorInvalidValue */
		return 1;
	}
	if (st.async && serve_note_stream(s, st)) { /* else the block waits for the next ordering */
		if (!s->multi || !serve_needs_event(s, st) || serve_track(s, addr, size, st) == 0) {
			*result = cp_free(&s->pool, addr, st.policy) == CP_OK ? 0 : 1;
			return 1;
		}
	}
	/* CP_ERR: no memory for the list; the block stays live (never unsafe), the call says out of memory */
	*result = cp_defer_free(&s->pool, addr, st.policy) == CP_OK ? 0 : 2;
	return 1;
}

/* serve_free takes a free of addr on stream st: 0 when no pool handed it out (the call goes to CUDA),
 * else 1 with *result the call's result (0, or 1 = invalid value for a second free). */
static int serve_free(uint64_t addr, struct stream_ref st, int *result) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving || addr == 0)
		return 0;
	int taken = 0;
	t_serving = 1;
	uint64_t pools = __atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE);
	serve_prefetch(pools);
	for (uint64_t m = pools; m != 0 && !taken; m &= m - 1) {
		struct served *s = &g_served[__builtin_ctzll(m)];
		pthread_mutex_lock(&s->mu);
		taken = serve_give_back(s, addr, st, result);
		pthread_mutex_unlock(&s->mu);
	}
	t_serving = 0;
	return taken;
}

/* serve_synchronized makes the current device's pending blocks reusable after the program
 * synchronized it. */
static void serve_synchronized(void) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving)
		return;
	int d = current_device();
	if (d < 0 || d >= SERVE_DEVICES || __atomic_load_n(&g_served[d].state, __ATOMIC_ACQUIRE) != 1)
		return;
	t_serving = 1;
	pthread_mutex_lock(&g_served[d].mu);
	serve_synced(&g_served[d]);
	pthread_mutex_unlock(&g_served[d].mu);
	t_serving = 0;
}

/* serve_release_idle gives back the idle regions of the current device's pool (cp_release_idle) after
 * a device allocation that went to CUDA found it out of memory: 1 when it gave back any, and the call
 * is worth making once more. 0 without a pool, or inside one (a signal handler's call). */
static int serve_release_idle(void) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving)
		return 0;
	int d = current_device();
	if (d < 0 || d >= SERVE_DEVICES || __atomic_load_n(&g_served[d].state, __ATOMIC_ACQUIRE) != 1)
		return 0;
	struct served *s = &g_served[d];
	t_serving = 1;
	pthread_mutex_lock(&s->mu);
	uint64_t idle = s->pool.s.idle_releases, idle_bytes = s->pool.s.idle_released_bytes;
	uint64_t bytes = cp_release_idle(&s->pool);
	serve_count_idle(s, idle, idle_bytes);
	pthread_mutex_unlock(&s->mu);
	t_serving = 0;
	return bytes > 0;
}

/* serve_exported notes that the program exported addr with cudaIpcGetMemHandle/cuIpcGetMemHandle:
 * if a pool handed it out, another process that opens the handle maps the pool's whole region, not
 * the block. Counted, and said once. */
static void serve_exported(uint64_t addr) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving || addr == 0)
		return;
	int found = 0;
	t_serving = 1;
	for (uint64_t m = __atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE); m != 0 && !found; m &= m - 1) {
		struct served *s = &g_served[__builtin_ctzll(m)];
		pthread_mutex_lock(&s->mu);
		uint64_t size;
		found = cp_lookup(&s->pool, addr, &size) != CP_UNKNOWN;
		pthread_mutex_unlock(&s->mu);
	}
	t_serving = 0;
	if (!found)
		return;
	POOL_COUNT(ipc_exports, 1);
	static int said;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL)) {
		static const char msg[] = "allocscope: the program exported a block of record --pool's pool with "
					  "cudaIpcGetMemHandle; a process that opens the handle sees the pool's region, not "
					  "the block: record this program without --pool\n";
		say(msg, sizeof msg - 1);
	}
}

/* serve_apart_lock takes g_apart's lock for a stream hook: 1, or 0 when the thread is inside the pool
 * (a signal handler interrupted it, maybe while it holds that lock): the hook then gives up on joins.
 * While the hook holds the lock, the thread counts as inside the pool, so that a signal handler's
 * allocations go to CUDA instead of waiting for the lock. serve_apart_unlock gives it back. */
static int serve_apart_lock(void) {
	if (t_serving) {
		__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		return 0;
	}
	t_serving = 1;
	pthread_mutex_lock(&g_apart.mu);
	return 1;
}

static void serve_apart_unlock(void) {
	pthread_mutex_unlock(&g_apart.mu);
	t_serving = 0;
}

/* serve_stream_destroying notes, before the call, that the program destroys stream: its handle may
 * name a new stream while the old one's work still runs. An event recorded on a non-blocking one now
 * stands for its work until the next join waits for it. 1 when it holds g_apart's lock: the caller
 * makes the call, then gives its outcome to serve_stream_destroyed, which takes the stream off the
 * joins' list and lets the lock go (a join meanwhile would use a stream being destroyed). */
static TLS uint64_t t_destroying; /* the stream whose destruction this thread's hook is making */

static int serve_stream_destroying(uint64_t stream) {
	__atomic_add_fetch(&g_sv.destroyed, 1, __ATOMIC_ACQ_REL);
	if (t_destroying != 0) { /* the runtime's destroy reaching the driver's: noted already */
		if (stream != t_destroying) /* a signal handler's: it cannot be noted */
			__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		return 0;
	}
	if (stream == 0 || !serve_on() || __atomic_load_n(&g_sv.apart, __ATOMIC_ACQUIRE) == 0)
		return 0;
	serve_resolve();
	if (!serve_apart_lock())
		return 0;
	for (size_t i = 0; i < g_apart.n; i++) {
		if (g_apart.stream[i] != stream)
			continue;
		void **e = &g_apart.gone[g_apart.left];
		if (g_apart.left < APART_MAX && g_real_event.record != NULL &&
		    (*e != NULL || g_real_event.create(e, 0x2 /* DISABLE_TIMING */) == 0) &&
		    g_real_event.record(*e, (CUstream)(uintptr_t)stream) == 0)
			g_apart.left++;
		else
			__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		break;
	}
	t_destroying = stream;
	return 1;
}

/* serve_stream_destroyed ends what serve_stream_destroying started; destroyed: the call succeeded. */
static void serve_stream_destroyed(uint64_t stream, int destroyed) {
	for (size_t i = 0; destroyed && i < g_apart.n; i++)
		if (g_apart.stream[i] == stream) {
			g_apart.stream[i] = g_apart.stream[--g_apart.n];
			break;
		}
	t_destroying = 0;
	serve_apart_unlock();
}

/* serve_stream_making notes, before the call, that the program makes a non-blocking stream: 1 when
 * the caller is to give the call's outcome to serve_stream_made. Where it cannot be noted, joins end. */
static int serve_stream_making(void) {
	POOL_COUNT(streams_apart, 1);
	if (!serve_on() || !serve_apart_lock()) {
		__atomic_add_fetch(&g_sv.apart, 1, __ATOMIC_ACQ_REL);
		__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		return 0;
	}
	__atomic_add_fetch(&g_sv.apart, 1, __ATOMIC_ACQ_REL); /* under the lock: see serve_ordering_barrier */
	g_apart.making++;
	serve_apart_unlock();
	return 1;
}

/* serve_after_barriers makes the new stream wait for the last barrier of every pool: it does not
 * wait for the legacy stream, and blocks reused after that barrier may have been freed by work that
 * still runs (g_apart's lock held). Where it cannot, the device is synchronized instead. */
static void serve_after_barriers(uint64_t stream) {
	for (uint64_t m = __atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE); m != 0; m &= m - 1) {
		void *barrier = g_served[__builtin_ctzll(m)].barrier;
		if (barrier == NULL || g_real_event.wait((CUstream)(uintptr_t)stream, barrier, 0) == 0)
			continue;
		if (g_real_sync == NULL || g_real_sync() != 0)
			__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		return;
	}
}

/* serve_stream_made notes the outcome of a call serve_stream_making announced: stream, or 0 when the
 * call failed; green: a green context's stream, which a join cannot order (joins end). */
static void serve_stream_made(uint64_t stream, int green) {
	if (!serve_apart_lock())
		return;
	g_apart.making--;
	if (stream != 0) {
		if (!green && g_apart.n < APART_MAX)
			g_apart.stream[g_apart.n++] = stream;
		else
			__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		serve_after_barriers(stream);
	}
	serve_apart_unlock();
}

/* serve_forget drops the parent's pools in a forked child. */
static void serve_forget(void) {
	g_sv.pools = 0;
	for (int d = 0; d < SERVE_DEVICES; d++) {
		struct served *s = &g_served[d];
		s->state = 0;
		s->inflight = (struct cp_vec){NULL, 0, 0, sizeof(struct inflight)};
		s->events = (struct cp_vec){NULL, 0, 0, sizeof(void *)};
		s->multi = s->keyed = 0;
		s->barrier = NULL;
		pthread_mutex_init(&s->mu, NULL);
	}
	pthread_mutex_init(&g_apart.mu, NULL); /* the parent's streams and events are not the child's */
	g_apart.making = 0, g_apart.n = g_apart.left = 0;
	memset(g_apart.event, 0, sizeof g_apart.event);
	memset(g_apart.gone, 0, sizeof g_apart.gone);
	t_serving = 0;
}

#endif
