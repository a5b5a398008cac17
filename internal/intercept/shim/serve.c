/* serve.c: see serve.h. */
#include "serve.h"
#include "contexts.h"
#include "pool.h"
#include "log.h"
#include "shim.h"

/* pool_count adds n to a counter of the control file's pool_counters, if there is one. */
#define POOL_COUNT(field, n)                                                                             \
	do {                                                                                             \
		if (g_ctl != NULL)                                                                       \
			__atomic_fetch_add(&g_ctl->pool.field, (uint64_t)(n), __ATOMIC_RELAXED);         \
	} while (0)

/* POOL_PASS counts one request of the served kinds that went to CUDA for reason (enum pool_pass,
 * log.h): in passed and in pass_by[reason]. Usable from any hook. */
#define POOL_PASS(reason)                                                                                \
	do {                                                                                             \
		unsigned pass_reason_ = (unsigned)(reason);                                              \
		POOL_COUNT(passed, 1);                                                                   \
		POOL_COUNT(pass_by[pass_reason_ < PASS_REASONS ? pass_reason_ : PASS_OTHER], 1);          \
	} while (0)

#define SERVE_POOLS 64

/* A block freed on a stream whose work before the free may still run: [addr, end), the stream's key,
 * the release points begun before the free and the event recorded on the stream at the free. */
struct inflight { uint64_t addr, end, key, gen; void *event; };

/* A pool's life: a slot is claimed for a context (SV_NEW), its pool made at the first allocation
 * (SV_SERVING, or SV_FAILED: calls go to CUDA until the contexts change), stopped while its context
 * is being reset or destroyed (SV_RETIRING), and given up with it (SV_FREE). */
enum { SV_FREE, SV_NEW, SV_SERVING, SV_FAILED, SV_RETIRING };

/* A context's pool; what every call reads comes first, beside the lock. */
struct served {
	pthread_mutex_t mu;
	int state;
	int device;             /* the context's device */
	CUcontext ctx;          /* the context that owns the pool's memory */
	int multi;              /* more than one stream seen: stream-ordered frees record events */
	int keyed;              /* one stream seen so far: only_key */
	unsigned destroyed;     /* g_sv.destroyed when last looked at */
	uint64_t only_key;
	unsigned long failed_at; /* g_ctx_epoch when the pool could not be made */
	int resume;              /* the state to come back to when a retirement does not happen */
	uint64_t life;           /* which pool of the slot this is (g_lives when it was made) */
	struct cp_vec inflight; /* struct inflight */
	struct cp_vec events;   /* void *: spare events */
	size_t prune_at;        /* inflight length at which completed entries are dropped */
	void *barrier;          /* the event recorded on the legacy stream as a barrier; NULL: none yet */
	struct cp_pool pool;    /* its deferred blocks: freed by cudaFree, not reusable before a release point */
} __attribute__((aligned(64)));

static struct served g_served[SERVE_POOLS];

/* What every served call reads, in one cache line. */
static struct {
	int on;             /* ALLOCSCOPE_POOL was set and parsed */
	unsigned destroyed; /* streams the program destroyed */
	unsigned apart;     /* non-blocking streams the program made: the legacy stream orders none of their work */
	uint64_t pools;     /* bit i: slot i's pool is serving */
} g_sv __attribute__((aligned(64)));

typedef CUresult (*real_alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*real_free_fn)(CUdeviceptr);
typedef CUresult (*real_sync_fn)(void);
typedef CUresult (*real_event_create_fn)(void **, unsigned);
typedef CUresult (*real_event_fn)(void *);
typedef CUresult (*real_event_record_fn)(void *, CUstream);
typedef CUresult (*real_stream_wait_fn)(CUstream, void *, unsigned);
typedef CUresult (*real_is_capturing_fn)(CUstream, int *);

static int serve_capturing(void);
static int serve_any_capturing(void);
static int serve_barrier(struct served *s);
static int serve_resolve(void);
static void serve_late_frees(void);
static void serve_apart_forget(void);
static void serve_apart_clear(void);
static int serve_queue_late(uint64_t addr, struct stream_ref st);

/* The events a synchronous allocation must wait for, outside the pool's lock; owned: taken out of the
 * in-flight list (back to the spare list after the wait), else still listed there. */
#define HOST_WAITS 16
struct host_waits {
	int n;
	struct { void *event; int owned; } w[HOST_WAITS];
};

/* serve_prefetch asks for what a served call reads of the first pool in pools (a process's only
 * one, mostly) before the call needs it: see cp_prefetch. */
static inline void serve_prefetch(uint64_t pools) {
	if (pools == 0)
		return;
	struct served *s = &g_served[__builtin_ctzll(pools)];
	__builtin_prefetch(s, 1);
	cp_prefetch(&s->pool);
}

static struct cp_config g_serve_cfg;
static pthread_mutex_t g_slots_mu = PTHREAD_MUTEX_INITIALIZER; /* claiming and giving up slots */
static TLS int t_serving;            /* this thread is inside a pool */
static TLS uint64_t t_thread_serial; /* this thread's number, from 1, for its per-thread stream */
static uint64_t g_thread_serials;
static uint64_t g_lives; /* pools made, so that a release point begun in one never reaches the next */
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

struct stream_ref stream_of(uint64_t s, int ptsz) {
	if ((ptsz && s == 0) || s == STREAM_PER_THREAD) {
		if (t_thread_serial == 0)
			t_thread_serial = __atomic_add_fetch(&g_thread_serials, 1, __ATOMIC_RELAXED);
		return (struct stream_ref){t_thread_serial << 2 | STREAM_PER_THREAD, STREAM_PER_THREAD, s, 1};
	}
	return (struct stream_ref){s == STREAM_LEGACY ? 0 : s, s, s, 1};
}

const struct stream_ref sync_stream = {KEY_SYNC, 0, 0, 0};

/* What this process has noted of each device's pool: the process it was noted in (a forked child
 * starts again from nothing, serve_forget), the pool's peak reserved bytes added to peak_sum so
 * far, and whether its failure to be made was counted. Read and written under the pool's lock,
 * except unmade (atomic). */
static struct {
	pid_t pid, unmade;
	uint64_t peak, life;
} g_noted[SERVE_POOLS];

/* pool_note_peak raises the control file's largest reserved bytes of a pool to the peak of s's
 * pool, and adds what that peak rose by since last noted to the sum of every pool's peak (s's lock
 * held). */
static void pool_note_peak(struct served *s) {
	if (g_ctl == NULL)
		return;
	uint64_t v = s->pool.s.peak_reserved_bytes;
	uint64_t cur = __atomic_load_n(&g_ctl->pool.peak_reserved, __ATOMIC_RELAXED);
	while (cur < v && !__atomic_compare_exchange_n(&g_ctl->pool.peak_reserved, &cur, v, 0, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
	size_t d = (size_t)(s - g_served);
	pid_t pid = getpid();
	if (g_noted[d].pid != pid || g_noted[d].life != s->life)
		g_noted[d].pid = pid, g_noted[d].peak = 0, g_noted[d].life = s->life;
	if (v > g_noted[d].peak) {
		POOL_COUNT(peak_sum, v - g_noted[d].peak);
		g_noted[d].peak = v;
	}
}

/* pool_reserve_failed notes that reserving size bytes for s's pool failed with the CUDA error r,
 * and returns the pool's error for it. While the pool is being made (its plan), the control file
 * keeps the first such error of the recording. */
static int pool_reserve_failed(struct served *s, CUresult r) {
	uint64_t none = 0;
	if (g_ctl != NULL && s->state != SV_SERVING)
		__atomic_compare_exchange_n(&g_ctl->pool.unmade_error, &none, (uint64_t)r, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	return r == 2 ? CP_OOM : CP_ERR; /* CUDA_ERROR_OUT_OF_MEMORY */
}

/* pool_pass_reason says why a request that serve_alloc handed to s went to CUDA with the pool's
 * error err, and counts s's pool as not made the first time this process passes a request for that.
 * Asked outside the pool (t_serving clear): it may take g_apart's lock. */
static int pool_pass_reason(struct served *s, int err) {
	int state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	if (err == CP_CLOSED || state == SV_RETIRING || state == SV_FREE)
		return PASS_RETIRED;
	if (state != SV_SERVING) {
		pid_t pid = getpid(), seen = __atomic_exchange_n(&g_noted[s - g_served].unmade, pid, __ATOMIC_ACQ_REL);
		if (seen != pid)
			POOL_COUNT(unmade, 1);
		return PASS_NO_POOL;
	}
	switch (err) {
	case CP_OOM:
		return PASS_FULL;
	case CP_ERR: /* serve_take refuses while a capture forbids an ordering; else no host memory, a driver error */
		return serve_any_capturing() ? PASS_CAPTURE : PASS_OTHER;
	}
	return PASS_OTHER;
}

/* serve_one_pool reports whether at most one device has a pool: work on another device cannot use
 * the blocks of this one's. */
static int serve_one_pool(void) { return __builtin_popcountll(__atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE)) <= 1; }

static struct {
	pthread_mutex_t mu;
	unsigned making;         /* non-blocking streams being made */
	int lost;                /* one went unnoted: no more joins */
	size_t n, left;
	uint64_t stream[APART_MAX];
	void *event[APART_MAX];  /* recorded on stream[i] at a join; made on first use */
	void *gone[APART_MAX];   /* recorded on destroyed streams (left of them); made on first use */
	uint64_t gone_total;     /* events ever recorded into gone: the first left of gone are the last ones */
	CUcontext ctx;           /* the context of every stream above and of their events (one: joins order one context) */
} g_apart = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, {0}, {0}, {0}, 0, NULL};

/* serve_spare_event keeps ev for reuse (a free list of events; without room for it, it is dropped). */
static void serve_spare_event(struct served *s, void *ev) {
	if (cp_vec_reserve(&s->events, s->events.len + 1) == 0)
		CP_AT(&s->events, void *, s->events.len++) = ev;
}

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
	if ((n > 0 || g_apart.left > 0) && g_apart.ctx != s->ctx)
		return JOIN_NO; /* another context's streams: a join cannot order them */
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

/* serve_ordering_barrier orders all the context's work with a barrier while the program made no
 * non-blocking stream, else with a join barrier, when only one pool exists: JOIN_DONE, JOIN_NO (the
 * caller synchronizes) or JOIN_CAPTURING. Under g_apart's lock, so that a stream being made is
 * either known here or made to wait for this barrier (serve_stream_made). */
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

/* serve_apart_mark returns how many events were ever recorded on destroyed streams, before a
 * synchronization begins (serve_apart_synced). */
static uint64_t serve_apart_mark(void) {
	pthread_mutex_lock(&g_apart.mu);
	uint64_t n = g_apart.gone_total;
	pthread_mutex_unlock(&g_apart.mu);
	return n;
}

/* serve_apart_synced notes that the device synchronized after the first mark events recorded on
 * destroyed streams: their work is done, and no join needs to wait for them (those recorded since
 * stay). The events stay in the array, to be recorded again. */
static void serve_apart_synced(uint64_t mark) {
	pthread_mutex_lock(&g_apart.mu);
	uint64_t first = g_apart.gone_total - g_apart.left; /* the number of gone[0] */
	size_t done = mark > first ? (size_t)(mark - first) : 0;
	if (done > g_apart.left)
		done = g_apart.left;
	for (size_t j = 0; done > 0 && j + done < g_apart.left; j++) {
		void *e = g_apart.gone[j];
		g_apart.gone[j] = g_apart.gone[j + done], g_apart.gone[j + done] = e;
	}
	g_apart.left -= done;
	pthread_mutex_unlock(&g_apart.mu);
}

/* serve_barrier records s's barrier event on the legacy stream: 1 on success. */
static int serve_barrier(struct served *s) {
	return serve_barrier_event(s) && g_real_event.record(s->barrier, (CUstream)(uintptr_t)STREAM_LEGACY) == 0;
}

/* serve_capturing reports whether the pool must not order now: a capture is in progress (one the
 * shim saw begin, or a blocking stream of the current context captures). */
static int serve_capturing(void) {
	if (capture_any())
		return 1;
	int status = 0;
	return g_real_event.is_capturing != NULL &&
	       g_real_event.is_capturing((CUstream)(uintptr_t)STREAM_LEGACY, &status) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

/* serve_stream_captures reports whether stream st captures a graph (or joined a capture): its
 * stream-ordered calls then belong to the graph and go to CUDA. Asked only while a capture is in
 * progress somewhere. */
static int serve_stream_captures(struct stream_ref st) {
	if (!capture_any() || !serve_resolve() || g_real_event.is_capturing == NULL)
		return 0;
	int status = 0;
	CUresult r = g_real_event.is_capturing((CUstream)(uintptr_t)st.handle, &status);
	return r != 0 || status != 0; /* an error (906: the legacy stream while a blocking one captures) counts */
}

/* serve_drop_inflight forgets the in-flight entries that are done with and keeps their events for
 * reuse: with by_gen, those recorded before release point g began (their work is done or ordered
 * before all later work); else those whose events completed (a pruning). */
static void serve_drop_inflight(struct served *s, int by_gen, uint64_t g) {
	size_t kept = 0;
	for (size_t i = 0; i < s->inflight.len; i++) {
		struct inflight q = CP_AT(&s->inflight, struct inflight, i);
		if (by_gen ? q.gen <= g : g_real_event.query(q.event) == 0) {
			serve_spare_event(s, q.event);
			continue;
		}
		CP_AT(&s->inflight, struct inflight, kept++) = q;
	}
	s->inflight.len = kept;
	if (!by_gen)
		s->prune_at = kept * 2 > 64 ? kept * 2 : 64;
}

/* serve_release_through makes what was freed into s before release point g began reusable: the
 * deferred blocks and the in-flight entries. */
static void serve_release_through(struct served *s, uint64_t g) {
	cp_release_through(&s->pool, g);
	serve_drop_inflight(s, 1, g);
}

/* serve_sync_unlocked synchronizes s's context for the pool, with s's lock held on entry and on
 * return but not during the wait (another thread's allocation must not wait for the device), and
 * releases what was freed before it began: 1 on success. The pool may have been retired meanwhile:
 * the caller looks at s->state again. */
static int serve_sync_unlocked(struct served *s) {
	uint64_t g = cp_begin_release(&s->pool), mark = serve_apart_mark(), life = s->life;
	CUcontext ctx = s->ctx;
	pthread_mutex_unlock(&s->mu);
	int pushed = ctx_enter(ctx), ok = 0;
	if (pushed >= 0) {
		ok = g_real_sync() == 0;
		ctx_leave(pushed);
	}
	pthread_mutex_lock(&s->mu);
	if (ok && s->state == SV_SERVING && s->life == life) {
		serve_release_through(s, g);
		serve_apart_synced(mark);
	}
	return ok;
}

/* serve_order makes all work issued so far in s's context come before all work issued from now on,
 * for the pool, counted and timed, and releases what was freed before it: a barrier where it holds,
 * a join barrier where the program made non-blocking streams, else a synchronization of the context
 * (without s's lock held during the wait). 1 on success; 0 (nothing done) while a capture is in
 * progress or when it failed. */
static int serve_order(struct served *s) {
	if (serve_capturing())
		return 0;
	int64_t t0 = now_ns(CLOCK_MONOTONIC);
	int pushed = ctx_enter(s->ctx);
	if (pushed < 0)
		return 0;
	uint64_t g = cp_begin_release(&s->pool);
	int ok, r = serve_ordering_barrier(s);
	ctx_leave(pushed);
	if (r == JOIN_CAPTURING)
		return 0;
	if (r == JOIN_DONE) {
		ok = 1;
		serve_release_through(s, g);
		POOL_COUNT(barriers, 1);
	} else {
		ok = serve_sync_unlocked(s);
	}
	POOL_COUNT(syncs, 1);
	POOL_COUNT(sync_ns, now_ns(CLOCK_MONOTONIC) - t0);
	return ok;
}

/* The sizes pool.json sends to CUDA (pass_through_sizes: allocations the program exported by IPC in
 * the recording the plan came from), for the served calls to look up without a lock. */
static uint64_t g_pass_sizes[EXPORT_SIZES];
static int g_npass;

/* serve_parse_pass reads the spec's optional tail, "pass N SIZE...": 0, or -1 when malformed. */
static int serve_parse_pass(const char *s) {
	while (*s == ' ')
		s++;
	if (*s == '\0')
		return 0;
	if (strncmp(s, "pass ", 5) != 0)
		return -1;
	char *end;
	uint64_t n = strtoull(s + 5, &end, 10);
	if (end == s + 5 || n > EXPORT_SIZES)
		return -1;
	for (uint64_t i = 0; i < n; i++) {
		s = end;
		g_pass_sizes[i] = strtoull(s, &end, 10);
		if (end == s || g_pass_sizes[i] == 0)
			return -1;
	}
	g_npass = (int)n;
	return 0;
}

/* serve_passes reports whether pool.json sends requests of size bytes to CUDA. */
static inline int serve_passes(uint64_t size) {
	for (int i = 0; i < g_npass; i++)
		if (g_pass_sizes[i] == size)
			return 1;
	return 0;
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
	return serve_parse_pass(s);
}

void serve_init(void) {
	const char *spec = getenv("ALLOCSCOPE_POOL");
	if (spec == NULL || spec[0] == '\0')
		return;
	if (serve_parse(spec, &g_serve_cfg) != 0) {
		static const char msg[] = "allocscope: ALLOCSCOPE_POOL is not a pool spec; allocations go to CUDA\n";
		say(msg, sizeof msg - 1);
		return;
	}
	if ((g_serve_cfg.align != 0 && (g_serve_cfg.align < SERVE_MIN_ALIGN || (g_serve_cfg.align & (g_serve_cfg.align - 1)) != 0)) ||
	    cp_book_bytes(&g_serve_cfg) > SERVE_MAX_BOOK) {
		static const char msg[] = "allocscope: ALLOCSCOPE_POOL's alignment is not a power of two of at least 256 "
					  "bytes, or its plan's bookkeeping would take over 1 GiB of host memory; "
					  "allocations go to CUDA\n";
		say(msg, sizeof msg - 1);
		return;
	}
	for (int i = 0; i < SERVE_POOLS; i++)
		pthread_mutex_init(&g_served[i].mu, NULL);
	__atomic_store_n(&g_sv.on, 1, __ATOMIC_RELEASE);
}

/* serve_reserve reserves a region for pool s (its lock held) in s's context, and lists it. */
static int serve_reserve(void *ctx, uint64_t size, uint64_t *addr) {
	struct served *s = ctx;
	CUdeviceptr p = 0;
	int pushed = ctx_enter(s->ctx);
	if (pushed < 0)
		return CP_ERR;
	CUresult r = g_real_alloc(&p, size);
	ctx_leave(pushed);
	if (r != 0)
		return pool_reserve_failed(ctx, r);
	POOL_COUNT(reservations, 1);
	ranges_add(p, size, (int)(s - g_served));
	*addr = p;
	return CP_OK;
}

/* serve_any_capturing reports whether a stream the shim knows captures a graph: a blocking one (the
 * legacy stream says so), one the shim saw begin a capture, or a non-blocking one the program made. */
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

/* serve_release gives a region of pool s back to CUDA, in s's context. cuMemFree_v2 waits for the
 * device, so a block of it whose stream-ordered free is still in flight is done with. While a stream
 * captures a graph, the pool's give-back of idle regions (cp_release_idle) is refused instead
 * (CP_ERR: the region stays), as the free could break the capture, and PyTorch's allocator frees no
 * cached blocks then either; closing the pool gives everything back. */
static int serve_release(void *ctx, uint64_t addr, uint64_t size) {
	struct served *s = ctx;
	if (!s->pool.closed && serve_any_capturing())
		return CP_ERR;
	int pushed = ctx_enter(s->ctx);
	if (pushed < 0)
		return CP_ERR;
	ranges_remove(addr, (int)(s - g_served)); /* before CUDA may hand the addresses out again */
	CUresult r = g_real_free(addr);
	ctx_leave(pushed);
	if (r != 0) {
		ranges_add(addr, size, (int)(s - g_served));
		return CP_ERR;
	}
	return CP_OK;
}

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

int serve_on(void) {
	(void)shim_enabled(); /* starts the shim */
	return __atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE);
}

static struct {
	int state;
	struct cp_book book;
} g_spare;

void serve_prepare(void) {
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

/* serve_make builds the pool of slot s for its context (its lock held). */
static void serve_make(struct served *s) {
	s->state = SV_FAILED;
	s->failed_at = __atomic_load_n(&g_ctx_epoch, __ATOMIC_ACQUIRE);
	if (s->inflight.data == NULL) /* a pool made again after giving its plan back keeps its events */
		s->inflight = (struct cp_vec){NULL, 0, 0, sizeof(struct inflight), NULL, 0};
	if (s->events.data == NULL)
		s->events = (struct cp_vec){NULL, 0, 0, sizeof(void *), NULL, 0};
	s->prune_at = 64;
	s->multi = s->keyed = 0;
	s->life = __atomic_add_fetch(&g_lives, 1, __ATOMIC_ACQ_REL);
	if (!serve_resolve())
		return;
	int err = cp_init_book(&s->pool, &g_serve_cfg, (struct cp_upstream){serve_reserve, serve_release, s, NULL},
			       serve_take_spare());
	if (err != CP_OK) {
		cp_close(&s->pool);
		char buf[160];
		int n = snprintf(buf, sizeof buf, "allocscope: cannot reserve the pool on device %d (error %d); "
				 "its allocations go to CUDA\n", s->device, err);
		if (n > 0)
			say(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
		return;
	}
	s->state = SV_SERVING;
	__atomic_or_fetch(&g_sv.pools, 1ull << (s - g_served), __ATOMIC_RELEASE);
	pool_note_peak(s);
}

/* serve_note_stream notes a stream-ordered call on st (or an allocation by a synchronous call): the
 * second stream seen, or a stream destroyed, makes the pool order its context once and track
 * stream-ordered frees with events from then on. 1, or 0 when that ordering could not be made (a
 * capture is in progress): nothing is noted, the call must not take a reusable block, and the next
 * call tries again. The lock may be let go meanwhile (serve_order): the caller checks s->state. */
static int serve_note_stream(struct served *s, struct stream_ref st) {
	unsigned destroyed = __atomic_load_n(&g_sv.destroyed, __ATOMIC_ACQUIRE);
	if (s->multi) {
		if (destroyed == s->destroyed)
			return 1;
		if (!serve_order(s)) /* a stream's free list may pass to a new stream of its handle */
			return 0;
		s->destroyed = destroyed;
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
	return 1;
}

/* serve_guard makes the user of a block just handed out at [addr, addr+size) wait for the work of
 * other streams that freed what overlaps it, when that work may still run: a stream user's stream
 * waits for their events; a synchronous allocation collects them into w, for the host to wait for
 * once the lock is let go (1 when w filled up before every entry was seen: call again after the
 * wait). An entry the block covers is done with once waited for: whoever frees the block next
 * orders it after that wait. One it covers in part stays listed for the users of the rest. */
static int serve_guard(struct served *s, uint64_t addr, uint64_t size, struct stream_ref st, struct host_waits *w) {
	uint64_t end = addr + (size > 0 ? size : 1);
	size_t kept = 0, i = 0;
	int full = 0;
	for (; i < s->inflight.len && !full; i++) {
		struct inflight q = CP_AT(&s->inflight, struct inflight, i);
		int covered = q.addr >= addr && q.end <= end;
		if (q.addr < end && addr < q.end && !(st.async && q.key == st.key) && g_real_event.query(q.event) != 0) {
			if (st.async && g_real_event.wait((CUstream)(uintptr_t)st.handle, q.event, 0) == 0) {
				POOL_COUNT(stream_waits, 1);
			} else if (w->n < HOST_WAITS) {
				w->w[w->n].event = q.event, w->w[w->n++].owned = covered;
				POOL_COUNT(host_waits, 1);
				if (covered)
					continue; /* its event is the waiter's until the wait is over */
			} else {
				full = 1;
				i--; /* not looked at: kept below */
				continue;
			}
		}
		if (covered) {
			serve_spare_event(s, q.event);
			continue;
		}
		CP_AT(&s->inflight, struct inflight, kept++) = q;
	}
	for (; i < s->inflight.len; i++)
		CP_AT(&s->inflight, struct inflight, kept++) = CP_AT(&s->inflight, struct inflight, i);
	s->inflight.len = kept;
	return full;
}

/* serve_wait_host waits, without s's lock, for the events a synchronous allocation collected, then
 * gives those it owns back to s's spare list (s's lock held on entry and on return). An event still
 * listed may be recorded again once complete: waiting for it then only waits longer. */
static void serve_wait_host(struct served *s, struct host_waits *w) {
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < w->n; i++)
		g_real_event.synchronize(w->w[i].event);
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < w->n; i++)
		if (w->w[i].owned)
			serve_spare_event(s, w->w[i].event);
	w->n = 0;
}

/* serve_needs_event reports whether a block freed on st may be handed out on another stream: not
 * when the pool keeps freed blocks per stream and st is a stream of its own (a handle, not the
 * legacy or a per-thread default stream, which other threads and the synchronous calls share). */
static int serve_needs_event(struct served *s, struct stream_ref st) {
	return !(s->pool.cfg.per_stream && st.policy > STREAM_PER_THREAD);
}

/* serve_track records an event on the stream that freed [addr, addr+size): 0, or -1 when it could
 * not (the block must then wait for a release point like a synchronous free's). */
static int serve_track(struct served *s, uint64_t addr, uint64_t size, struct stream_ref st) {
	if (s->inflight.len >= s->prune_at)
		serve_drop_inflight(s, 0, 0);
	void *ev = NULL;
	if (s->events.len > 0)
		ev = CP_AT(&s->events, void *, --s->events.len);
	else if (g_real_event.create(&ev, 0x2 /* CU_EVENT_DISABLE_TIMING */) != 0)
		return -1;
	POOL_COUNT(events, 1);
	if (cp_vec_reserve(&s->inflight, s->inflight.len + 1) != 0 ||
	    g_real_event.record(ev, (CUstream)(uintptr_t)st.handle) != 0) {
		serve_spare_event(s, ev);
		return -1;
	}
	CP_AT(&s->inflight, struct inflight, s->inflight.len++) =
		(struct inflight){addr, addr + (size ? size : 1), st.key, s->pool.gen, ev};
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

/* serve_take serves size bytes from s (its lock held; it may be let go meanwhile, and the pool
 * retired: then CP_CLOSED). A request that would grow the pool while blocks are deferred first
 * orders the context once (serve_order) and takes what that released; a growth that finds the
 * device out of memory gives back idle regions and asks once more (cp_release_idle). */
static int serve_take(struct served *s, uint64_t size, struct stream_ref st, uint64_t *addr) {
	if (!serve_note_stream(s, st))
		return CP_ERR; /* to CUDA */
	if (s->state != SV_SERVING)
		return CP_CLOSED;
	uint64_t fallbacks = s->pool.s.fallbacks;
	uint64_t idle = s->pool.s.idle_releases, idle_bytes = s->pool.s.idle_released_bytes;
	int err = cp_try_alloc(&s->pool, size, st.policy, addr);
	if (err == CP_WOULD_GROW) {
		if (s->pool.deferred.len > 0 && serve_order(s))
			s->pool.s.syncs++;
		if (s->state != SV_SERVING)
			return CP_CLOSED;
		err = cp_alloc_now(&s->pool, size, st.policy, addr);
	}
	serve_count_idle(s, idle, idle_bytes);
	if (s->pool.s.fallbacks != fallbacks) {
		POOL_COUNT(fallbacks, s->pool.s.fallbacks - fallbacks);
		pool_note_peak(s);
	}
	return err;
}

static TLS struct served *t_pool;      /* the thread's context's pool, while t_pool_epoch holds */
static TLS unsigned long t_pool_epoch; /* g_ctx_epoch + 1 when t_pool was found */

/* serve_slot_of returns the slot of ctx's pool, claiming a free one for it when there is none; NULL
 * when every slot is taken. */
static struct served *serve_slot_of(CUcontext ctx, int device) {
	for (int i = 0; i < SERVE_POOLS; i++) {
		struct served *s = &g_served[i];
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SV_FREE && __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE) == ctx)
			return s;
	}
	struct served *found = NULL;
	pthread_mutex_lock(&g_slots_mu);
	for (int i = 0; i < SERVE_POOLS && found == NULL; i++) {
		struct served *s = &g_served[i];
		int st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
		if (st != SV_FREE && s->ctx == ctx)
			found = s;
	}
	for (int i = 0; i < SERVE_POOLS && found == NULL; i++) {
		struct served *s = &g_served[i];
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SV_FREE)
			continue;
		s->device = device;
		__atomic_store_n(&s->ctx, ctx, __ATOMIC_RELEASE);
		__atomic_store_n(&s->state, SV_NEW, __ATOMIC_RELEASE);
		found = s;
	}
	pthread_mutex_unlock(&g_slots_mu);
	return found;
}

/* serve_primary_of returns a serving pool of device d's primary context, for a runtime call on a
 * thread the runtime has not bound to a context yet (it binds it to device 0's primary context). */
static struct served *serve_primary_of(int d, CUcontext *ctx) {
	for (uint64_t m = __atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE); m != 0; m &= m - 1) {
		struct served *s = &g_served[__builtin_ctzll(m)];
		if (s->device == d && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SV_SERVING) {
			*ctx = s->ctx;
			return s;
		}
	}
	return NULL;
}

static struct served *serve_current(int runtime, CUcontext *ctx) {
	unsigned long epoch = __atomic_load_n(&g_ctx_epoch, __ATOMIC_ACQUIRE);
	if (t_pool_epoch == epoch + 1) {
		*ctx = t_pool->ctx;
		return t_pool;
	}
	int d = -1;
	if (ctx_current(ctx, &d) != 0)
		return runtime && !__atomic_load_n(&g_ctx_made, __ATOMIC_ACQUIRE) ? serve_primary_of(0, ctx) : NULL;
	struct served *s = serve_slot_of(*ctx, d);
	if (s != NULL && !ctx_several())
		t_pool = s, t_pool_epoch = epoch + 1;
	return s;
}

/* serve_for_stream returns the pool of the context of a stream-ordered call's stream. */
static struct served *serve_for_stream(struct stream_ref st, int runtime, CUcontext *ctx) {
	if (!ctx_several() || st.handle <= STREAM_PER_THREAD)
		return serve_current(runtime, ctx);
	int d = -1;
	if (ctx_of_stream(st.handle, ctx, &d) != 0)
		return NULL;
	return serve_slot_of(*ctx, d);
}

/* serve_lock takes s's lock for a call in ctx: 1 when s is ctx's pool and can serve (it is made
 * first when new, or again when it could not be made and the contexts changed since), else 0 with
 * the lock let go and *why the reason. */
static int serve_lock(struct served *s, CUcontext ctx, int *why) {
	pthread_mutex_lock(&s->mu);
	if (s->ctx != ctx || s->state == SV_FREE || s->state == SV_RETIRING) {
		pthread_mutex_unlock(&s->mu);
		*why = PASS_RETIRED;
		return 0;
	}
	if (s->state == SV_FAILED && s->failed_at != __atomic_load_n(&g_ctx_epoch, __ATOMIC_ACQUIRE))
		s->state = SV_NEW;
	if (s->state == SV_NEW)
		serve_make(s);
	if (s->state != SV_SERVING) {
		pthread_mutex_unlock(&s->mu);
		*why = -1; /* pool_pass_reason's to say, outside the pool */
		return 0;
	}
	return 1;
}

int serve_alloc(uint64_t size, struct stream_ref st, int runtime, uint64_t *addr) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || size == 0)
		return 0;
	serve_prefetch(__atomic_load_n(&g_sv.pools, __ATOMIC_RELAXED));
	int why = PASS_OTHER;
	CUcontext ctx = NULL;
	struct served *s = NULL;
	if (t_serving)
		why = PASS_SIGNAL;
	else if (g_npass > 0 && serve_passes(size))
		why = PASS_EXCLUDED;
	else if (st.async ? serve_stream_captures(st) : capture_forbids_sync())
		why = PASS_CAPTURE;
	else if ((s = st.async ? serve_for_stream(st, runtime, &ctx) : serve_current(runtime, &ctx)) == NULL)
		why = PASS_NO_CONTEXT;
	if (s == NULL) {
		POOL_PASS(why);
		return 0;
	}
	t_serving = 1;
	int err = CP_ERR;
	if (serve_lock(s, ctx, &why)) {
		err = serve_take(s, size, st, addr);
		if (err == CP_OK && s->inflight.len > 0) {
			struct host_waits w = {0};
			for (int more = 1; more;) {
				more = serve_guard(s, *addr, size, st, &w);
				if (w.n > 0)
					serve_wait_host(s, &w);
			}
		}
		why = -1;
		pthread_mutex_unlock(&s->mu);
	}
	t_serving = 0;
	serve_late_frees();
	if (err != CP_OK)
		POOL_PASS(why >= 0 ? why : pool_pass_reason(s, err));
	return err == CP_OK;
}

/* serve_give_back takes a free of addr on stream st into s (its lock held; s's reservations hold
 * addr): *result is the call's result. GIVEN_AFTER_STREAM when the block is to be freed once the
 * stream's work is done (a stream of another context: the pool's events cannot be recorded there). */
static int serve_give_back(struct served *s, uint64_t addr, struct stream_ref st, int other_ctx, int *result) {
	uint64_t size = 0;
	int state = cp_lookup(&s->pool, addr, &size);
	*result = 0;
	if (state != CP_OK) { /* a second free, or no block starts there: what CUDA says of a pointer it does not know */
		*result = RESULT_INVALID_VALUE;
		return GIVEN;
	}
	if (!st.async && capture_forbids_sync()) {
		*result = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* as CUDA's; the block stays live */
		return GIVEN;
	}
	if (st.async && serve_stream_captures(st)) {
		POOL_COUNT(captured_frees, 1); /* a graph's free: the graph may use the block at every launch */
		return GIVEN;
	}
	if (st.async && other_ctx)
		return GIVEN_AFTER_STREAM;
	if (st.async && serve_note_stream(s, st) && s->state == SV_SERVING) { /* else: a release point's */
		if (!s->multi || !serve_needs_event(s, st) || serve_track(s, addr, size, st) == 0) {
			*result = cp_free(&s->pool, addr, st.policy) == CP_OK ? 0 : RESULT_INVALID_VALUE;
			return GIVEN;
		}
	}
	if (s->state != SV_SERVING)
		return GIVEN; /* retired meanwhile: its memory went with its context */
	/* CP_ERR: no memory for the list; the block stays live (never unsafe), the call says out of memory */
	*result = cp_defer_free(&s->pool, addr, st.policy) == CP_OK ? 0 : 2;
	return GIVEN;
}

/* serve_other_ctx reports whether a stream-ordered free of a block of s names a stream of another
 * context (asked only where contexts can differ). */
static int serve_other_ctx(struct served *s, struct stream_ref st) {
	if (!st.async || !ctx_several())
		return 0;
	CUcontext c = NULL;
	int d;
	return ctx_of_stream(st.handle, &c, &d) != 0 || c != s->ctx;
}

/* serve_free_in takes a free of addr on stream st into s, when s's reservations hold it (listed:
 * g_ranges says so): 1 with *result the call's result, else 0. The pool's own driver calls are made
 * in s's context. */
static int serve_free_in(struct served *s, int listed, uint64_t addr, struct stream_ref st, int *result) {
	int other = serve_other_ctx(s, st), taken = 0;
	int pushed = ctx_several() ? ctx_enter(s->ctx) : 0;
	pthread_mutex_lock(&s->mu);
	if (s->state == SV_RETIRING && listed) {
		taken = 1, *result = 0; /* its memory goes with its context, now being reset or destroyed */
	} else if (s->state == SV_SERVING && cp_owns(&s->pool, addr)) { /* the lock-free list may be stale */
		taken = 1;
		if (serve_give_back(s, addr, st, other, result) == GIVEN_AFTER_STREAM && g_ctx.stream_sync != NULL) {
			pthread_mutex_unlock(&s->mu);
			g_ctx.stream_sync((CUstream)(uintptr_t)st.handle); /* its work before the free is done */
			pthread_mutex_lock(&s->mu);
			if (s->state == SV_SERVING)
				*result = cp_free(&s->pool, addr, st.policy) == CP_OK ? 0 : RESULT_INVALID_VALUE;
			POOL_COUNT(host_waits, 1);
		}
	}
	pthread_mutex_unlock(&s->mu);
	ctx_leave(pushed);
	return taken;
}

int serve_free(uint64_t addr, struct stream_ref st, int *result) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || addr == 0)
		return 0;
	int slot = ranges_find(addr);
	if (slot == -1)
		return 0;
	if (t_serving) {
		*result = 0;
		return serve_queue_late(addr, st);
	}
	int taken = 0;
	t_serving = 1;
	for (int i = slot >= 0 ? slot : 0; i < (slot >= 0 ? slot + 1 : SERVE_POOLS) && !taken; i++)
		taken = serve_free_in(&g_served[i], slot >= 0, addr, st, result);
	t_serving = 0;
	serve_late_frees();
	return taken;
}

static TLS struct { int n; uint64_t addr[LATE_FREES]; struct stream_ref st[LATE_FREES]; } t_late;

static int serve_queue_late(uint64_t addr, struct stream_ref st) {
	if (t_late.n < LATE_FREES) {
		t_late.addr[t_late.n] = addr, t_late.st[t_late.n] = st;
		SIGNAL_FENCE();
		t_late.n++;
	} else {
		POOL_COUNT(late_frees_kept, 1);
	}
	return 1;
}

/* serve_late_frees makes the frees a signal handler queued (outside the pool). */
static void serve_late_frees(void) {
	while (t_late.n > 0) {
		int i = --t_late.n, r;
		serve_free(t_late.addr[i], t_late.st[i], &r);
	}
}

/* serve_release_plan gives the whole pool of s back to CUDA when it holds no block at all (none live,
 * none deferred) and no capture is in progress (s's lock held): the bytes given back. The pool is made
 * again, plan and all, at its context's next allocation. For a program that frees everything and
 * then asks CUDA for more than the memory the plan leaves, as it could without the pool. */
static uint64_t serve_release_plan(struct served *s) {
	uint64_t bytes = s->pool.s.reserved_bytes;
	if (s->pool.s.live_bytes != 0 || s->pool.deferred.len != 0 || bytes == 0 || serve_any_capturing())
		return 0;
	cp_close(&s->pool);
	__atomic_and_fetch(&g_sv.pools, ~(1ull << (s - g_served)), __ATOMIC_ACQ_REL);
	s->state = SV_NEW;
	POOL_COUNT(idle_releases, 1);
	POOL_COUNT(idle_released_bytes, bytes);
	return bytes;
}

int serve_release_idle(void) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving)
		return 0;
	CUcontext ctx = NULL;
	struct served *s = serve_current(0, &ctx);
	if (s == NULL || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SV_SERVING)
		return 0;
	t_serving = 1;
	pthread_mutex_lock(&s->mu);
	uint64_t bytes = 0;
	if (s->state == SV_SERVING && s->ctx == ctx) {
		uint64_t idle = s->pool.s.idle_releases, idle_bytes = s->pool.s.idle_released_bytes;
		bytes = cp_release_idle(&s->pool);
		serve_count_idle(s, idle, idle_bytes);
		if (bytes == 0) /* the last resort: the plan itself */
			bytes = serve_release_plan(s);
	}
	pthread_mutex_unlock(&s->mu);
	t_serving = 0;
	return bytes > 0;
}

struct sync_mark serve_sync_begins(void) {
	struct sync_mark m = {NULL, NULL, 0, 0, 0};
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving)
		return m;
	struct served *s = serve_current(0, &m.ctx);
	if (s == NULL || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SV_SERVING)
		return m;
	t_serving = 1;
	pthread_mutex_lock(&s->mu);
	if (s->state == SV_SERVING && s->ctx == m.ctx)
		m.s = s, m.gen = cp_begin_release(&s->pool), m.gone = serve_apart_mark(), m.life = s->life;
	pthread_mutex_unlock(&s->mu);
	t_serving = 0;
	return m;
}

void serve_sync_ended(struct sync_mark m, int ok) {
	if (m.s == NULL || !ok)
		return;
	t_serving = 1;
	pthread_mutex_lock(&m.s->mu);
	if (m.s->state == SV_SERVING && m.s->life == m.life) {
		serve_release_through(m.s, m.gen);
		serve_apart_synced(m.gone);
	}
	pthread_mutex_unlock(&m.s->mu);
	t_serving = 0;
	serve_late_frees();
}

int serve_export_refused(uint64_t addr) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || addr == 0 || ranges_find(addr) < 0)
		return 0;
	POOL_COUNT(ipc_exports, 1);
	static int said;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL)) {
		static const char msg[] = "allocscope: the program asked for an IPC handle (cudaIpcGetMemHandle) of a block "
					  "of record --pool's pool; refused with an invalid-value error, as CUDA refuses "
					  "stream-ordered blocks: record this program without --pool\n";
		say(msg, sizeof msg - 1);
	}
	return 1;
}

int serve_address_range(uint64_t addr, uint64_t *base, uint64_t *size) {
	if (!__atomic_load_n(&g_sv.on, __ATOMIC_ACQUIRE) || t_serving || addr == 0)
		return 0;
	int slot = ranges_find(addr);
	if (slot < 0)
		return 0;
	struct served *s = &g_served[slot];
	t_serving = 1;
	pthread_mutex_lock(&s->mu);
	int r = s->state == SV_SERVING ? (cp_block_at(&s->pool, addr, base, size) ? 1 : -1) : 0;
	pthread_mutex_unlock(&s->mu);
	t_serving = 0;
	return r;
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

int serve_stream_destroying(uint64_t stream) {
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
		int pushed = ctx_enter(g_apart.ctx); /* the stream's context, where its events are made */
		if (pushed >= 0 && g_apart.left < APART_MAX && g_real_event.record != NULL &&
		    (*e != NULL || g_real_event.create(e, 0x2 /* DISABLE_TIMING */) == 0) &&
		    g_real_event.record(*e, (CUstream)(uintptr_t)stream) == 0)
			g_apart.left++, g_apart.gone_total++;
		else
			__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		ctx_leave(pushed);
		break;
	}
	t_destroying = stream;
	return 1;
}

void serve_stream_destroyed(uint64_t stream, int destroyed) {
	for (size_t i = 0; destroyed && i < g_apart.n; i++)
		if (g_apart.stream[i] == stream) {
			g_apart.stream[i] = g_apart.stream[--g_apart.n];
			break;
		}
	t_destroying = 0;
	serve_apart_unlock();
}

int serve_stream_making(void) {
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
static int serve_after_barriers(uint64_t stream) {
	for (uint64_t m = __atomic_load_n(&g_sv.pools, __ATOMIC_ACQUIRE); m != 0; m &= m - 1) {
		void *barrier = g_served[__builtin_ctzll(m)].barrier;
		if (barrier != NULL && g_real_event.wait((CUstream)(uintptr_t)stream, barrier, 0) != 0)
			return 0;
	}
	return 1;
}

void serve_stream_made(uint64_t stream, int green) {
	if (!serve_apart_lock())
		return;
	g_apart.making--;
	int waits = 1;
	if (stream != 0) {
		CUcontext ctx = NULL;
		int d;
		if (ctx_current(&ctx, &d) == 0 && g_apart.ctx == NULL)
			g_apart.ctx = ctx; /* the first stream's context: the others must share it */
		if (!green && g_apart.n < APART_MAX && ctx != NULL && ctx == g_apart.ctx)
			g_apart.stream[g_apart.n++] = stream;
		else
			__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
		waits = serve_after_barriers(stream);
	}
	serve_apart_unlock();
	if (!waits && (g_real_sync == NULL || g_real_sync() != 0))
		__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
}

static CUcontext g_made[MADE_MAX];

void serve_ctx_made(CUcontext c) {
	for (int i = 0; i < MADE_MAX; i++) {
		CUcontext none = NULL;
		if (__atomic_compare_exchange_n(&g_made[i], &none, c, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return;
	}
}

void serve_ctx_unmade(CUcontext c) {
	for (int i = 0; i < MADE_MAX; i++) {
		CUcontext k = c;
		if (__atomic_compare_exchange_n(&g_made[i], &k, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return;
	}
}

/* serve_is_made reports whether the program made context c itself. */
static int serve_is_made(CUcontext c) {
	for (int i = 0; i < MADE_MAX; i++)
		if (__atomic_load_n(&g_made[i], __ATOMIC_ACQUIRE) == c)
			return 1;
	return 0;
}

uint64_t serve_retiring(CUcontext ctx, int d) {
	if (!serve_on() || t_serving)
		return 0;
	uint64_t mask = 0;
	t_serving = 1;
	for (int i = 0; i < SERVE_POOLS; i++) {
		struct served *s = &g_served[i];
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SV_FREE)
			continue;
		pthread_mutex_lock(&s->mu);
		int mine = ctx != NULL ? s->ctx == ctx : d >= 0 && s->device == d && !serve_is_made(s->ctx);
		if (mine && s->state != SV_FREE && s->state != SV_RETIRING) {
			s->resume = s->state;
			s->state = SV_RETIRING;
			mask |= 1ull << i;
		}
		pthread_mutex_unlock(&s->mu);
	}
	t_serving = 0;
	return mask;
}

void serve_retired(uint64_t mask, int destroyed) {
	if (mask == 0)
		return;
	t_serving = 1;
	for (uint64_t m = mask; m != 0; m &= m - 1) {
		int i = __builtin_ctzll(m);
		struct served *s = &g_served[i];
		pthread_mutex_lock(&s->mu);
		if (!destroyed) {
			s->state = s->resume;
			pthread_mutex_unlock(&s->mu);
			continue;
		}
		__atomic_and_fetch(&g_sv.pools, ~(1ull << i), __ATOMIC_ACQ_REL);
		ranges_remove(0, i);
		if (s->resume == SV_SERVING)
			cp_discard(&s->pool);
		memset(&s->pool, 0, sizeof s->pool);
		cp_vec_free(&s->inflight); /* their events went with the context */
		cp_vec_free(&s->events);
		s->barrier = NULL, s->multi = s->keyed = 0;
		pthread_mutex_lock(&g_slots_mu);
		__atomic_store_n(&s->state, SV_FREE, __ATOMIC_RELEASE);
		__atomic_store_n(&s->ctx, NULL, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&g_slots_mu);
		pthread_mutex_unlock(&s->mu);
		POOL_COUNT(retired, 1);
	}
	serve_apart_forget();
	context_changes();
	t_serving = 0;
}

/* serve_apart_clear forgets every stream and event g_apart knows (g_apart's lock held, or no other
 * thread: a forked child). */
static void serve_apart_clear(void) {
	g_apart.n = g_apart.left = 0, g_apart.ctx = NULL;
	memset(g_apart.event, 0, sizeof g_apart.event);
	memset(g_apart.gone, 0, sizeof g_apart.gone);
}

/* serve_apart_forget drops the streams and events g_apart knows after a context was destroyed: with
 * one device and no context of the program's own they were that context's; otherwise joins end. */
static void serve_apart_forget(void) {
	pthread_mutex_lock(&g_apart.mu);
	if (ctx_several()) {
		__atomic_store_n(&g_apart.lost, 1, __ATOMIC_RELEASE);
	} else {
		serve_apart_clear();
	}
	pthread_mutex_unlock(&g_apart.mu);
	__atomic_add_fetch(&g_sv.destroyed, 1, __ATOMIC_ACQ_REL);
}

void serve_forget(void) {
	g_sv.pools = 0;
	memset(g_noted, 0, sizeof g_noted);
	for (int i = 0; i < SERVE_POOLS; i++) {
		struct served *s = &g_served[i];
		memset(s, 0, sizeof *s); /* the parent's tables stay mapped, unused */
		s->state = SV_FREE;
		pthread_mutex_init(&s->mu, NULL);
	}
	pthread_mutex_init(&g_slots_mu, NULL);
	pthread_mutex_init(&g_apart.mu, NULL); /* the parent's streams and events are not the child's */
	g_apart.making = 0;
	serve_apart_clear();
	ranges_forget();
	memset(&g_cap, 0, sizeof g_cap);
	t_serving = 0, t_pool = NULL, t_pool_epoch = 0, t_late.n = 0;
}
