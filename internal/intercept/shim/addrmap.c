/* addrmap.c: see addrmap.h. */
#include "addrmap.h"

int map_grow(struct addr_map *m, int n) {
	if (n >= MAP_MAX_TABLES)
		return 0;
	if (__atomic_load_n(&m->tables[n], __ATOMIC_ACQUIRE) == NULL) {
		void *p = mmap(NULL, sizeof(struct map_slot) << map_bits(n), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return 0;
		struct map_slot *expect = NULL;
		if (!__atomic_compare_exchange_n(&m->tables[n], &expect, (struct map_slot *)p, 0, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			munmap(p, sizeof(struct map_slot) << map_bits(n));
	}
	int seen = n;
	__atomic_compare_exchange_n(&m->ntables, &seen, n + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	return 1;
}

void map_insert(struct addr_map *m, uint64_t key, uint64_t val) {
	if (key == MAP_EMPTY || key == MAP_TOMB)
		return;
	for (;;) {
		int n = map_tables(m);
		if (n == 0 && !map_grow(m, 0))
			return;
		if (n == 0)
			continue;
		struct map_slot *tab = __atomic_load_n(&m->tables[n - 1], __ATOMIC_ACQUIRE);
		uint64_t mask = (1ull << map_bits(n - 1)) - 1;
		uint64_t i = map_hash(key, map_bits(n - 1));
		for (int p = 0; p < MAP_MAX_PROBE; p++, i = (i + 1) & mask) {
			struct map_slot *s = &tab[i];
			uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
			if (k != MAP_EMPTY && k != MAP_TOMB && k != key)
				continue;
			if (p > MAP_GROW_PROBE && n < MAP_MAX_TABLES && map_grow(m, n))
				break; /* the live set outgrew this table: insert into the next one */
			if (k == key) {
				__atomic_store_n(&s->val, val, __ATOMIC_RELEASE);
				return;
			}
			/* The key is published before its value: a lookup of this key comes after the
			 * allocation that returned it, so after the value is stored. */
			if (__atomic_compare_exchange_n(&s->key, &k, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				__atomic_store_n(&s->val, val, __ATOMIC_RELEASE);
				return;
			}
		}
		if (n >= MAP_MAX_TABLES || (!map_grow(m, n) && map_tables(m) == n))
			return;
	}
}

uint64_t map_find(struct addr_map *m, uint64_t key, int remove) {
	if (key == MAP_EMPTY || key == MAP_TOMB)
		return 0;
	for (int t = map_tables(m) - 1; t >= 0; t--) {
		struct map_slot *tab = __atomic_load_n(&m->tables[t], __ATOMIC_ACQUIRE);
		uint64_t mask = (1ull << map_bits(t)) - 1;
		uint64_t i = map_hash(key, map_bits(t));
		for (int p = 0; p < MAP_MAX_PROBE; p++, i = (i + 1) & mask) {
			struct map_slot *s = &tab[i];
			uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
			if (k == MAP_EMPTY)
				break;
			if (k != key)
				continue;
			uint64_t v = __atomic_load_n(&s->val, __ATOMIC_ACQUIRE);
			if (!remove)
				return v;
			if (__atomic_compare_exchange_n(&s->key, &k, MAP_TOMB, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return v;
			return 0; /* another thread removed it first */
		}
	}
	return 0;
}
