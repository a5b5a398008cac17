/*
 * record --pool's view of CUDA contexts and graph captures, for serve.h.
 *
 * Contexts. A pool belongs to the context that owns its memory (serve.h). The driver functions that
 * name contexts are resolved once (ctx_resolve); a driver without cuCtxGetCurrent (an old fake) keys
 * a thread's context by its device instead. ctx_enter makes a pool's context current for the
 * pool's own driver calls (its events, barriers and synchronizations) when the thread's is another.
 *
 * Captures. The shim hooks the calls that begin and end a stream capture and the exchange of a
 * thread's capture mode, and keeps the captures in progress in a table (no lock: slots are claimed
 * with a compare-and-swap). While any capture is in progress the pools make no ordering of their own
 * (an event or synchronization could join or break it), a stream-ordered call on a capturing stream
 * (cuStreamIsCapturing asks the driver, so streams that joined a capture count too) goes to CUDA,
 * and a synchronous call that CUDA forbids during a capture (a global-mode capture anywhere, or a
 * thread-local one of the calling thread, unless the thread's mode is relaxed) is not served either.
 *
 * Reservations. Every region a pool reserved is listed in g_ranges, read without a lock, so that a
 * free can tell at once whether an address lies in a pool's memory (then it never reaches CUDA) and
 * which pool's, also from a signal handler.
 */
#ifndef ALLOCSCOPE_CONTEXTS_H
#define ALLOCSCOPE_CONTEXTS_H

#include "common.h"

typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_push_fn)(CUcontext);
typedef CUresult (*ctx_pop_fn)(CUcontext *);
typedef CUresult (*stream_ctx_fn)(CUstream, CUcontext *);
typedef CUresult (*primary_state_fn)(CUdevice, unsigned *, int *);
typedef CUresult (*stream_sync_fn)(CUstream);
typedef CUresult (*device_of_ctx_fn)(CUdevice *);

static struct {
	int resolved;
	ctx_get_fn get_current;       /* NULL: contexts are keyed by device */
	ctx_push_fn push;
	ctx_pop_fn pop;
	stream_ctx_fn stream_ctx;
	primary_state_fn primary_state;
	stream_sync_fn stream_sync;
	device_of_ctx_fn get_device;
} g_ctx;

static int g_ctx_made; /* the program made a context of its own (cuCtxCreate): threads ask at every call */

/* ctx_resolve finds the context functions in the loaded driver, once. */
static void ctx_resolve(void) {
	if (__atomic_load_n(&g_ctx.resolved, __ATOMIC_ACQUIRE))
		return;
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	dlsym_fn rd = get_real_dlsym();
	if (h == NULL || rd == NULL)
		return;
	g_ctx.push = (ctx_push_fn)rd(h, "cuCtxPushCurrent_v2");
	g_ctx.pop = (ctx_pop_fn)rd(h, "cuCtxPopCurrent_v2");
	g_ctx.stream_ctx = (stream_ctx_fn)rd(h, "cuStreamGetCtx");
	g_ctx.primary_state = (primary_state_fn)rd(h, "cuDevicePrimaryCtxGetState");
	g_ctx.stream_sync = (stream_sync_fn)rd(h, "cuStreamSynchronize");
	g_ctx.get_device = (device_of_ctx_fn)rd(h, "cuCtxGetDevice");
	ctx_get_fn get = (ctx_get_fn)rd(h, "cuCtxGetCurrent");
	if (g_ctx.push == NULL || g_ctx.pop == NULL)
		get = NULL; /* a context cannot be entered: keyed by device, never entered */
	g_ctx.get_current = get;
	shim_dlclose(h);
	__atomic_store_n(&g_ctx.resolved, 1, __ATOMIC_RELEASE);
}

/* ctx_key_of_device is the key of device d's context where the driver cannot name contexts. */
static inline CUcontext ctx_key_of_device(int d) { return (CUcontext)(uintptr_t)(d + 1); }

/* ctx_current names the calling thread's context and its device: 0, or -1 when it has none. */
static int ctx_current(CUcontext *ctx, int *device) {
	ctx_resolve();
	if (g_ctx.get_current == NULL) {
		int d = current_device();
		*ctx = ctx_key_of_device(d), *device = d;
		return d >= 0 ? 0 : -1;
	}
	CUcontext c = NULL;
	CUdevice d = -1;
	if (g_ctx.get_current(&c) != 0 || c == NULL || g_ctx.get_device == NULL || g_ctx.get_device(&d) != 0)
		return -1;
	*ctx = c, *device = d;
	return 0;
}

/* ctx_several reports whether a thread's context may differ from call to call in ways the per-thread
 * cache cannot see: several devices, or contexts the program made. */
static int ctx_several(void) { return !one_device() || __atomic_load_n(&g_ctx_made, __ATOMIC_ACQUIRE); }

/* ctx_of_stream names the context of stream (a handle the program passed): the thread's own for the
 * legacy, per-thread and NULL streams. 0, or -1 when it cannot be told. */
static int ctx_of_stream(uint64_t stream, CUcontext *ctx, int *device) {
	if (stream <= 0x2 || g_ctx.get_current == NULL || g_ctx.stream_ctx == NULL)
		return ctx_current(ctx, device);
	CUcontext c = NULL;
	if (g_ctx.stream_ctx((CUstream)(uintptr_t)stream, &c) != 0 || c == NULL)
		return -1;
	CUcontext cur = NULL;
	CUdevice d = -1;
	if (g_ctx.get_current(&cur) == 0 && cur == c) {
		if (g_ctx.get_device(&d) != 0)
			return -1;
	} else {
		if (g_ctx.push(c) != 0)
			return -1;
		CUresult r = g_ctx.get_device(&d);
		CUcontext popped;
		g_ctx.pop(&popped);
		if (r != 0)
			return -1;
	}
	*ctx = c, *device = d;
	return 0;
}

/* ctx_enter makes ctx current for the pool's own calls: 1 when it pushed it (ctx_leave pops it), 0
 * when it was current already or contexts are keyed by device, -1 when it could not. */
static int ctx_enter(CUcontext ctx) {
	if (g_ctx.get_current == NULL)
		return 0;
	CUcontext cur = NULL;
	if (g_ctx.get_current(&cur) == 0 && cur == ctx)
		return 0;
	return g_ctx.push(ctx) == 0 ? 1 : -1;
}

static void ctx_leave(int pushed) {
	CUcontext popped;
	if (pushed == 1)
		g_ctx.pop(&popped);
}

/* ctx_primary_active reports whether device d's primary context is active: 1, 0, or -1 when the driver
 * cannot say. */
static int ctx_primary_active(int d) {
	ctx_resolve();
	unsigned flags = 0;
	int active = 0;
	if (g_ctx.primary_state == NULL || g_ctx.primary_state(d, &flags, &active) != 0)
		return -1;
	return active != 0;
}

/* ---- captures in progress ------------------------------------------------------------------------- */

#define CAPTURES_MAX 64
enum { CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1, CAPTURE_RELAXED = 2 };

static struct {
	int active;             /* captures in progress */
	int global;             /* of them, in global mode */
	int lost;               /* one could not be noted (table full): the pools order nothing again */
	struct {
		uint64_t stream; /* 0: free slot */
		int mode;
		uint32_t tid;
	} slot[CAPTURES_MAX];
} g_cap;
static TLS int t_cap_mode; /* the thread's capture mode (cuThreadExchangeStreamCaptureMode), global at first */

/* capture_begun notes a capture that began on stream in mode. */
static void capture_begun(uint64_t stream, int mode) {
	for (int i = 0; i < CAPTURES_MAX; i++) {
		uint64_t free_slot = 0;
		if (!__atomic_compare_exchange_n(&g_cap.slot[i].stream, &free_slot, stream ? stream : 1, 0,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			continue;
		g_cap.slot[i].mode = mode;
		g_cap.slot[i].tid = (uint32_t)syscall(SYS_gettid);
		if (mode == CAPTURE_GLOBAL)
			__atomic_add_fetch(&g_cap.global, 1, __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&g_cap.active, 1, __ATOMIC_ACQ_REL);
		return;
	}
	__atomic_store_n(&g_cap.lost, 1, __ATOMIC_RELEASE);
}

/* capture_ended notes that the capture of stream ended (successfully or invalidated). */
static void capture_ended(uint64_t stream) {
	uint64_t key = stream ? stream : 1;
	for (int i = 0; i < CAPTURES_MAX; i++) {
		if (__atomic_load_n(&g_cap.slot[i].stream, __ATOMIC_ACQUIRE) != key)
			continue;
		int mode = g_cap.slot[i].mode;
		uint64_t k = key;
		if (!__atomic_compare_exchange_n(&g_cap.slot[i].stream, &k, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			continue;
		if (mode == CAPTURE_GLOBAL)
			__atomic_sub_fetch(&g_cap.global, 1, __ATOMIC_ACQ_REL);
		__atomic_sub_fetch(&g_cap.active, 1, __ATOMIC_ACQ_REL);
		return;
	}
}

/* capture_any reports whether a capture may be in progress: the pools then make no ordering. */
static inline int capture_any(void) {
	return __atomic_load_n(&g_cap.active, __ATOMIC_ACQUIRE) > 0 || __atomic_load_n(&g_cap.lost, __ATOMIC_ACQUIRE);
}

/* capture_forbids_sync reports whether CUDA refuses a synchronous allocation or free on this thread
 * now: a global-mode capture anywhere, or a thread-local one this thread began, unless its mode is
 * relaxed. */
static int capture_forbids_sync(void) {
	if (!capture_any() || t_cap_mode == CAPTURE_RELAXED)
		return 0;
	if (__atomic_load_n(&g_cap.global, __ATOMIC_ACQUIRE) > 0 || __atomic_load_n(&g_cap.lost, __ATOMIC_ACQUIRE))
		return 1;
	uint32_t tid = (uint32_t)syscall(SYS_gettid);
	for (int i = 0; i < CAPTURES_MAX; i++)
		if (__atomic_load_n(&g_cap.slot[i].stream, __ATOMIC_ACQUIRE) != 0 &&
		    g_cap.slot[i].mode == CAPTURE_THREAD_LOCAL && g_cap.slot[i].tid == tid)
			return 1;
	return 0;
}

/* ---- the pools' reservations ---------------------------------------------------------------------- */

#define RANGES_MAX 1024
static struct {
	uint64_t base, end; /* end 0: free entry */
	int pool;
} g_ranges[RANGES_MAX];
static unsigned g_nranges;  /* entries ever used */
static int g_ranges_full;   /* a region could not be listed: frees of unlisted addresses ask every pool */
static pthread_mutex_t g_ranges_mu = PTHREAD_MUTEX_INITIALIZER; /* writers only, under a pool's lock */

/* ranges_add lists [base, base+size) as pool's (the pool's lock held; readers take no lock). */
static void ranges_add(uint64_t base, uint64_t size, int pool) {
	pthread_mutex_lock(&g_ranges_mu);
	unsigned i = 0, n = g_nranges;
	while (i < n && g_ranges[i].end != 0)
		i++;
	if (i < RANGES_MAX) {
		g_ranges[i].pool = pool;
		__atomic_store_n(&g_ranges[i].base, base, __ATOMIC_RELEASE);
		__atomic_store_n(&g_ranges[i].end, base + size, __ATOMIC_RELEASE);
		if (i == n)
			__atomic_store_n(&g_nranges, n + 1, __ATOMIC_RELEASE);
	} else {
		__atomic_store_n(&g_ranges_full, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_ranges_mu);
}

/* ranges_remove unlists the region of pool that starts at base (base 0: all of pool's). */
static void ranges_remove(uint64_t base, int pool) {
	pthread_mutex_lock(&g_ranges_mu);
	for (unsigned i = 0; i < g_nranges; i++) {
		if (g_ranges[i].end == 0 || g_ranges[i].pool != pool || (base != 0 && g_ranges[i].base != base))
			continue;
		__atomic_store_n(&g_ranges[i].end, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&g_ranges[i].base, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_ranges_mu);
}

/* ranges_find returns the pool whose reservations hold addr, -1 for none, or -2 when the list is
 * incomplete and addr is in none of it (every pool must be asked). */
static int ranges_find(uint64_t addr) {
	unsigned n = __atomic_load_n(&g_nranges, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < n && i < RANGES_MAX; i++) {
		uint64_t end = __atomic_load_n(&g_ranges[i].end, __ATOMIC_ACQUIRE);
		uint64_t base = __atomic_load_n(&g_ranges[i].base, __ATOMIC_ACQUIRE);
		if (end != 0 && addr >= base && addr < end)
			return g_ranges[i].pool;
	}
	return __atomic_load_n(&g_ranges_full, __ATOMIC_ACQUIRE) ? -2 : -1;
}

/* ranges_forget empties the list (a forked child's pools are not the parent's). */
static void ranges_forget(void) {
	memset(g_ranges, 0, sizeof g_ranges);
	g_nranges = 0, g_ranges_full = 0;
	pthread_mutex_init(&g_ranges_mu, NULL);
}

#endif
