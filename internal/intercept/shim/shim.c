/*
 * allocscope LD_PRELOAD shim: records every CUDA memory allocation and free of an unmodified program
 * into memory-mapped per-process raw logs (format: docs/DESIGN.md, reader: internal/intercept/rawlog.go).
 * This unit starts it (the constructor), and follows forks and dlclose.
 *
 * Built by intercept.BuildShim from the units that shim/BUILD lists, each with its own small header
 * and hidden visibility (only the hooked CUDA entry points, dlsym, dlclose and the ABI marker are
 * exported). No CUDA headers are needed.
 *
 *   common.h             CUDA types (ABI only), the function table, the record, small helpers
 *   clock.c/.h           timestamps (TSC where it is constant, else CLOCK_MONOTONIC)
 *   addrmap.c/.h         address -> size map, so that frees carry sizes
 *   log.c/.h             the raw log: control file, per-process log, per-thread lanes
 *   hooks.c/.h           what a hooked call does around the real one, and the wrappers
 *   resolve.c/.h         how the real functions are found, and the dlsym override
 *   contexts.c/.h        the thread's device and context, graph captures, the pools' reservations
 *   serve.c/.h           record --pool: the program's allocations served from the C pool
 *   ../cpool/pool.c/.h   the size-class pool in C (package pool's PolicySizeClass)
 *
 * The rules it keeps: writers never wait for each other; no hook takes a lock, so a signal handler
 * that interrupts one can make CUDA calls (they are recorded); the program's return values and errno
 * never change; a log that cannot be written stops recording with one line on stderr and every
 * event after that is counted as lost.
 */
#include "shim.h"
#include "clock.h"
#include "addrmap.h"
#include "log.h"
#include "hooks.h"
#include "serve.h"

int g_enabled; /* logging on: ALLOCSCOPE_LOG_DIR was set at start-up */
int g_init_done;

/* The raw-log format this shim writes; `record --shim` refuses a library without it. */
EXPORT const int allocscope_shim_abi_2 = 2;

/* In a forked child: forget the parent's log and open the child's own. The descriptor of the
 * parent's log, which shares the parent's flock, is closed only once the child holds its own: record,
 * waiting for the processes that hold a log, never sees a gap between the two, even when the parent
 * exits at once (a daemon's double fork). */
static void atfork_child(void) {
	t_tid = 0;
	if (!__atomic_load_n(&g_enabled, __ATOMIC_ACQUIRE))
		return;
	int parent_log = g_log_fd;
	g_log_fd = -1;
	log_forget();
	serve_forget();
	if (g_ctl != NULL)
		__atomic_fetch_add(&g_ctl->processes, 1, __ATOMIC_RELAXED);
	else
		g_private_seq = (uint64_t)getpid() << 40;
	__atomic_store_n(&g_log_state, LOG_OFF, __ATOMIC_RELEASE);
	log_open();
	log_save_maps();
	if (parent_log >= 0)
		close(parent_log);
}

void shim_init(void) {
	if (__atomic_exchange_n(&g_init_done, 1, __ATOMIC_ACQ_REL))
		return;
	int e = errno;
	get_real_dlsym();
	const char *dir = getenv("ALLOCSCOPE_LOG_DIR");
	if (dir != NULL && dir[0] != '\0' && strlen(dir) < sizeof g_dir) {
		strcpy(g_dir, dir);
		if (pthread_key_create(&g_lane_key, lanes_release) == 0) {
			map_grow(&g_addrs, 0);
			map_grow(&g_handles, 0);
			map_control();
			log_open();
			log_save_maps();
			serve_init();
			pthread_atfork(NULL, NULL, atfork_child);
			__atomic_store_n(&g_enabled, 1, __ATOMIC_RELEASE);
		}
	}
	errno = e;
}

__attribute__((constructor)) static void shim_constructor(void) { shim_init(); }

/* dlclose: a library about to be unloaded takes its mappings along, so they are saved first when
 * anything was loaded since the last save (callsites inside it stay nameable). */
EXPORT int dlclose(void *h) {
	if (__atomic_load_n(&g_enabled, __ATOMIC_ACQUIRE) && log_maps_changed()) {
		int e = errno;
		log_save_maps();
		errno = e;
	}
	return shim_dlclose(h);
}

/* At exit the mappings are saved again, with the libraries loaded since the start. */
__attribute__((destructor)) static void shim_destructor(void) {
	int e = errno;
	log_save_maps();
	errno = e;
}
