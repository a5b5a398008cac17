/*
 * `record --pool`: the shim serves the program's synchronous device allocations (cudaMalloc,
 * cuMemAlloc_v2) from the C pool (pool.h) that ALLOCSCOPE_POOL describes, one pool per device,
 * made at that device's first allocation over the real cuMemAlloc_v2/cuMemFree_v2. Every call is
 * still recorded.
 *
 * Reuse is as safe as the calls it replaces. cudaFree and cuMemFree_v2 wait for the device, so a
 * block freed that way is kept pending, not reusable, until all device work issued before the free
 * has completed: until the program synchronizes the device (cudaDeviceSynchronize, cuCtxSynchronize),
 * or until the pool would otherwise have to grow, when it synchronizes once itself (one
 * synchronization for many frees). A request the pool cannot serve goes to CUDA, which then returns
 * what it returns; an address the pool did not hand out is freed by CUDA. A call made while the
 * same thread is inside the pool (a signal handler) goes to CUDA. A forked child starts without the
 * parent's pools.
 */
#ifndef ALLOCSCOPE_SERVE_H
#define ALLOCSCOPE_SERVE_H

#include "common.h"
#include "pool.h"

#define SERVE_DEVICES 64

struct pending { uint64_t addr, stream; };

struct served {
	pthread_mutex_t mu;
	int state; /* 0: not made yet, 1: serving, 2: could not be made (calls go to CUDA) */
	struct cp_pool pool;
	struct cp_vec pending; /* struct pending: freed by the program, not reusable yet */
};

static int g_serve;                 /* ALLOCSCOPE_POOL was set and parsed */
static struct cp_config g_serve_cfg;
static struct served g_served[SERVE_DEVICES];
static TLS int t_serving;           /* this thread is inside a pool */

typedef CUresult (*real_alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*real_free_fn)(CUdeviceptr);
typedef CUresult (*real_sync_fn)(void);
static real_alloc_fn g_real_alloc;
static real_free_fn g_real_free;
static real_sync_fn g_real_sync;

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
	__atomic_store_n(&g_serve, 1, __ATOMIC_RELEASE);
}

static int serve_reserve(void *ctx, uint64_t size, uint64_t *addr) {
	(void)ctx;
	CUdeviceptr p = 0;
	CUresult r = g_real_alloc(&p, size);
	if (r != 0)
		return r == 2 ? CP_OOM : CP_ERR; /* CUDA_ERROR_OUT_OF_MEMORY */
	*addr = p;
	return CP_OK;
}

static int serve_release(void *ctx, uint64_t addr, uint64_t size) {
	(void)ctx, (void)size;
	return g_real_free(addr) == 0 ? CP_OK : CP_ERR;
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
	dlclose(h);
	if (g_real_alloc == NULL || g_real_free == NULL || sync == NULL)
		return 0;
	__atomic_store_n(&g_real_sync, sync, __ATOMIC_RELEASE);
	return 1;
}

/* serve_make builds device d's pool (its lock held). */
static void serve_make(struct served *s, int d) {
	s->state = 2;
	s->pending.elem = sizeof(struct pending);
	if (!serve_resolve())
		return;
	int err = cp_init(&s->pool, &g_serve_cfg, (struct cp_upstream){serve_reserve, serve_release, NULL});
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
}

/* serve_release_pending makes the pending blocks of s reusable: the device has synchronized. */
static void serve_release_pending(struct served *s) {
	for (size_t i = 0; i < s->pending.len; i++) {
		struct pending *q = &CP_AT(&s->pending, struct pending, i);
		cp_free(&s->pool, q->addr, q->stream);
	}
	s->pending.len = 0;
}

/* serve_alloc serves size bytes on the current device into *addr: 1, or 0 when the call is to go to
 * CUDA. Before a growth it makes the pending blocks reusable with one synchronization. */
static int serve_alloc(uint64_t size, uint64_t *addr) {
	if (!__atomic_load_n(&g_serve, __ATOMIC_ACQUIRE) || t_serving || size == 0)
		return 0;
	int d = current_device();
	if (d < 0 || d >= SERVE_DEVICES)
		return 0;
	struct served *s = &g_served[d];
	t_serving = 1;
	pthread_mutex_lock(&s->mu);
	if (s->state == 0)
		serve_make(s, d);
	int err = CP_ERR;
	if (s->state == 1) {
		s->pool.no_grow = 1;
		err = cp_alloc(&s->pool, size, 0, addr);
		if (err == CP_WOULD_GROW && s->pending.len > 0 && g_real_sync() == 0) {
			serve_release_pending(s);
			err = cp_alloc(&s->pool, size, 0, addr);
		}
		s->pool.no_grow = 0;
		if (err == CP_WOULD_GROW)
			err = cp_alloc(&s->pool, size, 0, addr);
	}
	pthread_mutex_unlock(&s->mu);
	t_serving = 0;
	return err == CP_OK;
}

/* serve_free takes a synchronous free of addr: 0 when no pool handed it out (the call goes to
 * CUDA), else 1 with *result the call's result (0, or 1 = invalid value for a second free). */
static int serve_free(uint64_t addr, int *result) {
	if (!__atomic_load_n(&g_serve, __ATOMIC_ACQUIRE) || t_serving || addr == 0)
		return 0;
	int taken = 0;
	t_serving = 1;
	for (int d = 0; d < SERVE_DEVICES && !taken; d++) {
		struct served *s = &g_served[d];
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != 1)
			continue;
		pthread_mutex_lock(&s->mu);
		int r = cp_mark_pending(&s->pool, addr);
		if (r == CP_OK && cp_vec_reserve(&s->pending, s->pending.len + 1) == 0) {
			CP_AT(&s->pending, struct pending, s->pending.len++) = (struct pending){addr, 0};
			*result = 0;
			taken = 1;
		} else if (r == CP_PENDING) {
			*result = 1; /* CUDA_ERROR_INVALID_VALUE / cudaErrorInvalidValue: freed twice */
			taken = 1;
		}
		pthread_mutex_unlock(&s->mu);
	}
	t_serving = 0;
	return taken;
}

/* serve_synchronized makes the current device's pending blocks reusable after the program
 * synchronized it. */
static void serve_synchronized(void) {
	if (!__atomic_load_n(&g_serve, __ATOMIC_ACQUIRE) || t_serving)
		return;
	int d = current_device();
	if (d < 0 || d >= SERVE_DEVICES || __atomic_load_n(&g_served[d].state, __ATOMIC_ACQUIRE) != 1)
		return;
	t_serving = 1;
	pthread_mutex_lock(&g_served[d].mu);
	serve_release_pending(&g_served[d]);
	pthread_mutex_unlock(&g_served[d].mu);
	t_serving = 0;
}

/* serve_forget drops the parent's pools in a forked child. */
static void serve_forget(void) {
	for (int d = 0; d < SERVE_DEVICES; d++) {
		g_served[d].state = 0;
		g_served[d].pending = (struct cp_vec){NULL, 0, 0, sizeof(struct pending)};
		pthread_mutex_init(&g_served[d].mu, NULL);
	}
	t_serving = 0;
}

#endif
