/*
 * Timestamps: CLOCK_MONOTONIC nanoseconds. Where the TSC runs at a constant rate (x86-64 with
 * constant_tsc and nonstop_tsc) hooks read it instead of calling clock_gettime (about 80 ns on a VM
 * without a vDSO clock). The rate is calibrated once per process, at its first event, over about
 * 200 us (other threads use clock_gettime meanwhile); each thread re-anchors to clock_gettime every
 * 2^21 ticks (about 1 ms) and refines the rate over the span since calibration, so the error stays
 * well under a microsecond. Timestamps never go back within a thread.
 *
 * Signal safety: a hook reads the clock mode once (struct stamp) and converts both of its readings
 * with it. A thread's anchor is double-buffered and switched with one store; a handler that interrupts
 * a re-anchoring keeps using the previous anchor.
 */
#ifndef ALLOCSCOPE_CLOCK_H
#define ALLOCSCOPE_CLOCK_H

#include "common.h"

#define REANCHOR_TICKS (1ll << 21)

enum { CLOCK_UNCALIBRATED, CLOCK_CALIBRATING, CLOCK_TSC, CLOCK_SYSTEM };

extern int g_clock_state;
extern uint64_t g_tsc_mult;

struct anchor { uint64_t ticks; int64_t ns; };
extern TLS struct anchor t_anchor[2];
extern TLS int t_anchor_cur;
extern TLS int t_reanchoring;
extern TLS int64_t t_last_ns;

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t read_tsc(void) { return __rdtsc(); }
#else
static inline uint64_t read_tsc(void) { return 0; }
#endif

/* clock_calibrate is run by the one thread that moved the state from UNCALIBRATED to CALIBRATING. */
void clock_calibrate(void);

/* clock_mode returns 1 when this call's readings are TSC ticks, 0 when they are nanoseconds. */
static inline int clock_mode(void) {
	int s = __atomic_load_n(&g_clock_state, __ATOMIC_ACQUIRE);
	if (LIKELY(s == CLOCK_TSC))
		return 1;
	if (s == CLOCK_UNCALIBRATED) {
		int expect = CLOCK_UNCALIBRATED;
		if (__atomic_compare_exchange_n(&g_clock_state, &expect, CLOCK_CALIBRATING, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			clock_calibrate();
		return __atomic_load_n(&g_clock_state, __ATOMIC_ACQUIRE) == CLOCK_TSC;
	}
	return 0;
}

static inline uint64_t clock_read(int tsc) { return tsc ? read_tsc() : (uint64_t)now_ns(CLOCK_MONOTONIC); }

void reanchor(void);

/* clock_ns converts a reading taken in mode tsc into CLOCK_MONOTONIC nanoseconds. */
static inline int64_t clock_ns(int tsc, uint64_t t) {
	int64_t ns;
	if (!tsc) {
		ns = (int64_t)t;
	} else {
		const struct anchor *a = &t_anchor[t_anchor_cur];
		int64_t d = (int64_t)(t - a->ticks);
		if (UNLIKELY(a->ticks == 0 || d > REANCHOR_TICKS) && !t_reanchoring) {
			reanchor();
			a = &t_anchor[t_anchor_cur];
			d = (int64_t)(t - a->ticks);
		}
		if (UNLIKELY(a->ticks == 0)) /* a handler that interrupted the first anchoring */
			return now_ns(CLOCK_MONOTONIC);
		uint64_t mult = __atomic_load_n(&g_tsc_mult, __ATOMIC_RELAXED);
		ns = a->ns + (int64_t)(((__int128)d * (__int128)mult) >> 32);
	}
	if (ns < t_last_ns)
		ns = t_last_ns;
	t_last_ns = ns;
	return ns;
}

/* clock_duration converts the difference of two readings taken in mode tsc into nanoseconds. */
static inline int64_t clock_duration(int tsc, uint64_t t0, uint64_t t1) {
	if (!tsc)
		return (int64_t)(t1 - t0);
	uint64_t mult = __atomic_load_n(&g_tsc_mult, __ATOMIC_RELAXED);
	return (int64_t)(((unsigned __int128)(t1 - t0) * mult) >> 32);
}

#endif
