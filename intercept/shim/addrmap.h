/*
 * The shim's address -> (size, device) map, so that a free carries the size and device of what it
 * frees. Lock-free open addressing with linear probing over a chain of tables: the first holds 1024
 * slots (16 KiB, so a program with few live blocks works in cache even when every allocation returns a
 * new address), each further one four times the slots of the one before. Inserts go to the newest
 * table; a new table is made (mmap, installed with compare-and-swap: no lock, so a signal handler can
 * use the map wherever it interrupts its thread) when an insert finds a run of live entries longer
 * than MAP_GROW_PROBE there, i.e. when the live set outgrows the table. Lookups search the newest
 * table first. A removed entry leaves a tombstone that the next insert probing over it reuses, so
 * churn of fresh addresses does not lengthen the probes of live keys.
 */
#ifndef ALLOCSCOPE_ADDRMAP_H
#define ALLOCSCOPE_ADDRMAP_H

#include "common.h"

#define MAP_EMPTY 0ull
#define MAP_TOMB (~0ull)
#define MAP_MAX_PROBE 256
#define MAP_GROW_PROBE 24
#define MAP_MAX_TABLES 10
#define MAP_FIRST_BITS 10
#define VAL_PRESENT (1ull << 63)
#define VAL_SIZE_MASK ((1ull << 55) - 1)

struct map_slot { uint64_t key; uint64_t val; };
struct addr_map {
	struct map_slot *tables[MAP_MAX_TABLES]; /* table t has 1 << map_bits(t) slots */
	int ntables;
};

static inline unsigned map_bits(int t) { return MAP_FIRST_BITS + 2 * (unsigned)t; }

static inline uint64_t pack_val(uint64_t size, int dev) {
	return VAL_PRESENT | ((uint64_t)(uint8_t)(dev + 1) << 55) | (size & VAL_SIZE_MASK);
}
static inline uint64_t val_size(uint64_t v) { return v & VAL_SIZE_MASK; }
static inline int val_device(uint64_t v) { return v ? (int)((v >> 55) & 0xff) - 1 : -1; }

static inline uint64_t map_hash(uint64_t key, unsigned bits) {
	return (key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

/* map_grow makes table n if no other thread has; it returns 0 when out of tables or memory. */
static int map_grow(struct addr_map *m, int n) {
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

/* map_tables returns how many tables are in use, finishing an installation another thread began. */
static inline int map_tables(struct addr_map *m) {
	int n = __atomic_load_n(&m->ntables, __ATOMIC_ACQUIRE);
	while (n < MAP_MAX_TABLES && __atomic_load_n(&m->tables[n], __ATOMIC_ACQUIRE) != NULL) {
		map_grow(m, n);
		n = __atomic_load_n(&m->ntables, __ATOMIC_ACQUIRE);
	}
	return n;
}

/* map_insert stores key -> val. Out of tables or memory, the entry is dropped (its free will carry
 * size 0 and device -1). */
static void map_insert(struct addr_map *m, uint64_t key, uint64_t val) {
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

/* map_find returns the value stored for key (0 if none); with remove set it also removes the entry. */
static uint64_t map_find(struct addr_map *m, uint64_t key, int remove) {
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

#endif
