/* contexts.c: see contexts.h. */
#include "contexts.h"

/* ---- current device ------------------------------------------------------------------------------
 * A thread's device comes from the driver (cuCtxGetDevice, resolved once). Its first call after the
 * program ran a while costs about 0.8 us on the H200 host, its data being out of the caches. Where
 * the process sees one device, a thread that has a context is always on device 0, so the thread
 * remembers that it had one until any thread unsets, pops or destroys a context (g_ctx_epoch), and
 * asks again after that. */

typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *);
typedef CUresult (*cuDeviceGetCount_fn)(int *);
static cuCtxGetDevice_fn g_ctx_get_device;
unsigned long g_ctx_epoch;     /* bumped before every call that may leave a thread without a context */
static TLS unsigned long t_ctx_known; /* g_ctx_epoch + 1 when this thread had a context on the only device */
static int g_one_device;              /* 1: the process sees one device, -1: more, 0: not known yet */

/* one_device reports whether the process sees exactly one device (asked until the driver answers). */
int one_device(void) {
	int known = __atomic_load_n(&g_one_device, __ATOMIC_ACQUIRE);
	if (known != 0)
		return known == 1;
	static cuDeviceGetCount_fn count;
	cuDeviceGetCount_fn f = __atomic_load_n(&count, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		dlsym_fn rd = get_real_dlsym();
		f = h != NULL && rd != NULL ? (cuDeviceGetCount_fn)rd(h, "cuDeviceGetCount") : NULL;
		if (h != NULL)
			shim_dlclose(h);
		if (f == NULL) { /* a driver without it: the device is asked at every call */
			__atomic_store_n(&g_one_device, -1, __ATOMIC_RELEASE);
			return 0;
		}
		__atomic_store_n(&count, f, __ATOMIC_RELEASE);
	}
	int n = 0;
	if (f(&n) != 0)
		return 0;
	__atomic_store_n(&g_one_device, n == 1 ? 1 : -1, __ATOMIC_RELEASE);
	return n == 1;
}

/* context_changes notes a call that may leave threads without a context: every thread asks again. */
void context_changes(void) { __atomic_add_fetch(&g_ctx_epoch, 1, __ATOMIC_ACQ_REL); }

int current_device(void) {
	unsigned long epoch = __atomic_load_n(&g_ctx_epoch, __ATOMIC_ACQUIRE);
	if (t_ctx_known == epoch + 1)
		return 0;
	cuCtxGetDevice_fn f = __atomic_load_n(&g_ctx_get_device, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		if (h == NULL)
			return -1;
		dlsym_fn rd = get_real_dlsym();
		f = rd ? (cuCtxGetDevice_fn)rd(h, "cuCtxGetDevice") : NULL;
		shim_dlclose(h);
		if (f == NULL)
			return -1;
		__atomic_store_n(&g_ctx_get_device, f, __ATOMIC_RELEASE);
	}
	CUdevice d = -1;
	if (f(&d) != 0)
		return -1;
	if (d == 0 && one_device())
		t_ctx_known = epoch + 1;
	return d;
}


struct ctx_state g_ctx;

int g_ctx_made; /* the program made a context of its own (cuCtxCreate): threads ask at every call */

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

int ctx_current(CUcontext *ctx, int *device) {
	ctx_resolve();
	if (g_ctx.get_current == NULL) {
		int d = current_device();
		*ctx = ctx_key_of_device(d), *device = d;
		return d >= 0 ? 0 : -1;
	}
	CUcontext c = NULL;
	if (g_ctx.get_current(&c) != 0 || c == NULL)
		return -1;
	int d = current_device(); /* remembered per thread where the process sees one device */
	if (d < 0)
		return -1;
	*ctx = c, *device = d;
	return 0;
}

int ctx_several(void) { return !one_device() || __atomic_load_n(&g_ctx_made, __ATOMIC_ACQUIRE); }

int ctx_of_stream(uint64_t stream, CUcontext *ctx, int *device) {
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

int ctx_enter(CUcontext ctx) {
	if (g_ctx.get_current == NULL)
		return 0;
	CUcontext cur = NULL;
	if (g_ctx.get_current(&cur) == 0 && cur == ctx)
		return 0;
	return g_ctx.push(ctx) == 0 ? 1 : -1;
}

void ctx_leave(int pushed) {
	CUcontext popped;
	if (pushed == 1)
		g_ctx.pop(&popped);
}

int ctx_primary_active(int d) {
	ctx_resolve();
	unsigned flags = 0;
	int active = 0;
	if (g_ctx.primary_state == NULL || g_ctx.primary_state(d, &flags, &active) != 0)
		return -1;
	return active != 0;
}

struct cap_state g_cap;

TLS int t_cap_mode; /* the thread's capture mode (cuThreadExchangeStreamCaptureMode), global at first */
/* The thread-local-mode captures this thread began and has not ended: CUDA has a capture that is not
 * relaxed ended on the thread that began it, so a count per thread is exact. */
static TLS int t_cap_local;

void capture_begun(uint64_t stream, int mode) {
	for (int i = 0; i < CAPTURES_MAX; i++) {
		uint64_t free_slot = 0;
		if (!__atomic_compare_exchange_n(&g_cap.slot[i].stream, &free_slot, stream ? stream : 1, 0,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			continue;
		g_cap.slot[i].mode = mode;
		if (mode == CAPTURE_THREAD_LOCAL)
			t_cap_local++;
		if (mode == CAPTURE_GLOBAL)
			__atomic_add_fetch(&g_cap.global, 1, __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&g_cap.active, 1, __ATOMIC_ACQ_REL);
		return;
	}
	__atomic_store_n(&g_cap.lost, 1, __ATOMIC_RELEASE);
}

void capture_ended(uint64_t stream) {
	uint64_t key = stream ? stream : 1;
	for (int i = 0; i < CAPTURES_MAX; i++) {
		if (__atomic_load_n(&g_cap.slot[i].stream, __ATOMIC_ACQUIRE) != key)
			continue;
		int mode = g_cap.slot[i].mode;
		uint64_t k = key;
		if (!__atomic_compare_exchange_n(&g_cap.slot[i].stream, &k, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			continue;
		if (mode == CAPTURE_THREAD_LOCAL && t_cap_local > 0)
			t_cap_local--;
		if (mode == CAPTURE_GLOBAL)
			__atomic_sub_fetch(&g_cap.global, 1, __ATOMIC_ACQ_REL);
		__atomic_sub_fetch(&g_cap.active, 1, __ATOMIC_ACQ_REL);
		return;
	}
}

int capture_forbids_sync(void) {
	if (!capture_any() || t_cap_mode == CAPTURE_RELAXED)
		return 0;
	return __atomic_load_n(&g_cap.global, __ATOMIC_ACQUIRE) > 0 || __atomic_load_n(&g_cap.lost, __ATOMIC_ACQUIRE) ||
	       t_cap_local > 0;
}

static struct {
	uint64_t base, end; /* end 0: free entry */
	int pool;
} g_ranges[RANGES_MAX];

static unsigned g_nranges;  /* entries ever used */

static int g_ranges_full;   /* a region could not be listed: frees of unlisted addresses ask every pool */

static pthread_mutex_t g_ranges_mu = PTHREAD_MUTEX_INITIALIZER; /* writers only, under a pool's lock */

void ranges_add(uint64_t base, uint64_t size, int pool) {
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

void ranges_remove(uint64_t base, int pool) {
	pthread_mutex_lock(&g_ranges_mu);
	for (unsigned i = 0; i < g_nranges; i++) {
		if (g_ranges[i].end == 0 || g_ranges[i].pool != pool || (base != 0 && g_ranges[i].base != base))
			continue;
		__atomic_store_n(&g_ranges[i].end, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&g_ranges[i].base, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_ranges_mu);
}

int ranges_find(uint64_t addr) {
	unsigned n = __atomic_load_n(&g_nranges, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < n && i < RANGES_MAX; i++) {
		uint64_t end = __atomic_load_n(&g_ranges[i].end, __ATOMIC_ACQUIRE);
		uint64_t base = __atomic_load_n(&g_ranges[i].base, __ATOMIC_ACQUIRE);
		if (end != 0 && addr >= base && addr < end)
			return g_ranges[i].pool;
	}
	return __atomic_load_n(&g_ranges_full, __ATOMIC_ACQUIRE) ? -2 : -1;
}

void ranges_forget(void) {
	memset(g_ranges, 0, sizeof g_ranges);
	g_nranges = 0, g_ranges_full = 0;
	pthread_mutex_init(&g_ranges_mu, NULL);
}
