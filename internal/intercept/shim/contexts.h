/*
 * record --pool's view of CUDA contexts and graph captures, for serve.h.
 *
 * Contexts. A pool belongs to the context that owns its memory (serve.h). The driver functions that
 * name contexts are resolved once (ctx_resolve); a driver without cuCtxGetCurrent (an old fake) keys
 * a thread's context by its device instead. ctx_enter makes a pool's context current for the
 * pool's own driver calls (its events, barriers and synchronizations) when the thread's is another.
 *
 * Captures. The shim hooks the calls that begin and end a stream capture and the exchange of a
 * thread's capture mode, and keeps the captures in progress in a table (no lock: slots are claimed
 * with a compare-and-swap). While any capture is in progress the pools make no ordering of their own
 * (an event or synchronization could join or break it), a stream-ordered call on a capturing stream
 * (cuStreamIsCapturing asks the driver, so streams that joined a capture count too) goes to CUDA,
 * and a synchronous call that CUDA forbids during a capture (a global-mode capture anywhere, or a
 * thread-local one of the calling thread, unless the thread's mode is relaxed) is not served either.
 *
 * Reservations. Every region a pool reserved is listed in g_ranges, read without a lock, so that a
 * free can tell at once whether an address lies in a pool's memory (then it never reaches CUDA) and
 * which pool's, also from a signal handler.
 */
#ifndef ALLOCSCOPE_CONTEXTS_H
#define ALLOCSCOPE_CONTEXTS_H

#include "common.h"

/* The thread's device (contexts.c's "current device"): g_ctx_epoch is bumped before every call that
 * may leave a thread without a context or change it. */
extern unsigned long g_ctx_epoch;

/* one_device reports whether the process sees exactly one device (asked until the driver answers). */
int one_device(void);

/* context_changes notes a call that may leave threads without a context: every thread asks again. */
void context_changes(void);

/* current_device returns the calling thread's device, or -1 when it has no context. */
int current_device(void);

typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_push_fn)(CUcontext);
typedef CUresult (*ctx_pop_fn)(CUcontext *);
typedef CUresult (*stream_ctx_fn)(CUstream, CUcontext *);
typedef CUresult (*primary_state_fn)(CUdevice, unsigned *, int *);
typedef CUresult (*stream_sync_fn)(CUstream);
typedef CUresult (*device_of_ctx_fn)(CUdevice *);

struct ctx_state {
	int resolved;
	ctx_get_fn get_current;       /* NULL: contexts are keyed by device */
	ctx_push_fn push;
	ctx_pop_fn pop;
	stream_ctx_fn stream_ctx;
	primary_state_fn primary_state;
	stream_sync_fn stream_sync;
	device_of_ctx_fn get_device;
};
extern struct ctx_state g_ctx;

extern int g_ctx_made;

/* ctx_key_of_device is the key of device d's context where the driver cannot name contexts. */
static inline CUcontext ctx_key_of_device(int d) { return (CUcontext)(uintptr_t)(d + 1); }

/* ctx_current names the calling thread's context and its device: 0, or -1 when it has none. */
int ctx_current(CUcontext *ctx, int *device);

/* ctx_several reports whether a thread's context may differ from call to call in ways the per-thread
 * cache cannot see: several devices, or contexts the program made. */
int ctx_several(void);

/* ctx_of_stream names the context of stream (a handle the program passed): the thread's own for the
 * legacy, per-thread and NULL streams. 0, or -1 when it cannot be told. */
int ctx_of_stream(uint64_t stream, CUcontext *ctx, int *device);

/* ctx_enter makes ctx current for the pool's own calls: 1 when it pushed it (ctx_leave pops it), 0
 * when it was current already or contexts are keyed by device, -1 when it could not. */
int ctx_enter(CUcontext ctx);

void ctx_leave(int pushed);

/* ctx_primary_active reports whether device d's primary context is active: 1, 0, or -1 when the driver
 * cannot say. */
int ctx_primary_active(int d);

/* ---- captures in progress ------------------------------------------------------------------------- */

#define CAPTURES_MAX 64
enum { CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1, CAPTURE_RELAXED = 2 };

struct cap_state {
	int active;             /* captures in progress */
	int global;             /* of them, in global mode */
	int lost;               /* one could not be noted (table full): the pools order nothing again */
	struct {
		uint64_t stream; /* 0: free slot */
		int mode;        /* written by the thread that claimed the slot, read by the one that ends it */
	} slot[CAPTURES_MAX];
};
extern struct cap_state g_cap;
extern TLS int t_cap_mode;

/* capture_begun notes a capture that began on stream in mode. */
void capture_begun(uint64_t stream, int mode);

/* capture_ended notes that the capture of stream ended (successfully or invalidated). */
void capture_ended(uint64_t stream);

/* capture_any reports whether a capture may be in progress: the pools then make no ordering. */
static inline int capture_any(void) {
	return __atomic_load_n(&g_cap.active, __ATOMIC_ACQUIRE) > 0 || __atomic_load_n(&g_cap.lost, __ATOMIC_ACQUIRE);
}

/* capture_forbids_sync reports whether CUDA refuses a synchronous allocation or free on this thread
 * now: a global-mode capture anywhere, or a thread-local one this thread began, unless its mode is
 * relaxed. */
int capture_forbids_sync(void);

/* ---- the pools' reservations ---------------------------------------------------------------------- */

#define RANGES_MAX 1024

/* ranges_add lists [base, base+size) as pool's (the pool's lock held; readers take no lock). */
void ranges_add(uint64_t base, uint64_t size, int pool);

/* ranges_remove unlists the region of pool that starts at base (base 0: all of pool's). */
void ranges_remove(uint64_t base, int pool);

/* ranges_find returns the pool whose reservations hold addr, -1 for none, or -2 when the list is
 * incomplete and addr is in none of it (every pool must be asked). */
int ranges_find(uint64_t addr);

/* ranges_forget empties the list (a forked child's pools are not the parent's). */
void ranges_forget(void);

#endif
