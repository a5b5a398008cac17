/* clock.c: see clock.h. */
#include "clock.h"

int g_clock_state;

uint64_t g_tsc_mult; /* ns per tick, 32.32 fixed point */

static uint64_t g_cal_ticks;

static int64_t g_cal_ns;

TLS struct anchor t_anchor[2];

TLS int t_anchor_cur;    /* index of the anchor in use; 0 ticks = none yet */

TLS int t_reanchoring;   /* a re-anchoring is in progress on this thread */

TLS int64_t t_last_ns;

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

void clock_calibrate(void) {
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

void reanchor(void) {
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
