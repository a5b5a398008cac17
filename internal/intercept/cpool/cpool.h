//go:build cgo

/*
 * The C pool (pool.h, pool.c) driven from Go (cpool.go): one call serves a whole op sequence,
 * its upstream calls back into Go (export.go).
 */
#ifndef ALLOCSCOPE_CPOOL_H
#define ALLOCSCOPE_CPOOL_H

#include "pool.h"

/* One op: an allocation of size bytes into slot (size > 0), or the free of slot's block (size 0);
 * an op whose slot is CPOOL_NO_SLOT asks nothing. stream indexes the stream handles of the run. */
struct cpool_op {
	uint64_t size;
	uint32_t slot, stream;
};

#define CPOOL_NO_SLOT 0xffffffffu

/* The code of an op that asked nothing of the pool (a sync point, or the free of a block whose
 * allocation failed); the others are CP_OK or a CP_* error of pool.h. */
#define CPOOL_NONE 255

/* The pool and the cgo.Handle of its Go side (the upstream). */
struct cpool;

/* cpool_new builds the pool of cfg; *err is CP_OK, or the error of reserving its plan (the pool must
 * then be closed). NULL when there is no memory for it. */
struct cpool *cpool_new(const struct cp_config *cfg, uintptr_t go, int *err);

/* cpool_run serves ops[0..n) in order, see cpool.go's Run; slots (all 0) has a word per slot. With lat,
 * each request is timed on its own into lat; *elapsed is the whole loop's time (ns). */
void cpool_run(struct cpool *c, const struct cpool_op *ops, size_t n, const uint64_t *handles, uint64_t *slots,
	       uint64_t *addrs, uint8_t *codes, int64_t *lat, int64_t *elapsed);

int cpool_alloc(struct cpool *c, uint64_t size, uint64_t stream, uint64_t *addr);
int cpool_free(struct cpool *c, uint64_t addr, uint64_t stream);
void cpool_stats(const struct cpool *c, struct cp_stats *now, struct cp_stats *peak);

/* cpool_release_idle gives back the pool's idle regions (pool.h's cp_release_idle): their bytes. */
uint64_t cpool_release_idle(struct cpool *c);

/* cpool_close gives back everything the pool holds (pool.h's cp_close), CP_OK or CP_ERR; the pool's
 * counters stay readable until cpool_destroy. */
int cpool_close(struct cpool *c);
void cpool_destroy(struct cpool *c);

#endif
