//go:build cgo

/*
 * The run loop of package cpool: the C pool (pool.c, the pool record --pool deploys)
 * serving a whole op sequence in one call from Go. Only the pool's upstream (rare region
 * reservations and releases) calls back into Go.
 */
#include "cpool.h"

#include <stdlib.h>
#include <time.h>

#include "_cgo_export.h"

_Static_assert(CP_ERR == 1 && CP_OOM == 2 && CP_UNKNOWN == 3 && CP_CLOSED == 4 && CP_OK == 0,
	       "package cpool's Code values are pool.h's");

struct cpool {
	struct cp_pool pool;
	uintptr_t go;   /* the cgo.Handle of the Go Pool */
	int64_t op;     /* the op being served, -1 outside cpool_run: told to the upstream */
};

static int cpool_reserve(void *ctx, uint64_t size, uint64_t *addr) {
	struct cpool *c = ctx;
	return cpoolUpstreamReserve(c->go, c->op, size, addr);
}

static int cpool_release(void *ctx, uint64_t addr, uint64_t size) {
	struct cpool *c = ctx;
	return cpoolUpstreamRelease(c->go, c->op, addr, size);
}

struct cpool *cpool_new(const struct cp_config *cfg, uintptr_t go, int *err) {
	struct cpool *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->go = go;
	c->op = -1;
	*err = cp_init(&c->pool, cfg, (struct cp_upstream){.reserve = cpool_reserve, .release = cpool_release, .ctx = c});
	return c;
}

static inline int64_t cpool_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* cpool_step serves op i: the allocation into its slot, or the free of its slot's live block; with
 * lat, the request alone is timed. Inlined into each loop of cpool_run, lat a constant there. */
static inline __attribute__((always_inline)) void cpool_step(struct cpool *c, const struct cpool_op *o, size_t i,
							     const uint64_t *handles, uint64_t *slots, uint64_t *addrs,
							     uint8_t *codes, int64_t *lat) {
	uint64_t a = 0;
	int code = CPOOL_NONE;
	int64_t t0 = 0;
	c->op = (int64_t)i;
	if (o->size > 0) {
		if (lat != NULL)
			t0 = cpool_now();
		code = cp_alloc(&c->pool, o->size, handles[o->stream], &a);
		if (lat != NULL)
			lat[i] = cpool_now() - t0;
		if (code != CP_OK)
			a = 0;
		slots[o->slot] = a;
	} else if (o->slot != CPOOL_NO_SLOT && slots[o->slot] != 0) {
		a = slots[o->slot];
		slots[o->slot] = 0;
		if (lat != NULL)
			t0 = cpool_now();
		code = cp_free(&c->pool, a, handles[o->stream]);
		if (lat != NULL)
			lat[i] = cpool_now() - t0;
	}
	addrs[i] = a;
	codes[i] = (uint8_t)code;
}

void cpool_run(struct cpool *c, const struct cpool_op *ops, size_t n, const uint64_t *handles, uint64_t *slots,
	       uint64_t *addrs, uint8_t *codes, int64_t *lat, int64_t *elapsed) {
	int64_t t0 = cpool_now();
	if (lat == NULL) {
		for (size_t i = 0; i < n; i++)
			cpool_step(c, &ops[i], i, handles, slots, addrs, codes, NULL);
	} else {
		for (size_t i = 0; i < n; i++)
			cpool_step(c, &ops[i], i, handles, slots, addrs, codes, lat);
	}
	*elapsed = cpool_now() - t0;
	c->op = -1;
}

int cpool_alloc(struct cpool *c, uint64_t size, uint64_t stream, uint64_t *addr) {
	return cp_alloc(&c->pool, size, stream, addr);
}

int cpool_free(struct cpool *c, uint64_t addr, uint64_t stream) { return cp_free(&c->pool, addr, stream); }

void cpool_stats(const struct cpool *c, struct cp_stats *now, struct cp_stats *peak) {
	*now = c->pool.s;
	*peak = c->pool.peak;
}

uint64_t cpool_release_idle(struct cpool *c) { return cp_release_idle(&c->pool); }

int cpool_close(struct cpool *c) { return cp_close(&c->pool); }

void cpool_destroy(struct cpool *c) { free(c); }
