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
int map_grow(struct addr_map *m, int n);

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
void map_insert(struct addr_map *m, uint64_t key, uint64_t val);

/* map_find returns the value stored for key (0 if none); with remove set it also removes the entry. */
uint64_t map_find(struct addr_map *m, uint64_t key, int remove);

#endif
