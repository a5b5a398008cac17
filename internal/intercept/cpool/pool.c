//go:build cgo

/* pool.c: see pool.h. */
#include "pool.h"

static int cp_free_slot(struct cp_pool *p, uint64_t addr, uint64_t stream, uint64_t *r, int cls);

int cp_book_open(struct cp_book *b, size_t bytes) {
	size_t size = (bytes + CP_PAGE - 1) & ~(size_t)(CP_PAGE - 1);
	char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return -1;
	for (size_t o = 0; o < size; o += CP_PAGE)
		((volatile char *)base)[o] = 0;
	*b = (struct cp_book){base, size, 0};
	return 0;
}

/* cp_book_take lends bytes of b (line-aligned), or NULL when it has no room (or b is NULL). */
static void *cp_book_take(struct cp_book *b, size_t bytes) {
	if (b == NULL || b->base == NULL)
		return NULL;
	size_t n = (bytes + CP_LINE - 1) & ~(size_t)(CP_LINE - 1);
	if (n > b->size - b->used)
		return NULL;
	void *p = b->base + b->used;
	b->used += n;
	return p;
}

void cp_book_close(struct cp_book *b) {
	if (b->base != NULL)
		munmap(b->base, b->size);
	b->base = NULL;
}

/* cp_mem returns bytes of b, or of a mapping of their own when b has no room (*lent says which);
 * NULL when there is no memory. */
static void *cp_mem(struct cp_book *b, size_t bytes, int *lent) {
	void *p = cp_book_take(b, bytes);
	if ((*lent = p != NULL))
		return p;
	/* populated: one call maps every page now, instead of a page fault per page inside requests */
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* cp_grown_cap is the capacity a table of cap entries (64 for a new one) grows to for n: doubled
 * until it holds them. */
static size_t cp_grown_cap(size_t cap, size_t n) {
	while (cap < n)
		cap *= 2;
	return cap;
}

int cp_vec_reserve(struct cp_vec *v, size_t n) {
	if (n <= v->cap)
		return 0;
	size_t cap = cp_grown_cap(v->cap ? v->cap : 64, n);
	int lent;
	void *p = cp_mem(v->book, cap * v->elem, &lent);
	if (p == NULL)
		return -1;
	if (v->data != NULL) {
		memcpy(p, v->data, v->len * v->elem);
		if (!v->lent)
			munmap(v->data, v->cap * v->elem);
	}
	v->data = p;
	v->cap = cap;
	v->lent = lent;
	return 0;
}

void cp_vec_free(struct cp_vec *v) {
	if (v->data != NULL && !v->lent)
		munmap(v->data, v->cap * v->elem);
	v->data = NULL;
	v->len = v->cap = 0;
}

static void cp_note_peak(struct cp_pool *p) {
	if (p->s.reserved_bytes > p->peak.reserved_bytes ||
	    (p->s.reserved_bytes == p->peak.reserved_bytes && p->s.live_bytes > p->peak.live_bytes))
		p->peak = p->s;
}

static int cp_reserve(struct cp_pool *p, uint64_t size, uint64_t *addr) {
	int err = p->up.reserve(p->up.ctx, size, addr);
	if (err != 0) {
		p->s.upstream_failures++;
		return err;
	}
	p->s.upstream_reserves++;
	p->s.reserved_bytes += size;
	if (p->s.reserved_bytes > p->s.peak_reserved_bytes)
		p->s.peak_reserved_bytes = p->s.reserved_bytes;
	return 0;
}

static int cp_release(struct cp_pool *p, uint64_t addr, uint64_t size) {
	int err = p->up.release(p->up.ctx, addr, size);
	if (err == 0) {
		p->s.upstream_releases++;
		p->s.reserved_bytes -= size;
	}
	return err;
}

/* cp_lower returns the position of the first free node not below (tagged, stream, size, addr). */
static size_t cp_lower(struct cp_pool *p, uint8_t tagged, uint64_t stream, uint64_t size, uint64_t addr) {
	size_t lo = 0, hi = p->order.len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp_key_less(&CP_AT(&p->order, struct cp_okey, mid), tagged, stream, size, addr))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int cp_attach(struct cp_pool *p, int32_t id) {
	struct cp_node *n = &CP_NODE(p, id);
	if (cp_vec_reserve(&p->order, p->order.len + 1) != 0)
		return -1;
	size_t at = cp_lower(p, n->tagged, n->stream, n->size, n->addr);
	struct cp_okey *o = (struct cp_okey *)p->order.data;
	memmove(o + at + 1, o + at, (p->order.len - at) * sizeof *o);
	o[at] = (struct cp_okey){n->size, n->addr, n->stream, id, n->tagged};
	p->order.len++;
	return 0;
}

static void cp_detach(struct cp_pool *p, int32_t id) {
	struct cp_node *n = &CP_NODE(p, id);
	size_t at = cp_lower(p, n->tagged, n->stream, n->size, n->addr);
	struct cp_okey *o = (struct cp_okey *)p->order.data;
	if (at < p->order.len && o[at].id == id) {
		memmove(o + at, o + at + 1, (p->order.len - at - 1) * sizeof *o);
		p->order.len--;
	}
}

static int32_t cp_new_node(struct cp_pool *p, uint64_t addr, uint64_t size, uint64_t seg, uint8_t state) {
	int32_t id = p->recycled;
	if (id == CP_NIL) {
		if (cp_vec_reserve(&p->nodes, p->nodes.len + 1) != 0)
			return CP_NIL;
		id = (int32_t)p->nodes.len++;
	} else {
		p->recycled = CP_NODE(p, id).next;
	}
	struct cp_node *n = &CP_NODE(p, id);
	memset(n, 0, sizeof *n);
	n->addr = addr;
	n->size = size;
	n->seg = seg;
	n->state = state;
	n->prev = n->next = CP_NIL;
	return id;
}

static void cp_recycle(struct cp_pool *p, int32_t id) {
	CP_NODE(p, id).next = p->recycled;
	CP_NODE(p, id).state = CP_USED;
	p->recycled = id;
}

/* cp_split_after links a new node for [addr, addr+size) right after node id and returns it. */
static int32_t cp_split_after(struct cp_pool *p, int32_t id, uint64_t addr, uint64_t size, uint8_t state) {
	int32_t r = cp_new_node(p, addr, size, CP_NODE(p, id).seg, state);
	if (r == CP_NIL)
		return CP_NIL;
	struct cp_node *n = &CP_NODE(p, id), *rn = &CP_NODE(p, r);
	rn->tagged = n->tagged;
	rn->stream = n->stream;
	rn->prev = id;
	rn->next = n->next;
	if (n->next != CP_NIL)
		CP_NODE(p, n->next).prev = r;
	n->next = r;
	return r;
}

/* cp_take makes free node id a used block of size bytes from its low end; the rest stays free. */
static int cp_take(struct cp_pool *p, int32_t id, uint64_t size) {
	cp_detach(p, id);
	struct cp_node *n = &CP_NODE(p, id);
	if (n->size > size) {
		int32_t r = cp_split_after(p, id, n->addr + size, n->size - size, CP_FREE);
		if (r == CP_NIL || cp_attach(p, r) != 0)
			return -1;
		CP_NODE(p, id).size = size;
	}
	CP_NODE(p, id).state = CP_USED;
	return 0;
}

/* cp_take_high cuts a used block of size bytes from the high end of free node id and returns it. */
static int32_t cp_take_high(struct cp_pool *p, int32_t id, uint64_t size) {
	struct cp_node *n = &CP_NODE(p, id);
	if (n->size <= size)
		return cp_take(p, id, size) == 0 ? id : CP_NIL;
	cp_detach(p, id);
	n = &CP_NODE(p, id);
	int32_t r = cp_split_after(p, id, n->addr + n->size - size, size, CP_USED);
	if (r == CP_NIL)
		return CP_NIL;
	CP_NODE(p, id).size -= size;
	return cp_attach(p, id) == 0 ? r : CP_NIL;
}

static int cp_mergeable(struct cp_pool *p, int32_t a, int32_t b) {
	struct cp_node *x = &CP_NODE(p, a), *y = &CP_NODE(p, b);
	return x->state == CP_FREE && y->state == CP_FREE && x->tagged == y->tagged && x->stream == y->stream;
}

/* cp_absorb_next appends node id's next node to it (both out of the order). */
static void cp_absorb_next(struct cp_pool *p, int32_t id) {
	struct cp_node *n = &CP_NODE(p, id);
	int32_t nx = n->next;
	n->size += CP_NODE(p, nx).size;
	n->next = CP_NODE(p, nx).next;
	if (n->next != CP_NIL)
		CP_NODE(p, n->next).prev = id;
	cp_recycle(p, nx);
}

/* cp_release frees used node id for the owner (tagged, stream), merging it with free neighbours of
 * the same owner in its segment. */
static int cp_release_node(struct cp_pool *p, int32_t id, uint8_t tagged, uint64_t stream) {
	struct cp_node *n = &CP_NODE(p, id);
	n->state = CP_FREE;
	n->tagged = tagged;
	n->stream = stream;
	int32_t pv = n->prev, nx = n->next;
	if (pv != CP_NIL && cp_mergeable(p, pv, id)) {
		cp_detach(p, pv);
		cp_absorb_next(p, pv);
		id = pv;
	}
	nx = CP_NODE(p, id).next;
	if (nx != CP_NIL && cp_mergeable(p, nx, id)) {
		cp_detach(p, nx);
		cp_absorb_next(p, id);
	}
	return cp_attach(p, id);
}

/* cp_best_fit returns the smallest free node of the owner with at least size bytes (lowest address
 * among equals), or CP_NIL. */
static int32_t cp_best_fit(struct cp_pool *p, uint8_t tagged, uint64_t stream, uint64_t size) {
	size_t at = cp_lower(p, tagged, stream, size, 0);
	if (at == p->order.len)
		return CP_NIL;
	const struct cp_okey *k = &CP_AT(&p->order, struct cp_okey, at);
	return k->tagged == tagged && k->stream == stream ? k->id : CP_NIL;
}

static int cp_add_segment(struct cp_pool *p, uint64_t addr, uint64_t size) {
	int32_t id = cp_new_node(p, addr, size, addr, CP_FREE);
	if (id == CP_NIL)
		return -1;
	p->arena_total += size;
	return cp_attach(p, id);
}

static int cp_live_grow(struct cp_pool *p) {
	struct cp_vec old = p->live;
	size_t cap = old.len ? old.len * 2 : 1024;
	struct cp_vec nv = {NULL, 0, 0, sizeof(struct cp_live), &p->book, 0};
	if (cp_vec_reserve(&nv, cap) != 0)
		return -1;
	nv.len = cap;
	memset(nv.data, 0, cap * sizeof(struct cp_live));
	for (size_t i = 0; i < old.len; i++) {
		struct cp_live *e = &CP_AT(&old, struct cp_live, i);
		if (!e->used)
			continue;
		size_t j = cp_hash(e->addr, cap - 1);
		while (CP_AT(&nv, struct cp_live, j).used)
			j = (j + 1) & (cap - 1);
		CP_AT(&nv, struct cp_live, j) = *e;
	}
	cp_vec_free(&old);
	p->live = nv;
	return 0;
}

static int cp_live_put(struct cp_pool *p, uint64_t addr, uint64_t req, int32_t node) {
	if ((p->nlive + 1) * 2 > p->live.len && cp_live_grow(p) != 0)
		return -1;
	size_t mask = p->live.len - 1, j = cp_hash(addr, mask);
	while (CP_AT(&p->live, struct cp_live, j).used)
		j = (j + 1) & mask;
	CP_AT(&p->live, struct cp_live, j) = (struct cp_live){addr, req, node, 1, 0};
	p->nlive++;
	return 0;
}

/* cp_live_find returns addr's entry, or NULL. */
static struct cp_live *cp_live_find(struct cp_pool *p, uint64_t addr) {
	if (p->live.len == 0)
		return NULL;
	size_t mask = p->live.len - 1;
	for (size_t j = cp_hash(addr, mask);; j = (j + 1) & mask) {
		struct cp_live *e = &CP_AT(&p->live, struct cp_live, j);
		if (!e->used)
			return NULL;
		if (e->addr == addr)
			return e;
	}
}

/* cp_live_take removes addr's entry (backward-shift deletion) into *out; 0 when absent. */
static int cp_live_take(struct cp_pool *p, uint64_t addr, struct cp_live *out) {
	if (p->live.len == 0)
		return 0;
	size_t mask = p->live.len - 1, j = cp_hash(addr, mask);
	for (;; j = (j + 1) & mask) {
		struct cp_live *e = &CP_AT(&p->live, struct cp_live, j);
		if (!e->used)
			return 0;
		if (e->addr == addr)
			break;
	}
	*out = CP_AT(&p->live, struct cp_live, j);
	for (size_t k = (j + 1) & mask;; k = (k + 1) & mask) {
		struct cp_live *e = &CP_AT(&p->live, struct cp_live, k);
		if (!e->used)
			break;
		size_t home = cp_hash(e->addr, mask);
		if (((k - home) & mask) >= ((k - j) & mask)) {
			CP_AT(&p->live, struct cp_live, j) = *e;
			j = k;
		}
	}
	CP_AT(&p->live, struct cp_live, j).used = 0;
	p->nlive--;
	return 1;
}

/* cp_arena_grow_bytes puts into *n the size of a growth for a block of blk bytes: max(blk,
 * grow_bytes), capped so that the arena stays within its maximum; CP_OOM when the maximum leaves no
 * room for the block. */
static int cp_arena_grow_bytes(const struct cp_pool *p, uint64_t blk, uint64_t *n) {
	*n = blk > p->grow_min ? blk : p->grow_min;
	uint64_t maximum = p->cfg.maximum;
	if (maximum > 0) {
		if (p->arena_total >= maximum || maximum - p->arena_total < blk)
			return CP_OOM;
		if (*n > maximum - p->arena_total)
			*n = maximum - p->arena_total;
	}
	return CP_OK;
}

/* cp_arena_grow adds a segment that can hold a block of blk bytes: a fallback. When the upstream is
 * out of memory, the pool gives back its idle regions and, if that gave back any, asks once more. */
static int cp_arena_grow(struct cp_pool *p, uint64_t blk) {
	if (p->no_grow)
		return CP_WOULD_GROW;
	uint64_t n, addr;
	int err = cp_arena_grow_bytes(p, blk, &n);
	if (err != CP_OK)
		return err;
	err = cp_reserve(p, n, &addr);
	if (err == CP_OOM && cp_release_idle(p) > 0) {
		cp_arena_grow_bytes(p, blk, &n); /* the arena holds no more than before: within its maximum */
		err = cp_reserve(p, n, &addr);
	}
	if (err != 0)
		return err;
	p->s.fallbacks++;
	if (cp_vec_reserve(&p->owned, p->owned.len + 1) != 0)
		return CP_ERR;
	size_t at = 0;
	while (at < p->owned.len && CP_AT(&p->owned, struct cp_region, at).addr < addr)
		at++;
	struct cp_region *o = (struct cp_region *)p->owned.data;
	memmove(o + at + 1, o + at, (p->owned.len - at) * sizeof *o);
	o[at] = (struct cp_region){addr, n, 0};
	p->owned.len++;
	return cp_add_segment(p, addr, n) == 0 ? CP_OK : CP_ERR;
}

static int32_t cp_arena_find(struct cp_pool *p, uint64_t blk, uint64_t stream) {
	if (p->cfg.per_stream) {
		int32_t id = cp_best_fit(p, 1, stream, blk);
		if (id != CP_NIL)
			return id;
	}
	return cp_best_fit(p, 0, 0, blk);
}

/* cp_born_at returns when node id became a live block; 0 (oldest) for a free node or none. */
static uint64_t cp_born_at(struct cp_pool *p, int32_t id) {
	if (id == CP_NIL || CP_NODE(p, id).state != CP_USED)
		return 0;
	return CP_NODE(p, id).born;
}

static int cp_arena_alloc(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr, uint64_t *blk_out) {
	uint64_t blk = cp_round(size > 1 ? size : 1, p->cfg.align);
	int32_t id = cp_arena_find(p, blk, stream);
	if (id == CP_NIL) {
		int err = cp_arena_grow(p, blk);
		if (err != CP_OK)
			return err;
		id = cp_arena_find(p, blk, stream);
	}
	struct cp_node *n = &CP_NODE(p, id);
	if (p->cfg.fit_aged && cp_born_at(p, n->prev) > cp_born_at(p, n->next))
		id = cp_take_high(p, id, blk);
	else if (cp_take(p, id, blk) != 0)
		id = CP_NIL;
	if (id == CP_NIL)
		return CP_ERR;
	if (p->cfg.fit_aged)
		CP_NODE(p, id).born = ++p->allocs_seen;
	*addr = CP_NODE(p, id).addr;
	*blk_out = blk;
	return cp_live_put(p, *addr, size, id) == 0 ? CP_OK : CP_ERR;
}

/* cp_arena_free returns the block at addr to the free space; 0 when no block starts there. */
static int cp_arena_free(struct cp_pool *p, uint64_t addr, uint64_t stream, uint64_t *req, uint64_t *blk) {
	struct cp_live e;
	if (!cp_live_take(p, addr, &e))
		return 0;
	*req = e.req;
	*blk = CP_NODE(p, e.node).size;
	if (p->cfg.per_stream)
		cp_release_node(p, e.node, 1, stream);
	else
		cp_release_node(p, e.node, 0, 0);
	return 1;
}

static int cp_add_slab(struct cp_pool *p, int ci, uint64_t addr, uint64_t n) {
	struct cp_class *c = &p->classes[ci];
	int lent;
	struct cp_slab *sl = cp_mem(&p->book, sizeof *sl, &lent);
	if (sl == NULL)
		return -1;
	*sl = (struct cp_slab){addr, addr + n * c->size, c->size, ci, lent, n, 0, {NULL, 0, 0, sizeof(uint64_t), &p->book, 0}};
	if (cp_vec_reserve(&sl->req, n) != 0 || cp_vec_reserve(&p->slabs, p->slabs.len + 1) != 0 ||
	    cp_vec_reserve(&p->bases, p->bases.len + 1) != 0)
		return -1;
	sl->req.len = n;
	size_t at = 0;
	while (at < p->slabs.len && CP_AT(&p->slabs, struct cp_slab_ref, at).base < addr)
		at++;
	struct cp_slab_ref *s = (struct cp_slab_ref *)p->slabs.data;
	memmove(s + at + 1, s + at, (p->slabs.len - at) * sizeof *s);
	s[at] = (struct cp_slab_ref){sl->base, sl->end, sl->size, (uint64_t *)sl->req.data, sl, ci};
	p->slabs.len++;
	uint64_t *b = (uint64_t *)p->bases.data;
	memmove(b + at + 1, b + at, (p->bases.len - at) * sizeof *b);
	b[at] = sl->base;
	p->bases.len++;
	c->fresh = sl;
	return 0;
}

/* cp_slab_for returns the index entry of the slab that holds addr, or NULL. */
static struct cp_slab_ref *cp_slab_for(struct cp_pool *p, uint64_t addr) {
	const uint64_t *b = (const uint64_t *)p->bases.data;
	size_t lo = 0, hi = p->bases.len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (b[mid] <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	struct cp_slab_ref *r = &CP_AT(&p->slabs, struct cp_slab_ref, lo - 1);
	return addr < r->end ? r : NULL;
}

/* cp_stream_lists returns the per-stream free lists of stream, made when create is set. */
static struct cp_stream_lists *cp_stream(struct cp_pool *p, uint64_t stream, int create) {
	for (size_t i = 0; i < p->streams.len; i++)
		if (CP_AT(&p->streams, struct cp_stream_lists, i).stream == stream)
			return &CP_AT(&p->streams, struct cp_stream_lists, i);
	if (!create || cp_vec_reserve(&p->streams, p->streams.len + 1) != 0)
		return NULL;
	struct cp_stream_lists *l = &CP_AT(&p->streams, struct cp_stream_lists, p->streams.len++);
	memset(l, 0, sizeof *l);
	l->stream = stream;
	for (int i = 0; i < CP_MAX_CLASSES; i++)
		l->free[i].elem = sizeof(struct cp_slot), l->free[i].book = &p->book;
	return l;
}

static int cp_pop_list(struct cp_vec *v, struct cp_slot *out) {
	if (v->len == 0)
		return 0;
	*out = CP_AT(v, struct cp_slot, --v->len);
	return 1;
}

static int cp_push_list(struct cp_vec *v, struct cp_slot s) {
	if (cp_vec_reserve(v, v->len + 1) != 0)
		return -1;
	CP_AT(v, struct cp_slot, v->len++) = s;
	return 0;
}

/* cp_pop takes the slot freed last usable on stream, else the lowest never-used slot. */
static int cp_pop(struct cp_pool *p, int ci, uint64_t stream, struct cp_slot *out) {
	struct cp_class *c = &p->classes[ci];
	if (p->cfg.per_stream) {
		struct cp_stream_lists *l = cp_stream(p, stream, 0);
		if (l != NULL && cp_pop_list(&l->free[ci], out))
			return 1;
	}
	if (cp_pop_list(&c->free, out))
		return 1;
	struct cp_slab *f = c->fresh;
	if (f != NULL && f->used < f->nslots) {
		uint64_t slot = f->used++;
		*out = (struct cp_slot){f->base + slot * f->size, &CP_AT(&f->req, uint64_t, slot)};
		return 1;
	}
	return 0;
}

/* cp_slab_idle reports whether the slab of index entry r has no live or deferred slot. */
static int cp_slab_idle(const struct cp_slab_ref *r) {
	for (uint64_t i = 0, n = r->sl->nslots; i < n; i++)
		if (r->req[i] != 0)
			return 0;
	return 1;
}

/* cp_drop_slots takes the slots of [base, end) out of the free list v; the others keep their order. */
static void cp_drop_slots(struct cp_vec *v, uint64_t base, uint64_t end) {
	size_t k = 0;
	for (size_t i = 0; i < v->len; i++) {
		struct cp_slot s = CP_AT(v, struct cp_slot, i);
		if (s.addr < base || s.addr >= end)
			CP_AT(v, struct cp_slot, k++) = s;
	}
	v->len = k;
}

/* cp_drop_slab takes the idle slab of index entry at out of the slab index and out of its class's
 * free lists, and frees its bookkeeping; the class has no fresh slab left if it was this one. */
static void cp_drop_slab(struct cp_pool *p, size_t at) {
	struct cp_slab_ref r = CP_AT(&p->slabs, struct cp_slab_ref, at);
	struct cp_class *c = &p->classes[r.cls];
	cp_drop_slots(&c->free, r.base, r.end);
	for (size_t i = 0; i < p->streams.len; i++)
		cp_drop_slots(&CP_AT(&p->streams, struct cp_stream_lists, i).free[r.cls], r.base, r.end);
	if (c->fresh == r.sl)
		c->fresh = NULL;
	struct cp_slab_ref *s = (struct cp_slab_ref *)p->slabs.data;
	memmove(s + at, s + at + 1, (p->slabs.len - at - 1) * sizeof *s);
	p->slabs.len--;
	uint64_t *b = (uint64_t *)p->bases.data;
	memmove(b + at, b + at + 1, (p->bases.len - at - 1) * sizeof *b);
	p->bases.len--;
	cp_vec_free(&r.sl->req);
	if (!r.sl->lent)
		munmap(r.sl, sizeof *r.sl);
}

/* cp_release_idle_slabs gives back, in the order they were grown, the slabs classes grew by whose
 * slots are all free, and returns their bytes. */
static uint64_t cp_release_idle_slabs(struct cp_pool *p) {
	uint64_t bytes = 0;
	size_t k = 0;
	for (size_t i = 0; i < p->regions.len; i++) {
		struct cp_region r = CP_AT(&p->regions, struct cp_region, i);
		struct cp_slab_ref *sl = r.plan ? NULL : cp_slab_for(p, r.addr);
		if (sl != NULL && cp_slab_idle(sl) && cp_release(p, r.addr, r.size) == 0) {
			cp_drop_slab(p, (size_t)(sl - (struct cp_slab_ref *)p->slabs.data));
			p->s.idle_releases++;
			p->s.idle_released_bytes += r.size;
			bytes += r.size;
			continue;
		}
		CP_AT(&p->regions, struct cp_region, k++) = r;
	}
	p->regions.len = k;
	return bytes;
}

/* cp_whole_free_node returns the free node that covers the arena segment r whole, or CP_NIL. */
static int32_t cp_whole_free_node(struct cp_pool *p, struct cp_region r) {
	for (size_t i = 0; i < p->order.len; i++) {
		const struct cp_okey *k = &CP_AT(&p->order, struct cp_okey, i);
		if (k->addr == r.addr && k->size == r.size)
			return k->id;
	}
	return CP_NIL;
}

/* cp_release_idle_segments gives back, in address order, the segments the arena reserved itself that
 * are entirely free, and returns their bytes. The plan's arena space stays. */
static uint64_t cp_release_idle_segments(struct cp_pool *p) {
	uint64_t bytes = 0;
	size_t k = 0;
	for (size_t i = 0; i < p->owned.len; i++) {
		struct cp_region r = CP_AT(&p->owned, struct cp_region, i);
		int32_t id = cp_whole_free_node(p, r);
		if (id != CP_NIL && cp_release(p, r.addr, r.size) == 0) {
			cp_detach(p, id);
			cp_recycle(p, id);
			p->arena_total -= r.size;
			p->s.idle_releases++;
			p->s.idle_released_bytes += r.size;
			bytes += r.size;
			continue;
		}
		CP_AT(&p->owned, struct cp_region, k++) = r;
	}
	p->owned.len = k;
	return bytes;
}

uint64_t cp_release_idle(struct cp_pool *p) {
	if (p->closed)
		return 0;
	uint64_t bytes = cp_release_idle_slabs(p);
	return bytes + cp_release_idle_segments(p);
}

/* cp_reserve_growth reserves size bytes for a growth into *addr; when the upstream is out of memory,
 * it gives back the idle regions and, if that gave back any, asks once more. */
static int cp_reserve_growth(struct cp_pool *p, uint64_t size, uint64_t *addr) {
	int err = cp_reserve(p, size, addr);
	if (err != CP_OOM || cp_release_idle(p) == 0)
		return err;
	return cp_reserve(p, size, addr);
}

/* cp_grow_class adds a slab of grow_slots slots to class ci: a fallback. */
static int cp_grow_class(struct cp_pool *p, int ci) {
	if (p->no_grow)
		return CP_WOULD_GROW;
	struct cp_class *c = &p->classes[ci];
	uint64_t addr, bytes = c->grow_slots * c->size;
	int err = cp_reserve_growth(p, bytes, &addr);
	if (err != 0)
		return err;
	p->s.fallbacks++;
	if (cp_vec_reserve(&p->regions, p->regions.len + 1) != 0)
		return CP_ERR;
	CP_AT(&p->regions, struct cp_region, p->regions.len++) = (struct cp_region){addr, bytes, 0};
	return cp_add_slab(p, ci, addr, c->grow_slots) == 0 ? CP_OK : CP_ERR;
}

static void cp_allocated(struct cp_pool *p, uint64_t req, uint64_t blk) {
	struct cp_stats *s = &p->s;
	s->allocs++;
	s->live_bytes += req;
	if (s->live_bytes > s->peak_live_bytes)
		s->peak_live_bytes = s->live_bytes;
	s->block_bytes += blk;
	if (s->block_bytes > s->peak_block_bytes)
		s->peak_block_bytes = s->block_bytes;
	cp_note_peak(p);
}

static void cp_failed(struct cp_pool *p) {
	p->s.failures++;
	cp_note_peak(p);
}

/* cp_presize gives the pool's bookkeeping the room its plan needs (free lists as long as the class
 * slots, the deferred list, the arena's tables), so that requests within the plan never wait for
 * memory or page faults of their own. */
static int cp_presize(struct cp_pool *p) {
	uint64_t slots = 0;
	for (int i = 0; i < p->cfg.nclasses; i++) {
		uint64_t n = p->cfg.class_slots[i];
		slots += n;
		if (n > 0 && cp_vec_reserve(&p->classes[i].free, n) != 0)
			return -1;
	}
	if (cp_vec_reserve(&p->deferred, slots + 64) != 0 || cp_vec_reserve(&p->nodes, 64) != 0 ||
	    cp_vec_reserve(&p->order, 64) != 0)
		return -1;
	return p->cfg.arena_bytes > 0 && p->live.len == 0 ? cp_live_grow(p) : 0;
}

/* cp_vec_cap is the capacity cp_vec_reserve gives a new table for n entries. */
static size_t cp_vec_cap(size_t n) { return cp_grown_cap(64, n); }

size_t cp_book_bytes(const struct cp_config *cfg) {
	size_t b = 0, slots = 0, slabs = 0;
	for (int i = 0; i < cfg->nclasses && i < CP_MAX_CLASSES; i++) {
		size_t n = cfg->class_slots[i];
		if (n == 0)
			continue;
		slots += n, slabs++;
		b += CP_LINES(sizeof(struct cp_slab)) + CP_LINES(cp_vec_cap(n) * sizeof(uint64_t)) +
		     CP_LINES(cp_vec_cap(n) * sizeof(struct cp_slot));
	}
	b += CP_LINES(cp_vec_cap(slabs) * sizeof(struct cp_slab_ref)) + CP_LINES(cp_vec_cap(slabs) * sizeof(uint64_t));
	b += CP_LINES(cp_vec_cap(1) * sizeof(struct cp_region)) * 2;
	b += CP_LINES(cp_vec_cap(slots + 64) * sizeof(struct cp_deferred));
	b += CP_LINES(cp_vec_cap(64) * sizeof(struct cp_node)) + CP_LINES(cp_vec_cap(64) * sizeof(struct cp_okey));
	if (cfg->arena_bytes > 0)
		b += CP_LINES(1024 * sizeof(struct cp_live));
	b += b / 4 + (64 << 10);
#ifdef CP_BOOK_LIMIT /* tests: a book too small for the plan, or none (0) */
	b = b < CP_BOOK_LIMIT ? b : CP_BOOK_LIMIT;
#endif
	return b;
}

int cp_init_book(struct cp_pool *p, const struct cp_config *cfg, struct cp_upstream up, struct cp_book book) {
	memset(p, 0, sizeof *p);
	if (book.base == NULL || book.size < cp_book_bytes(cfg)) {
		cp_book_close(&book);
		cp_book_open(&book, cp_book_bytes(cfg)); /* without one, every table maps its own pages */
	}
	p->book = (struct cp_book){book.base, book.size, 0};
	p->cfg = *cfg;
	p->up = up;
	p->recycled = CP_NIL;
	struct {
		struct cp_vec *v;
		size_t elem;
	} vecs[] = {{&p->slabs, sizeof(struct cp_slab_ref)}, {&p->bases, sizeof(uint64_t)},
		    {&p->regions, sizeof(struct cp_region)}, {&p->streams, sizeof(struct cp_stream_lists)},
		    {&p->nodes, sizeof(struct cp_node)}, {&p->order, sizeof(struct cp_okey)},
		    {&p->owned, sizeof(struct cp_region)}, {&p->live, sizeof(struct cp_live)},
		    {&p->deferred, sizeof(struct cp_deferred)}};
	for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
		vecs[i].v->elem = vecs[i].elem, vecs[i].v->book = &p->book;
	if (p->cfg.align == 0)
		p->cfg.align = 512;
	if (p->cfg.nclasses < 0 || p->cfg.nclasses > CP_MAX_CLASSES)
		return CP_ERR;
	uint64_t total = cp_round(cfg->arena_bytes, p->cfg.align);
	for (int i = 0; i < cfg->nclasses; i++) {
		struct cp_class *c = &p->classes[i];
		c->size = cfg->class_size[i];
		c->grow_slots = cfg->grow_slots ? cfg->grow_slots : (CP_DEFAULT_GROW_BYTES / c->size ? CP_DEFAULT_GROW_BYTES / c->size : 1);
		c->free.elem = sizeof(struct cp_slot), c->free.book = &p->book;
		total += c->size * cfg->class_slots[i];
	}
	if (p->cfg.threshold == 0 && cfg->nclasses > 0)
		p->cfg.threshold = p->classes[cfg->nclasses - 1].size;
	p->grow_min = cp_round(cfg->grow_bytes, p->cfg.align);
	if (total > 0) {
		uint64_t addr;
		int err = cp_reserve(p, total, &addr);
		if (err != 0)
			return err;
		if (cp_vec_reserve(&p->regions, 1) != 0)
			return CP_ERR;
		CP_AT(&p->regions, struct cp_region, p->regions.len++) = (struct cp_region){addr, total, 1};
		for (int i = 0; i < cfg->nclasses; i++) {
			if (cfg->class_slots[i] == 0)
				continue;
			if (cp_add_slab(p, i, addr, cfg->class_slots[i]) != 0)
				return CP_ERR;
			addr += p->classes[i].size * cfg->class_slots[i];
		}
		uint64_t arena = cp_round(cfg->arena_bytes, p->cfg.align);
		if (arena > 0 && cp_add_segment(p, addr, arena) != 0)
			return CP_ERR;
	}
	cp_note_peak(p);
	return cp_presize(p) == 0 ? CP_OK : CP_ERR;
}

uint64_t cp_begin_release(struct cp_pool *p) { return p->gen++; }

void cp_release_through(struct cp_pool *p, uint64_t g) {
	size_t n = 0;
	for (; n < p->deferred.len; n++) {
		struct cp_deferred *q = &CP_AT(&p->deferred, struct cp_deferred, n);
		if (q->gen > g)
			break;
		if (q->req != NULL)
			cp_free_slot(p, q->addr, q->stream, q->req, q->cls);
		else
			cp_free(p, q->addr, q->stream);
	}
	struct cp_deferred *d = (struct cp_deferred *)p->deferred.data;
	memmove(d, d + n, (p->deferred.len - n) * sizeof *d);
	p->deferred.len -= n;
}

void cp_synced(struct cp_pool *p) { cp_release_through(p, cp_begin_release(p)); }

int cp_alloc(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr) {
	if (p->deferred.len == 0 || p->up.sync == NULL)
		return cp_alloc_now(p, size, stream, addr);
	p->no_grow = 1;
	int err = cp_alloc_now(p, size, stream, addr);
	p->no_grow = 0;
	if (err != CP_WOULD_GROW)
		return err;
	if (p->up.sync(p->up.ctx) == 0) {
		p->s.syncs++;
		cp_synced(p);
	}
	return cp_alloc_now(p, size, stream, addr);
}

int cp_try_alloc(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr) {
	p->no_grow = 1;
	int err = cp_alloc_now(p, size, stream, addr);
	p->no_grow = 0;
	return err;
}

int cp_alloc_now(struct cp_pool *p, uint64_t size, uint64_t stream, uint64_t *addr) {
	if (p->closed)
		return CP_CLOSED;
	if (size > CP_MAX_REQUEST) {
		cp_failed(p);
		return CP_OOM;
	}
	int ci = cp_class_for(p, size > 1 ? size : 1);
	if (ci < 0) {
		uint64_t blk;
		int err = cp_arena_alloc(p, size, stream, addr, &blk);
		if (err != CP_OK) {
			if (err != CP_WOULD_GROW)
				cp_failed(p);
			return err;
		}
		cp_allocated(p, size, blk);
		return CP_OK;
	}
	struct cp_slot s;
	if (!cp_pop(p, ci, stream, &s)) {
		int err = cp_grow_class(p, ci);
		if (err != CP_OK) {
			if (err != CP_WOULD_GROW)
				cp_failed(p);
			return err;
		}
		cp_pop(p, ci, stream, &s);
	}
	*s.req = size + 1;
	cp_allocated(p, size, p->classes[ci].size);
	*addr = s.addr;
	return CP_OK;
}

int cp_free(struct cp_pool *p, uint64_t addr, uint64_t stream) {
	if (p->closed)
		return CP_CLOSED;
	uint64_t req, blk;
	struct cp_slab_ref *sl = cp_slab_for(p, addr);
	if (sl == NULL) {
		if (!cp_arena_free(p, addr, stream, &req, &blk))
			return CP_UNKNOWN;
	} else {
		uint64_t *r = cp_slot_word(sl, addr);
		if (r == NULL || *r == 0)
			return CP_UNKNOWN;
		return cp_free_slot(p, addr, stream, r, sl->cls);
	}
	p->s.frees++;
	p->s.live_bytes -= req;
	p->s.block_bytes -= blk;
	return CP_OK;
}

/* cp_free_slot takes back the live slot of class cls at addr, whose requested-bytes word is r. */
static int cp_free_slot(struct cp_pool *p, uint64_t addr, uint64_t stream, uint64_t *r, int cls) {
	uint64_t req = (*r & ~CP_PENDING_BIT) - 1;
	*r = 0;
	struct cp_slot s = {addr, r};
	struct cp_vec *list = &p->classes[cls].free;
	if (p->cfg.per_stream) {
		struct cp_stream_lists *l = cp_stream(p, stream, 1);
		if (l == NULL)
			return CP_ERR;
		list = &l->free[cls];
	}
	if (cp_push_list(list, s) != 0)
		return CP_ERR;
	p->s.frees++;
	p->s.live_bytes -= req;
	p->s.block_bytes -= p->classes[cls].size;
	return CP_OK;
}

/* cp_mark_pending marks the live block at addr as freed by the program but not reusable yet (the
 * device may still use it): CP_OK, CP_PENDING when it is marked already (a double free), CP_UNKNOWN
 * when no live block of the pool starts at addr. On CP_OK a class slot's word and class go into q
 * (q->req stays NULL for an arena block). cp_synced takes marked blocks back. */
static int cp_mark_pending(struct cp_pool *p, uint64_t addr, struct cp_deferred *q) {
	struct cp_slab_ref *sl = cp_slab_for(p, addr);
	q->req = NULL;
	if (sl == NULL) {
		struct cp_live *e = cp_live_find(p, addr);
		if (e == NULL)
			return CP_UNKNOWN;
		if (e->pending)
			return CP_PENDING;
		e->pending = 1;
		return CP_OK;
	}
	uint64_t *r = cp_slot_word(sl, addr);
	if (r == NULL || *r == 0)
		return CP_UNKNOWN;
	if (*r & CP_PENDING_BIT)
		return CP_PENDING;
	*r |= CP_PENDING_BIT;
	q->req = r, q->cls = sl->cls;
	return CP_OK;
}

int cp_defer_free(struct cp_pool *p, uint64_t addr, uint64_t stream) {
	if (cp_vec_reserve(&p->deferred, p->deferred.len + 1) != 0)
		return CP_ERR;
	struct cp_deferred q = {addr, stream, NULL, 0, p->gen};
	int r = cp_mark_pending(p, addr, &q);
	if (r == CP_OK)
		CP_AT(&p->deferred, struct cp_deferred, p->deferred.len++) = q;
	return r;
}

int cp_lookup(struct cp_pool *p, uint64_t addr, uint64_t *req) {
	struct cp_slab_ref *sl = cp_slab_for(p, addr);
	if (sl == NULL) {
		struct cp_live *e = cp_live_find(p, addr);
		if (e == NULL)
			return CP_UNKNOWN;
		*req = e->req;
		return e->pending ? CP_PENDING : CP_OK;
	}
	const uint64_t *w = cp_slot_word(sl, addr);
	uint64_t r = w != NULL ? *w : 0;
	if (r == 0)
		return CP_UNKNOWN;
	*req = (r & ~CP_PENDING_BIT) - 1;
	return r & CP_PENDING_BIT ? CP_PENDING : CP_OK;
}

int cp_owns(struct cp_pool *p, uint64_t addr) {
	if (p->regions.len > 0) { /* the plan, when there is one, is the first region */
		struct cp_region r = CP_AT(&p->regions, struct cp_region, 0);
		if (r.plan && addr >= r.addr && addr - r.addr < r.size)
			return 1;
	}
	if (cp_slab_for(p, addr) != NULL) /* a grown slab */
		return 1;
	const struct cp_region *o = (const struct cp_region *)p->owned.data; /* the arena's own, by address */
	size_t lo = 0, hi = p->owned.len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (o[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && addr - o[lo - 1].addr < o[lo - 1].size;
}

int cp_block_at(struct cp_pool *p, uint64_t addr, uint64_t *base, uint64_t *req) {
	struct cp_slab_ref *sl = cp_slab_for(p, addr);
	if (sl != NULL) {
		uint64_t slot = (addr - sl->base) / sl->size, r = sl->req[slot];
		*base = sl->base + slot * sl->size, *req = (r & ~CP_PENDING_BIT) - 1;
		return r != 0 && addr - *base < (*req > 0 ? *req : 1);
	}
	for (size_t i = 0; i < p->live.len; i++) {
		struct cp_live *e = &CP_AT(&p->live, struct cp_live, i);
		if (e->used && addr >= e->addr && addr - e->addr < (e->req > 0 ? e->req : 1)) {
			*base = e->addr, *req = e->req;
			return 1;
		}
	}
	return 0;
}

int cp_close(struct cp_pool *p) {
	if (p->closed)
		return CP_OK;
	p->closed = 1;
	int err = CP_OK;
	for (size_t i = 0; i < p->regions.len; i++) {
		struct cp_region r = CP_AT(&p->regions, struct cp_region, i);
		if (cp_release(p, r.addr, r.size) != 0)
			err = CP_ERR;
	}
	for (size_t i = 0; i < p->owned.len; i++) {
		struct cp_region r = CP_AT(&p->owned, struct cp_region, i);
		if (cp_release(p, r.addr, r.size) != 0)
			err = CP_ERR;
	}
	for (size_t i = 0; i < p->slabs.len; i++) {
		struct cp_slab *sl = CP_AT(&p->slabs, struct cp_slab_ref, i).sl;
		cp_vec_free(&sl->req);
		if (!sl->lent)
			munmap(sl, sizeof *sl);
	}
	for (int i = 0; i < p->cfg.nclasses; i++)
		cp_vec_free(&p->classes[i].free);
	for (size_t i = 0; i < p->streams.len; i++)
		for (int c = 0; c < CP_MAX_CLASSES; c++)
			cp_vec_free(&CP_AT(&p->streams, struct cp_stream_lists, i).free[c]);
	struct cp_vec *vecs[] = {&p->bases, &p->slabs, &p->regions, &p->streams, &p->nodes, &p->order, &p->owned, &p->live,
				 &p->deferred};
	for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
		cp_vec_free(vecs[i]);
	cp_book_close(&p->book);
	return err;
}

static int cp_keep_region(void *ctx, uint64_t addr, uint64_t size) {
	(void)ctx, (void)addr, (void)size;
	return 0;
}

void cp_discard(struct cp_pool *p) {
	p->up.release = cp_keep_region;
	cp_close(p);
}
