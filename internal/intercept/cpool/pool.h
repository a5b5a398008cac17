/*
 * The size-class pool in C, for `record --pool`: package pool's PolicySizeClass (pool/sizeclass.go,
 * pool/arena.go, internal/spans) rule for rule, so that the pool a program runs on is the pool
 * analyze simulated and replay measured. Package pool is the specification; a differential test
 * (internal/intercept/cpool_test.go) feeds both the same request sequences and compares every address,
 * failure and counter.
 *
 *   - One up-front region holds every class's planned slots (a slab per class, in class order) and
 *     then the arena's planned bytes.
 *   - A class hands out the slot freed last (LIFO), else its fresh slab's lowest never-used slot;
 *     when it has neither it grows by a slab of grow_slots slots from the upstream (a fallback).
 *     With per_stream, freed slots are kept per freeing stream and tried first.
 *   - Requests above the threshold (or above every class) go to a best-fit coalescing arena: the
 *     block is the request rounded up to the alignment, cut from the smallest free span that fits
 *     (the lowest address among equals; the stream's own spans first with per_stream), from its low
 *     end, or with fit_aged from the end next to the older neighbour; freed blocks merge with free
 *     neighbours of the same segment and owner; when nothing fits it grows by a segment of
 *     max(block, grow_bytes), capped at maximum bytes of arena (a fallback).
 *   - When a growth finds the upstream out of memory, the pool gives back every grown slab whose slots
 *     are all free and every arena segment that is entirely free (a deferred block is in use), then
 *     asks once more (cp_release_idle); the plan stays (the shim may give the whole pool back:
 *     serve_release_plan in internal/intercept/shim/serve.c).
 *   - Deferred blocks (freed while the device may still use them) carry the release point begun
 *     before their free (cp_begin_release) and are made reusable by a later one (cp_release_through).
 *
 * No malloc: its memory comes from mmap, so that it can run inside the shim's hooks.
 */
#ifndef ALLOCSCOPE_POOL_H
#define ALLOCSCOPE_POOL_H

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* ---- the pool's book: its bookkeeping in one mapping ------------------------------------------- */

/* A pool keeps its tables in one mapping sized for its plan, touched when the pool is made, so that
 * no request pays for a page's first use (about 1 us a page on a virtual machine, even for pages
 * mapped with MAP_POPULATE). A table that outgrows it moves to a mapping of its own. Huge pages
 * are not asked for: zeroing one cost a pool about 140 us when it was made, and served calls on
 * the H200 host took no less time with them. */
struct cp_book {
	char *base;
	size_t size, used;
};

#define CP_PAGE 4096
#define CP_LINE 64

/* cp_book_open maps a book of at least bytes: 0, or -1 when there is none (tables then get
 * mappings of their own). */
int cp_book_open(struct cp_book *b, size_t bytes);

void cp_book_close(struct cp_book *b);

/* ---- growable arrays, in the book or on mmap ----------------------------------------------------- */

struct cp_vec {
	void *data;
	size_t len, cap, elem;
	struct cp_book *book; /* where to grow first; NULL: own mappings only */
	int lent;             /* data lies in the book */
};

int cp_vec_reserve(struct cp_vec *v, size_t n);

void cp_vec_free(struct cp_vec *v);

#define CP_AT(v, T, i) (((T *)(v)->data)[i])

/* ---- configuration -------------------------------------------------------------------------------- */

#define CP_MAX_CLASSES 64
#define CP_MAX_REQUEST (1ull << 62)
#define CP_DEFAULT_GROW_BYTES (2ull << 20)

struct cp_config {
	uint64_t align;          /* alignment_bytes */
	uint64_t threshold;      /* large_threshold_bytes (0: the largest class) */
	uint64_t arena_bytes;    /* arena_bytes */
	uint64_t grow_bytes;     /* best_fit.grow_bytes: the least an arena growth reserves */
	uint64_t maximum;        /* best_fit.maximum_bytes: the arena's cap (0: none) */
	uint64_t grow_slots;     /* size_class.grow_slots (0: DefaultGrowBytes' worth) */
	int per_stream;
	int fit_aged;            /* arena_fit "best-aged" */
	int nclasses;
	uint64_t class_size[CP_MAX_CLASSES];
	uint64_t class_slots[CP_MAX_CLASSES];
};

/* The upstream: cuMemAlloc/cuMemFree in the shim, a bump allocator in the tests. */
struct cp_upstream {
	int (*reserve)(void *ctx, uint64_t size, uint64_t *addr); /* 0, or an error (2 = out of memory) */
	int (*release)(void *ctx, uint64_t addr, uint64_t size);
	void *ctx;
	/* sync waits for the device (0 on success), so that deferred frees become reusable; NULL: they
	 * wait for cp_synced */
	int (*sync)(void *ctx);
};

/* The counters, as pool.Stats. */
struct cp_stats {
	uint64_t allocs, frees, failures, live_bytes, peak_live_bytes, block_bytes, peak_block_bytes;
	uint64_t reserved_bytes, peak_reserved_bytes, upstream_reserves, upstream_releases, upstream_failures;
	uint64_t fallbacks;
	uint64_t syncs; /* synchronizations the pool made to reuse deferred frees */
	/* regions given back because nothing in them was in use (cp_release_idle), and their bytes */
	uint64_t idle_releases, idle_released_bytes;
};

/* ---- the pool's state ------------------------------------------------------------------------------ */

struct cp_slab {
	uint64_t base, end, size;
	int cls;
	int lent;              /* the slab lies in the pool's book */
	uint64_t nslots, used; /* slots handed out at least once, in address order */
	struct cp_vec req;     /* per slot: requested bytes + 1 while live, 0 while free */
};

/* A free slot: its address and its requested-bytes word, so that handing it out reads nothing else. */
struct cp_slot { uint64_t addr; uint64_t *req; };

/* An entry of the slab index: what a free needs of the slab of an address, so that finding it reads
 * the bases (a separate array, eight to a cache line), then this entry, not the slab. req, like a
 * free slot's word, points into the slab's words, which never move: a slab's slots are fixed. */
struct cp_slab_ref { uint64_t base, end, size; uint64_t *req; struct cp_slab *sl; int cls; };

struct cp_stream_lists { uint64_t stream; struct cp_vec free[CP_MAX_CLASSES]; };

struct cp_class {
	uint64_t size, grow_slots;
	struct cp_vec free; /* struct cp_slot, LIFO */
	struct cp_slab *fresh;
};

enum { CP_FREE = 0, CP_USED = 1 };
#define CP_NIL (-1)

struct cp_node {
	uint64_t addr, size, seg, stream;
	int32_t prev, next;
	uint8_t state, tagged;
	uint64_t born; /* fit_aged: allocation count when it became a live block */
};

struct cp_region {
	uint64_t addr, size;
	int plan; /* the up-front region (never given back by cp_release_idle) */
};

/* A free node's entry in the arena's order, its sort key beside its id, so that a search reads the
 * order's few lines, not a node per step. */
struct cp_okey {
	uint64_t size, addr, stream;
	int32_t id;
	uint8_t tagged;
};

struct cp_pool {
	/* what every request reads first, together at the start */
	int closed;
	int no_grow;            /* growths fail with CP_WOULD_GROW (uncounted) */
	struct cp_vec bases;    /* uint64_t: the slabs' bases, sorted, beside slabs */
	struct cp_vec slabs;    /* struct cp_slab_ref, sorted by base */
	struct cp_vec deferred; /* struct cp_deferred: blocks freed while the device may still use them */
	struct cp_stats s, peak;
	struct cp_config cfg;
	struct cp_upstream up;
	struct cp_class classes[CP_MAX_CLASSES];
	struct cp_vec regions; /* struct cp_region: the plan and the grown slabs */
	struct cp_vec streams; /* struct cp_stream_lists, with per_stream */
	/* the arena */
	struct cp_vec nodes;   /* struct cp_node */
	struct cp_vec order;   /* struct cp_okey of the free nodes, by (tagged, stream, size, addr) */
	struct cp_vec owned;   /* struct cp_region: segments the arena reserved itself, by address */
	struct cp_vec live;    /* open addressing: struct cp_live, for arena blocks */
	size_t nlive;
	int32_t recycled;
	uint64_t arena_total, grow_min, allocs_seen;
	uint64_t gen;          /* release points begun (cp_begin_release): deferred blocks carry it */
	struct cp_book book;   /* where the tables above lie */
};

/* A deferred block: its address and stream, and for a class slot, its requested-bytes word and
 * class, so that making it reusable looks nothing up (arena blocks: req NULL). */
struct cp_deferred {
	uint64_t addr, stream;
	uint64_t *req;
	int cls;
	uint64_t gen; /* the pool's release points begun before the free (cp_begin_release) */
};

struct cp_live { uint64_t addr; uint64_t req; int32_t node; uint8_t used, pending; };

static inline uint64_t cp_round(uint64_t n, uint64_t a) { return (n + a - 1) & ~(a - 1); }

/* ---- the arena's space: nodes linked per segment, free ones ordered by owner, size, address ------ */

#define CP_NODE(p, id) CP_AT(&(p)->nodes, struct cp_node, id)

/* cp_key_less orders free nodes by owner (untagged first, then stream), size, address. */
static inline int cp_key_less(const struct cp_okey *a, uint8_t tagged, uint64_t stream, uint64_t size, uint64_t addr) {
	if (a->tagged != tagged)
		return !a->tagged;
	if (a->stream != stream)
		return a->stream < stream;
	if (a->size != size)
		return a->size < size;
	return a->addr < addr;
}

/* ---- the arena's live blocks: address -> node, open addressing ------------------------------------ */

static inline size_t cp_hash(uint64_t addr, size_t mask) {
	return (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* ---- the arena ------------------------------------------------------------------------------------ */

/* Results. CP_WOULD_GROW: the request needs a growth that no_grow forbids (the caller may make room
 * first, then allow it). */
enum { CP_OK = 0, CP_ERR = 1, CP_OOM = 2, CP_UNKNOWN = 3, CP_CLOSED = 4, CP_WOULD_GROW = 5, CP_PENDING = 6 };

/* A class slot's requested-bytes word with this bit: freed by the program, not reusable yet. */
#define CP_PENDING_BIT (1ull << 63)


/* cp_prefetch asks for the lines of p that every request reads (the head, the counters, the class
 * sizes) at once, so that after a program's own code evicted them their misses overlap instead of
 * following one another. */
static inline void cp_prefetch(const struct cp_pool *p) {
	const char *h = (const char *)p;
	__builtin_prefetch(h, 1);
	__builtin_prefetch(h + 64, 1);
	__builtin_prefetch(&p->s, 1);
	__builtin_prefetch((const char *)&p->s + 64, 1);
	__builtin_prefetch(&p->cfg.threshold);
	__builtin_prefetch(&p->cfg.class_size[0]);
	__builtin_prefetch(&p->cfg.class_size[8]);
}

/* ---- the classes ---------------------------------------------------------------------------------- */

static inline int cp_class_for(const struct cp_pool *p, uint64_t size) {
	if (size > p->cfg.threshold)
		return -1;
	int lo = 0, hi = p->cfg.nclasses;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (p->cfg.class_size[mid] < size) /* the sizes side by side: a line holds eight */
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == p->cfg.nclasses ? -1 : lo;
}

/* cp_slot_word returns the requested-bytes word of the slot of r that starts at addr, or NULL when
 * no slot starts there. */
static inline uint64_t *cp_slot_word(const struct cp_slab_ref *r, uint64_t addr) {
	uint64_t off = addr - r->base, slot = off / r->size;
	return slot * r->size == off ? &r->req[slot] : NULL;
}

/* ---- giving back idle memory ---------------------------------------------------------------------- */

/* cp_release_idle gives back to the upstream every region the pool reserved beyond its plan that
 * holds no live and no deferred block: the idle grown slabs (in the order they were grown), then the
 * arena's idle segments (by address); package pool's ReleaseIdle. The plan stays, even when nothing
 * is live (see pool/idle.go). It returns the bytes given back (0 once closed). The pool calls it
 * itself when the upstream is out of memory for a growth; the shim, when a call that went to CUDA
 * found it out of memory. */
uint64_t cp_release_idle(struct cp_pool *p);

/* ---- the pool ------------------------------------------------------------------------------------- */

#define CP_LINES(n) (((size_t)(n) + CP_LINE - 1) & ~(size_t)(CP_LINE - 1))

/* cp_book_bytes is what the tables of cfg's plan take (cp_init and cp_presize), with room for some
 * growth. */
size_t cp_book_bytes(const struct cp_config *cfg);

/* cp_init_book builds the pool of cfg over up and reserves its plan: CP_OK or an error (the pool is
 * then not usable; cp_close gives back what it reserved). Its tables go into book, a book made
 * beforehand with cp_book_open (so that making the pool pays for none of its pages), when it holds
 * cp_book_bytes(cfg); otherwise book is closed and the pool makes its own. */
int cp_init_book(struct cp_pool *p, const struct cp_config *cfg, struct cp_upstream up, struct cp_book book);

/* cp_init is cp_init_book with a book of the pool's own. */
static inline int cp_init(struct cp_pool *p, const struct cp_config *cfg, struct cp_upstream up) {
	return cp_init_book(p, cfg, up, (struct cp_book){NULL, 0, 0});
}


/* cp_begin_release starts a release point (a synchronization or an ordering of the device): the
 * blocks deferred so far, and only those, may be made reusable by it, with cp_release_through and the
 * number it returns, once it is complete. */
uint64_t cp_begin_release(struct cp_pool *p);

/* cp_release_through makes the blocks deferred before release point g began reusable, in the order
 * they were deferred (the deferred list is in order of gen). */
void cp_release_through(struct cp_pool *p, uint64_t g);

/* cp_synced makes every deferred block reusable: the device has synchronized after all of them. */
void cp_synced(struct cp_pool *p);

/* cp_alloc serves size bytes on stream into *addr: CP_OK, or CP_OOM (the upstream has no memory, or
 * the arena is at its maximum), CP_CLOSED or CP_ERR. With deferred blocks, a request that would grow
 * the pool first synchronizes the device once (up.sync, counted in syncs) and reuses them all. */
int cp_alloc(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr);

/* cp_try_alloc serves size bytes on stream with what is reusable now, without growing the pool:
 * CP_WOULD_GROW (nothing counted) when it would have to. */
int cp_try_alloc(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr);

/* cp_alloc_now serves a request with what is reusable now, growing the pool when that is not enough
 * (unless no_grow: CP_WOULD_GROW). */
int cp_alloc_now(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr);

/* cp_free takes back the block at addr, freed on stream: CP_OK, CP_UNKNOWN (no live block of the
 * pool starts there: not the pool's) or CP_CLOSED. */
int cp_free(struct cp_pool *p, uint64_t addr, uint64_t stream);

/* cp_defer_free takes a free of the live block at addr on stream that the device may still be using
 * (a synchronous cudaFree served without waiting): the block is reusable only after the next
 * synchronization. CP_OK, CP_PENDING (freed already: a double free), CP_UNKNOWN (not the pool's),
 * CP_ERR (no memory for the list). */
int cp_defer_free(struct cp_pool *p, uint64_t addr, uint64_t stream);

/* cp_lookup finds the block that starts at addr: CP_OK (live, *req its requested bytes), CP_PENDING
 * (freed, deferred), CP_UNKNOWN (no block of the pool starts there). */
int cp_lookup(struct cp_pool *p, uint64_t addr, uint64_t *req);

/* cp_owns reports whether addr lies in memory the pool reserved (its plan, a grown slab, an arena
 * segment), a block of it or not: binary searches, not a walk of the regions. */
int cp_owns(struct cp_pool *p, uint64_t addr);

/* cp_block_at finds the live block (deferred ones included) that holds addr: 1 with its start and
 * requested bytes, else 0. An arena block is looked for among all live ones (a rare call). */
int cp_block_at(struct cp_pool *p, uint64_t addr, uint64_t *base, uint64_t *req);

/* cp_close gives back the plan, every grown slab and the arena's own segments (in address order),
 * and the pool's own memory. */
int cp_close(struct cp_pool *p);

/* cp_discard closes the pool without giving its memory back: the context that owned that memory is
 * gone (reset or destroyed), and its addresses may belong to others now. */
void cp_discard(struct cp_pool *p);

#endif
