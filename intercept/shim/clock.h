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

static int g_clock_state;
static uint64_t g_tsc_mult; /* ns per tick, 32.32 fixed point */
static uint64_t g_cal_ticks;
static int64_t g_cal_ns;

struct anchor { uint64_t ticks; int64_t ns; };
static TLS struct anchor t_anchor[2];
static TLS int t_anchor_cur;    /* index of the anchor in use; 0 ticks = none yet */
static TLS int t_reanchoring;   /* a re-anchoring is in progress on this thread */
static TLS int64_t t_last_ns;

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t read_tsc(void) { return __rdtsc(); }
#else
static inline uint64_t read_tsc(void) { return 0; }
#endif

/* tsc_pair reads the TSC and the monotonic clock at (nearly) the same instant. */
static void tsc_pair(uint64_t *ticks, int64_t *ns) {
	uint64_t a = read_tsc();
	*ns = now_ns(CLOCK_MONOTONIC);
	uint64_t b = read_tsc();
	*ticks = a + (b - a) / 2;
}

static void set_rate(uint64_t dticks, int64_t dns) {
	if (dticks == 0 || dns <= 0)
		return;
	__atomic_store_n(&g_tsc_mult, (uint64_t)(((unsigned __int128)dns << 32) / dticks), __ATOMIC_RELAXED);
}

/* tsc_reliable reports whether /proc/cpuinfo lists constant_tsc and nonstop_tsc. */
static int tsc_reliable(void) {
#if defined(__x86_64__)
	char buf[16384];
	int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t n = 0;
	while (n < sizeof buf - 1) {
		ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	char *flags = strstr(buf, "\nflags");
	if (flags == NULL)
		return 0;
	char *end = strchr(flags + 1, '\n');
	if (end != NULL)
		*end = '\0';
	return strstr(flags, " constant_tsc") != NULL && strstr(flags, " nonstop_tsc") != NULL;
#else
	return 0;
#endif
}

/* clock_calibrate is run by the one thread that moved the state from UNCALIBRATED to CALIBRATING. */
static void clock_calibrate(void) {
	int state = CLOCK_SYSTEM;
	if (tsc_reliable()) {
		uint64_t t0, t1;
		int64_t n0, n1;
		tsc_pair(&t0, &n0);
		do
			tsc_pair(&t1, &n1);
		while (n1 - n0 < 200000);
		g_cal_ticks = t0;
		g_cal_ns = n0;
		set_rate(t1 - t0, n1 - n0);
		state = CLOCK_TSC;
	}
	__atomic_store_n(&g_clock_state, state, __ATOMIC_RELEASE);
}

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

static void reanchor(void) {
	t_reanchoring = 1;
	SIGNAL_FENCE();
	int next = !t_anchor_cur;
	tsc_pair(&t_anchor[next].ticks, &t_anchor[next].ns);
	int64_t span = t_anchor[next].ns - g_cal_ns;
	if (span > 10000000) /* 10 ms: refine the rate over the whole span since calibration */
		set_rate(t_anchor[next].ticks - g_cal_ticks, span);
	SIGNAL_FENCE();
	t_anchor_cur = next;
	SIGNAL_FENCE();
	t_reanchoring = 0;
}

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
