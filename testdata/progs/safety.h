/* Helpers of the safety test programs (sync_race.c, capture.c, double_free.c, reset.c, two_devices.c,
 * sync_deadlock.c, oom.c, address_range.c, stress.c): a table of the program's live blocks that counts
 * every new block overlapping a live one, allocation-lifetime numbers for fakecuda_launch, and the
 * common report lines. Header-only: each program is one translation unit. */
#ifndef SAFETY_H
#define SAFETY_H

#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE_MAX 65536

static struct { uint64_t addr, size; } live[LIVE_MAX];
static int nlive;
static long overlaps, live_full;
static uint64_t owner_next;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

/* live_add records a new block, counting each live block it overlaps. */
__attribute__((unused)) static void live_add(void *p, uint64_t size) {
	uint64_t a = (uint64_t)(uintptr_t)p;
	pthread_mutex_lock(&live_mu);
	for (int i = 0; i < nlive; i++)
		if (live[i].addr < a + size && a < live[i].addr + live[i].size)
			overlaps++;
	if (nlive < LIVE_MAX)
		live[nlive].addr = a, live[nlive].size = size, nlive++;
	else
		live_full++;
	pthread_mutex_unlock(&live_mu);
}

/* live_remove forgets the block at p (before it is freed). */
__attribute__((unused)) static void live_remove(void *p) {
	uint64_t a = (uint64_t)(uintptr_t)p;
	pthread_mutex_lock(&live_mu);
	for (int i = 0; i < nlive; i++)
		if (live[i].addr == a) {
			live[i] = live[--nlive];
			break;
		}
	pthread_mutex_unlock(&live_mu);
}

/* new_owner numbers an allocation lifetime. */
__attribute__((unused)) static uint64_t new_owner(void) { return __atomic_add_fetch(&owner_next, 1, __ATOMIC_RELAXED); }

/* report prints the checks every safety program ends with. */
static void report(void) {
	printf("hazards: %ld\nmisuses: %ld\noverlaps: %ld\n", fakecuda_hazards(), fakecuda_misuses(),
	       overlaps + live_full);
}

#endif
