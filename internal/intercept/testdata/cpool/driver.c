/*
 * Drives the shim's C pool (internal/intercept/cpool/pool.c) from a script on stdin, for the differential test
 * against package pool (internal/intercept/cpool_test.go). The upstream is a bump allocator from
 * 0x100000000000 in 2 MiB steps that never reuses an address, the same as the test's Go upstream;
 * with the arguments -capacity N it holds at most N bytes (its regions rounded up to 2 MiB) and
 * refuses a reserve beyond them as out of memory.
 *
 *   config ALIGN THRESHOLD ARENA GROW_BYTES MAXIMUM GROW_SLOTS PER_STREAM FIT_AGED N SIZE SLOTS ...
 *   a SIZE STREAM     -> the block's address in hex, or "E<code>"
 *   f ADDR STREAM     -> "ok", or "E<code>"
 *   d ADDR STREAM     -> a deferred free (cp_defer_free): "ok", or "E<code>"
 *   s                 -> the device synchronized (cp_synced): no output
 *   r                 -> give back the idle regions (cp_release_idle): "r BYTES"
 *   b N SIZE          -> N alloc/free pairs of SIZE bytes on stream 0: "ns_per_request X"
 * With the argument -time, the a and f lines are read first and then run in one timed loop, 5 times
 * over, each on a fresh pool (the upstream starts over too, so the addresses are the same), which
 * prints "ns_per_request X" (the least of the 5: the pool's own time per request, as replay measures
 * the Go pool's) before the counters of the last repetition.
 *   c                 -> close; then the counters: "stats" and the 16 numbers of struct cp_stats,
 *                        and "peak" and the same at peak reserved memory
 * Exits 0, or 2 on a malformed script.
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t next_addr = 0x100000000000ull;
static uint64_t capacity, held; /* -capacity (0: none), and the bytes the upstream holds */

static uint64_t bump_rounded(uint64_t size) { return (size + (2ull << 20) - 1) & ~((2ull << 20) - 1); }

static int bump_reserve(void *ctx, uint64_t size, uint64_t *addr) {
	(void)ctx;
	if (capacity > 0 && held + bump_rounded(size) > capacity)
		return CP_OOM;
	held += bump_rounded(size);
	*addr = next_addr;
	next_addr += bump_rounded(size);
	return 0;
}

static int bump_release(void *ctx, uint64_t addr, uint64_t size) {
	(void)ctx, (void)addr;
	held -= bump_rounded(size);
	return 0;
}

/* always_synced is the upstream's synchronization: the device is always done at once. */
static int always_synced(void *ctx) {
	(void)ctx;
	return 0;
}

static void print_stats(const char *name, const struct cp_stats *s) {
	printf("%s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", name,
	       (unsigned long long)s->allocs, (unsigned long long)s->frees, (unsigned long long)s->failures,
	       (unsigned long long)s->live_bytes, (unsigned long long)s->peak_live_bytes,
	       (unsigned long long)s->block_bytes, (unsigned long long)s->peak_block_bytes,
	       (unsigned long long)s->reserved_bytes, (unsigned long long)s->peak_reserved_bytes,
	       (unsigned long long)s->upstream_reserves, (unsigned long long)s->upstream_releases,
	       (unsigned long long)s->upstream_failures, (unsigned long long)s->fallbacks,
	       (unsigned long long)s->syncs, (unsigned long long)s->idle_releases,
	       (unsigned long long)s->idle_released_bytes);
}

/* bench times n alloc/free pairs of size bytes and prints the nanoseconds per request. */
static int bench(struct cp_pool *p, uint64_t n, uint64_t size) {
	struct timespec t0, t1;
	uint64_t addr;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t i = 0; i < n; i++)
		if (cp_alloc(p, size, 0, &addr) != CP_OK || cp_free(p, addr, 0) != CP_OK)
			return -1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
	printf("ns_per_request %.2f\n", ns / (2.0 * (double)n));
	return 0;
}

static int read_config(struct cp_config *c) {
	unsigned long long v[9];
	if (scanf(" config %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		  &v[6], &v[7], &v[8]) != 9 || v[8] > CP_MAX_CLASSES)
		return -1;
	*c = (struct cp_config){.align = v[0], .threshold = v[1], .arena_bytes = v[2], .grow_bytes = v[3],
				.maximum = v[4], .grow_slots = v[5], .per_stream = (int)v[6], .fit_aged = (int)v[7],
				.nclasses = (int)v[8]};
	for (int i = 0; i < c->nclasses; i++) {
		unsigned long long size, slots;
		if (scanf(" %llu %llu", &size, &slots) != 2)
			return -1;
		c->class_size[i] = size, c->class_slots[i] = slots;
	}
	return 0;
}

/* timed reads every a/f line, then serves them all in one timed loop, 5 times on fresh pools. */
static int timed(struct cp_pool *pool, const struct cp_config *cfg) {
	size_t n = 0, cap = 1 << 16;
	struct line { char op; uint64_t x, stream; } *ops = malloc(cap * sizeof *ops);
	char op;
	unsigned long long x, stream;
	while (ops != NULL && scanf(" %c", &op) == 1 && op != 'c') {
		if ((op != 'a' && op != 'f') || scanf(" %llx %llu", &x, &stream) != 2)
			return 2;
		if (n == cap && (ops = realloc(ops, (cap *= 2) * sizeof *ops)) == NULL)
			return 2;
		ops[n++] = (struct line){op, x, stream};
	}
	if (ops == NULL)
		return 2;
	double best = 0;
	for (int rep = 0; rep < 5; rep++) {
		if (rep > 0) {
			cp_close(pool);
			next_addr = 0x100000000000ull, held = 0;
			if (cp_init(pool, cfg, (struct cp_upstream){bump_reserve, bump_release, NULL}) != CP_OK)
				return 2;
		}
		struct timespec t0, t1;
		uint64_t addr;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (size_t i = 0; i < n; i++) {
			if (ops[i].op == 'a')
				cp_alloc(pool, ops[i].x, ops[i].stream, &addr);
			else
				cp_free(pool, ops[i].x, ops[i].stream);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
		if (rep == 0 || ns < best)
			best = ns;
	}
	printf("ns_per_request %.2f requests %zu\n", n ? best / (double)n : 0, n);
	free(ops);
	return 0;
}

int main(int argc, char **argv) {
	struct cp_config cfg;
	static struct cp_pool pool;
	int timing = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-time") == 0)
			timing = 1;
		else if (strcmp(argv[i], "-capacity") == 0 && i + 1 < argc)
			capacity = strtoull(argv[++i], NULL, 10);
		else
			return 2;
	}
	if (read_config(&cfg) != 0)
		return 2;
	struct cp_upstream up = {bump_reserve, bump_release, NULL, always_synced};
#ifdef CP_GIVEN_BOOK /* the tables in a book made beforehand, as record --pool makes it at cuInit, of
		      * cp_book_bytes plus CP_GIVEN_BOOK bytes (too small when negative: not used) */
	struct cp_book book = {NULL, 0, 0};
	long want = (long)cp_book_bytes(&cfg) + (CP_GIVEN_BOOK);
	if (want > 0 && cp_book_open(&book, (size_t)want) != 0)
		return 2;
	int err = cp_init_book(&pool, &cfg, up, book);
#else
	int err = cp_init(&pool, &cfg, up);
#endif
	if (err != CP_OK) {
		printf("init E%d\n", err);
		return 0;
	}
	if (timing) {
		if (timed(&pool, &cfg) != 0)
			return 2;
		print_stats("stats", &pool.s);
		return 0;
	}
	char op;
	unsigned long long x, stream;
	while (scanf(" %c", &op) == 1) {
		if (op == 'c')
			break;
		if (op == 's') {
			cp_synced(&pool);
			continue;
		}
		if (op == 'r') {
			printf("r %llu\n", (unsigned long long)cp_release_idle(&pool));
			continue;
		}
		if (op == 'b') {
			if (scanf(" %llu %llu", &x, &stream) != 2 || bench(&pool, x, stream) != 0)
				return 2;
			continue;
		}
		if (scanf(" %llx %llu", &x, &stream) != 2)
			return 2;
		uint64_t addr;
		if (op == 'a' && (err = cp_alloc(&pool, x, stream, &addr)) == CP_OK)
			printf("%llx\n", (unsigned long long)addr);
		else if (op == 'f' && (err = cp_free(&pool, x, stream)) == CP_OK)
			printf("ok\n");
		else if (op == 'd' && (err = cp_defer_free(&pool, x, stream)) == CP_OK)
			printf("ok\n");
		else if (op == 'a' || op == 'f' || op == 'd')
			printf("E%d\n", err);
		else
			return 2;
	}
	struct cp_stats before = pool.s, peak = pool.peak;
	cp_close(&pool);
	print_stats("stats", &before);
	print_stats("peak", &peak);
	print_stats("closed", &pool.s);
	return 0;
}
