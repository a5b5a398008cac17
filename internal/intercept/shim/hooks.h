/*
 * Hook bodies: what every hooked call does around the real one. Each body takes the real function,
 * the function id and the program's return address, calls the real function with the program's
 * arguments, and logs one record; the program's return value and errno are passed back unchanged.
 *
 * Nesting. t_depth counts this thread's hooks in progress; t_frame[d] says what hook d is doing. A
 * driver call made while the hook below it is a runtime call inside its real call is the runtime's
 * own (cudaMalloc reaching cuMemAlloc_v2) and passes through unrecorded: a runtime call that reaches
 * the driver is one event. Any other call made while a hook is in progress comes from a signal
 * handler that interrupted it, and is recorded at the next depth, in a lane of its own. (A handler's
 * driver call that interrupts a runtime call's real call cannot be told from the runtime's own and
 * passes through.)
 */
#ifndef ALLOCSCOPE_HOOKS_H
#define ALLOCSCOPE_HOOKS_H

#include "common.h"
#include "addrmap.h"
#include "clock.h"
#include "contexts.h"
#include "log.h"
#include "resolve.h"
#include "serve.h"
#include "shim.h"

enum { FRAME_RUNTIME = 1, FRAME_IN_CALL = 2 };

extern TLS int t_depth;
extern TLS unsigned char t_frame[MAX_DEPTH];

extern struct addr_map g_addrs;   /* device/host/managed addresses */
extern struct addr_map g_handles; /* cuMemCreate handles */


/* hook_enter returns the depth at which to record this call, or -1 to pass it straight through. */
static inline int hook_enter(int fid) {
	if (UNLIKELY(!shim_enabled()))
		return -1;
	int d = t_depth;
	if (d > 0) {
		if (t_frame[d - 1] == (FRAME_RUNTIME | FRAME_IN_CALL) && fid >= FID_FIRST_DRIVER)
			return -1;
		if (d >= MAX_DEPTH) {
			count_lost(-1);
			return -1;
		}
	}
	t_depth = d + 1;
	SIGNAL_FENCE();
	t_frame[d] = fid < FID_FIRST_DRIVER ? FRAME_RUNTIME : 0;
	return d;
}

static inline void hook_call_begin(int d, int fid) {
	SIGNAL_FENCE();
	t_frame[d] = (fid < FID_FIRST_DRIVER ? FRAME_RUNTIME : 0) | FRAME_IN_CALL;
	SIGNAL_FENCE();
}

static inline void hook_call_end(int d) {
	SIGNAL_FENCE();
	t_frame[d] &= (unsigned char)~FRAME_IN_CALL;
	SIGNAL_FENCE();
}

static inline void hook_leave(int d) {
	SIGNAL_FENCE();
	t_depth = d;
}

/* emit logs one record at depth d, or counts it as lost. */
static inline void emit(int d, uint64_t seq, int fid, int tsc, uint64_t t0, uint64_t t1, uint64_t addr,
			uint64_t size, uint64_t stream, void *callsite, int result, int device) {
	struct record *r = log_slot(d);
	if (UNLIKELY(r == NULL)) {
		count_lost(d);
		return;
	}
	r->seq = seq;
	r->time_ns = clock_ns(tsc, t0);
	r->duration_ns = clock_duration(tsc, t0, t1);
	r->address = addr;
	r->size = size;
	r->stream = stream;
	r->callsite = (uint64_t)(uintptr_t)callsite;
	r->tid = current_tid();
	r->result = (uint16_t)result;
	r->device = (int8_t)(device < -1 || device > 127 ? -1 : device);
	r->function = (uint8_t)fid;
	log_commit(d);
}


/* ---- the three shapes of hook ------------------------------------------------------------------- */

/* The real call, timed, with the frame marked as inside it. */
#define TIMED_CALL(D, FID, CALL, R, TSC, T0, T1)                                                        \
	int TSC = clock_mode();                                                                          \
	uint64_t T0 = clock_read(TSC);                                                                   \
	hook_call_begin(D, FID);                                                                         \
	int R = CALL;                                                                                    \
	hook_call_end(D);                                                                                \
	uint64_t T1 = clock_read(TSC)

/* An allocation: seq taken after the real call. */
#define ALLOC_BODY(CALL, FID, IS_DEVICE, OUT_ADDR, SIZE_EXPR, STREAM, MAP)                                 \
	SERVED_ALLOC_BODY(CALL, 0, CALL, FID, IS_DEVICE, OUT_ADDR, SIZE_EXPR, STREAM, MAP)

/* An allocation that record --pool may serve: SERVED, the recorded call, tries the pool first, and
 * POOLED says afterwards whether the pool served it (the record's result gets RESULT_POOL); a call
 * that is not recorded (the runtime's own driver call) goes straight to CALL. */
#define SERVED_ALLOC_BODY(SERVED, POOLED, CALL, FID, IS_DEVICE, OUT_ADDR, SIZE_EXPR, STREAM, MAP)          \
	do {                                                                                             \
		int d_ = hook_enter(FID);                                                                \
		if (d_ < 0)                                                                              \
			return CALL;                                                                     \
		TIMED_CALL(d_, FID, SERVED, r_, tsc_, t0_, t1_);                                         \
		int e_ = errno;                                                                          \
		uint64_t addr_ = r_ == 0 ? (uint64_t)(OUT_ADDR) : 0;                                     \
		uint64_t size_ = (uint64_t)(SIZE_EXPR);                                                  \
		int dev_ = (r_ == 0 && (IS_DEVICE)) ? current_device() : -1;                             \
		if (addr_ != 0 && (MAP) != NULL)                                                         \
			map_insert((MAP), addr_, pack_val(size_, dev_));                                 \
		emit(d_, take_seq(), FID, tsc_, t0_, t1_, addr_, size_, (uint64_t)(uintptr_t)(STREAM),  \
		     cs, r_ | ((POOLED) ? RESULT_POOL : 0), dev_);                                       \
		hook_leave(d_);                                                                          \
		errno = e_;                                                                              \
		return r_;                                                                               \
	} while (0)

/* A free: seq and size taken before the real call; the map entry comes back if the call fails. */
#define FREE_BODY(CALL, FID, MAP, KEY, STREAM) SERVED_FREE_BODY(CALL, 0, CALL, FID, MAP, KEY, STREAM)

/* A free that record --pool may take (SERVED, the recorded call, tries the pool first; POOLED as for
 * an allocation). */
#define SERVED_FREE_BODY(SERVED, POOLED, CALL, FID, MAP, KEY, STREAM)                                    \
	do {                                                                                             \
		int d_ = hook_enter(FID);                                                                \
		if (d_ < 0)                                                                              \
			return CALL;                                                                     \
		int e0_ = errno;                                                                         \
		uint64_t key_ = (uint64_t)(KEY);                                                         \
		uint64_t seq_ = take_seq();                                                              \
		uint64_t v_ = map_find(MAP, key_, 1);                                                    \
		errno = e0_;                                                                             \
		TIMED_CALL(d_, FID, SERVED, r_, tsc_, t0_, t1_);                                         \
		int e_ = errno;                                                                          \
		if (r_ != 0 && v_ != 0)                                                                  \
			map_insert(MAP, key_, v_);                                                       \
		emit(d_, seq_, FID, tsc_, t0_, t1_, key_, val_size(v_), (uint64_t)(uintptr_t)(STREAM),  \
		     cs, r_ | ((POOLED) ? RESULT_POOL : 0), val_device(v_));                             \
		hook_leave(d_);                                                                          \
		errno = e_;                                                                              \
		return r_;                                                                               \
	} while (0)

/* A call that carries its own size (map, unmap, address free): seq after the call. */
#define PLAIN_BODY(CALL, FID, ADDR, SIZE, STREAM, DEVICE_EXPR)                                           \
	do {                                                                                             \
		int d_ = hook_enter(FID);                                                                \
		if (d_ < 0)                                                                              \
			return CALL;                                                                     \
		TIMED_CALL(d_, FID, CALL, r_, tsc_, t0_, t1_);                                           \
		int e_ = errno;                                                                          \
		int dev_ = (DEVICE_EXPR);                                                                \
		emit(d_, take_seq(), FID, tsc_, t0_, t1_, (uint64_t)(ADDR), (uint64_t)(SIZE),           \
		     (uint64_t)(STREAM), cs, r_, dev_);                                                  \
		hook_leave(d_);                                                                          \
		errno = e_;                                                                              \
		return r_;                                                                               \
	} while (0)

#define PTR(p) ((uint64_t)(uintptr_t)(p))

/* Function pointer types, and one body per function taking the real pointer and the callsite. */
typedef cudaError_t (*cudaMalloc_fn)(void **, size_t);
typedef cudaError_t (*cudaFree_fn)(void *);
typedef cudaError_t (*cudaMallocAsync_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*cudaFreeAsync_fn)(void *, cudaStream_t);
typedef cudaError_t (*cudaMallocFromPoolAsync_fn)(void **, size_t, cudaMemPool_t, cudaStream_t);
typedef cudaError_t (*cudaMallocManaged_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*cudaMallocPitch_fn)(void **, size_t *, size_t, size_t);
typedef cudaError_t (*cudaMalloc3D_fn)(struct cudaPitchedPtr *, struct cudaExtent);
typedef cudaError_t (*cudaMallocHost_fn)(void **, size_t);
typedef cudaError_t (*cudaHostAlloc_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*cudaFreeHost_fn)(void *);
typedef CUresult (*cuMemAlloc_v2_fn)(CUdeviceptr *, size_t);
typedef CUresult (*cuMemFree_v2_fn)(CUdeviceptr);
typedef CUresult (*cuMemAllocPitch_v2_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*cuMemAllocManaged_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*cuMemAllocAsync_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*cuMemFreeAsync_fn)(CUdeviceptr, CUstream);
typedef CUresult (*cuMemAllocFromPoolAsync_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*cuMemAllocHost_v2_fn)(void **, size_t);
typedef CUresult (*cuMemHostAlloc_fn)(void **, size_t, unsigned int);
typedef CUresult (*cuMemFreeHost_fn)(void *);
typedef CUresult (*cuMemCreate_fn)(CUmemGenericAllocationHandle *, size_t, const void *, unsigned long long);
typedef CUresult (*cuMemRelease_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuMemMap_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*cuMemUnmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuMemAddressReserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*cuMemAddressFree_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuGetProcAddress_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*cuGetProcAddress_v2_fn)(const char *, void **, int, unsigned long long, void *);
typedef cudaError_t (*cudaGetDriverEntryPoint_fn)(const char *, void **, unsigned long long, void *);
typedef cudaError_t (*cudaGetDriverEntryPointByVersion_fn)(const char *, void **, unsigned int,
							    unsigned long long, void *);

#define BODY static inline __attribute__((always_inline))

/* The calls record --pool serves: the pool first, CUDA when it cannot. */
static inline int served_alloc(uint64_t n, void **p, struct stream_ref st, int runtime) {
	uint64_t a;
	if (p == NULL || !serve_alloc(n, st, runtime, &a))
		return -1;
	*p = (void *)(uintptr_t)a;
	return 0;
}
static inline int served_free(uint64_t p, struct stream_ref st) {
	int r;
	return serve_free(p, st, &r) ? r : -1;
}
#define SERVED(TRY, CALL) ((r_try_ = (TRY)) >= 0 ? r_try_ : (CALL))

/* RETRIED is CALL, a driver's device allocation that the pool did not serve (the program's, or the
 * runtime's own for a cudaMalloc the pool passed on), made once more when it found the device out of
 * memory (2: CUDA_ERROR_OUT_OF_MEMORY) and the pool then gave back idle regions (serve_release_idle).
 * At the driver, so that a runtime call that succeeds on the second try leaves no error behind. */
#define RETRIED(CALL) ((r_cuda_ = (CALL)) == 2 && serve_release_idle() ? (CALL) : r_cuda_)

/* The bit of a record's result that says the pool served the call (CUDA's codes stay below 1000). */
#define RESULT_POOL 0x8000

BODY cudaError_t b_cudaMalloc(cudaMalloc_fn f, int fid, void *cs, void **p, size_t n) {
	int r_try_ = -1;
	SERVED_ALLOC_BODY(SERVED(served_alloc(n, p, sync_stream, 1), f(p, n)), r_try_ >= 0, f(p, n), fid, 1, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaFree(cudaFree_fn f, int fid, void *cs, void *p) {
	int r_try_ = -1;
	SERVED_FREE_BODY(SERVED(served_free(PTR(p), sync_stream), f(p)), r_try_ >= 0, f(p), fid, &g_addrs, PTR(p), 0);
}
BODY cudaError_t b_cudaMallocAsync(cudaMallocAsync_fn f, int fid, void *cs, void **p, size_t n, cudaStream_t s) {
	int r_try_ = -1;
	SERVED_ALLOC_BODY(SERVED(served_alloc(n, p, stream_of(PTR(s), 0), 1), f(p, n, s)), r_try_ >= 0, f(p, n, s), fid,
			  1, PTR(*p), n, s, &g_addrs);
}
BODY cudaError_t b_cudaFreeAsync(cudaFreeAsync_fn f, int fid, void *cs, void *p, cudaStream_t s) {
	int r_try_ = -1;
	SERVED_FREE_BODY(SERVED(served_free(PTR(p), stream_of(PTR(s), 0)), f(p, s)), r_try_ >= 0, f(p, s), fid,
			 &g_addrs, PTR(p), s);
}
BODY cudaError_t b_cudaMallocFromPoolAsync(cudaMallocFromPoolAsync_fn f, int fid, void *cs, void **p, size_t n,
					   cudaMemPool_t pool, cudaStream_t s) {
	ALLOC_BODY(f(p, n, pool, s), fid, 1, PTR(*p), n, s, &g_addrs);
}
BODY cudaError_t b_cudaMallocManaged(cudaMallocManaged_fn f, int fid, void *cs, void **p, size_t n, unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaMallocPitch(cudaMallocPitch_fn f, int fid, void *cs, void **p, size_t *pitch, size_t w,
				   size_t h) {
	ALLOC_BODY(f(p, pitch, w, h), fid, 1, PTR(*p), r_ == 0 ? *pitch * h : w * h, 0, &g_addrs);
}
BODY cudaError_t b_cudaMalloc3D(cudaMalloc3D_fn f, int fid, void *cs, struct cudaPitchedPtr *pp,
				struct cudaExtent e) {
	ALLOC_BODY(f(pp, e), fid, 1, PTR(pp->ptr), r_ == 0 ? pp->pitch * e.height * e.depth : e.width * e.height * e.depth,
		   0, &g_addrs);
}
BODY cudaError_t b_cudaMallocHost(cudaMallocHost_fn f, int fid, void *cs, void **p, size_t n) {
	ALLOC_BODY(f(p, n), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaHostAlloc(cudaHostAlloc_fn f, int fid, void *cs, void **p, size_t n, unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaFreeHost(cudaFreeHost_fn f, int fid, void *cs, void *p) {
	FREE_BODY(f(p), fid, &g_addrs, PTR(p), 0);
}
BODY CUresult b_cuMemAlloc_v2(cuMemAlloc_v2_fn f, int fid, void *cs, CUdeviceptr *p, size_t n) {
	int r_try_ = -1, r_cuda_;
	SERVED_ALLOC_BODY(SERVED(served_alloc(n, (void **)p, sync_stream, 0), RETRIED(f(p, n))), r_try_ >= 0,
			  RETRIED(f(p, n)), fid, 1, *p, n, 0, &g_addrs);
}
BODY CUresult b_cuMemFree_v2(cuMemFree_v2_fn f, int fid, void *cs, CUdeviceptr p) {
	int r_try_ = -1;
	SERVED_FREE_BODY(SERVED(served_free(p, sync_stream), f(p)), r_try_ >= 0, f(p), fid, &g_addrs, p, 0);
}

/* A device synchronization: the pools' blocks freed before it began become reusable (serve.h's
 * release rule). Not logged. */
typedef cudaError_t (*cudaDeviceSynchronize_fn)(void);
typedef CUresult (*cuCtxSynchronize_fn)(void);
BODY cudaError_t b_cudaDeviceSynchronize(cudaDeviceSynchronize_fn f, int fid, void *cs, int unused) {
	(void)fid, (void)cs, (void)unused;
	int e = errno;
	struct sync_mark m = serve_sync_begins();
	errno = e;
	cudaError_t r = f();
	e = errno;
	serve_sync_ended(m, r == 0);
	errno = e;
	return r;
}
/* The driver's initialization: record --pool readies the host side of its first pool (serve_prepare).
 * Not logged. */
typedef CUresult (*cuInit_fn)(unsigned);
BODY CUresult b_cuInit(cuInit_fn f, int fid, void *cs, unsigned flags) {
	(void)fid, (void)cs;
	CUresult r = f(flags);
	int e = errno;
	if (r == 0)
		serve_prepare();
	errno = e;
	return r;
}
BODY CUresult b_cuCtxSynchronize(cuCtxSynchronize_fn f, int fid, void *cs, int unused) {
	(void)fid, (void)cs, (void)unused;
	int e = errno;
	struct sync_mark m = serve_sync_begins();
	errno = e;
	CUresult r = f();
	e = errno;
	serve_sync_ended(m, r == 0);
	errno = e;
	return r;
}
/* An IPC handle of memory in a pool is refused (serve_export_refused): invalid value, as CUDA answers
 * for a stream-ordered block. Not logged. */
typedef cudaError_t (*cudaIpcGetMemHandle_fn)(void *, void *);
typedef CUresult (*cuIpcGetMemHandle_fn)(void *, CUdeviceptr);
/* An export CUDA made: the size of the allocation that starts at p goes into the control file
 * (log_note_export), for analyze to send such requests to CUDA under record --pool. */
static inline void exported(uint64_t p) {
	if (!shim_enabled())
		return;
	int e = errno;
	uint64_t v = map_find(&g_addrs, p, 0);
	if (v != 0 && val_device(v) >= 0)
		log_note_export(val_size(v));
	errno = e;
}
BODY cudaError_t b_cudaIpcGetMemHandle(cudaIpcGetMemHandle_fn f, int fid, void *cs, void *h, void *p) {
	(void)fid, (void)cs;
	int e = errno;
	if (serve_export_refused(PTR(p))) {
		errno = e;
		return RESULT_INVALID_VALUE;
	}
	cudaError_t r = f(h, p);
	if (r == 0)
		exported(PTR(p));
	return r;
}
BODY CUresult b_cuIpcGetMemHandle(cuIpcGetMemHandle_fn f, int fid, void *cs, void *h, CUdeviceptr p) {
	(void)fid, (void)cs;
	int e = errno;
	if (serve_export_refused(p)) {
		errno = e;
		return RESULT_INVALID_VALUE;
	}
	CUresult r = f(h, p);
	if (r == 0)
		exported(p);
	return r;
}
/* cuMemGetAddressRange of an address in a pool: the block that holds it (serve_address_range). */
typedef CUresult (*cuMemGetAddressRange_v2_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
BODY CUresult b_cuMemGetAddressRange_v2(cuMemGetAddressRange_v2_fn f, int fid, void *cs, CUdeviceptr *base,
					size_t *size, CUdeviceptr p) {
	(void)fid, (void)cs;
	int e = errno;
	uint64_t b = 0, n = 0;
	int r = serve_address_range(p, &b, &n);
	errno = e;
	if (r == 0)
		return f(base, size, p);
	if (r < 0)
		return 500; /* CUDA_ERROR_NOT_FOUND */
	if (base != NULL)
		*base = b;
	if (size != NULL)
		*size = n;
	return 0;
}
/* A destroyed stream: its handle may name a new stream while its work still runs. Not logged. */
typedef cudaError_t (*cudaStreamDestroy_fn)(cudaStream_t);
typedef CUresult (*cuStreamDestroy_v2_fn)(CUstream);
/* STREAM_DESTROYED runs CALL, the destruction of stream S, between serve_stream_destroying and
 * serve_stream_destroyed, into R; errno stays the call's. */
#define STREAM_DESTROYED(S, CALL, R)                                                                     \
	do {                                                                                             \
		int e_ = errno;                                                                          \
		int held_ = serve_stream_destroying(PTR(S));                                             \
		errno = e_;                                                                              \
		R = CALL;                                                                                \
		if (held_) {                                                                             \
			e_ = errno;                                                                      \
			serve_stream_destroyed(PTR(S), R == 0);                                          \
			errno = e_;                                                                      \
		}                                                                                        \
	} while (0)
BODY cudaError_t b_cudaStreamDestroy(cudaStreamDestroy_fn f, int fid, void *cs, cudaStream_t s) {
	(void)fid, (void)cs;
	cudaError_t r;
	STREAM_DESTROYED(s, f(s), r);
	return r;
}
BODY CUresult b_cuStreamDestroy_v2(cuStreamDestroy_v2_fn f, int fid, void *cs, CUstream s) {
	(void)fid, (void)cs;
	CUresult r;
	STREAM_DESTROYED(s, f(s), r);
	return r;
}
/* Calls that change a thread's context (current_device, serve_current), and calls that end
 * contexts: a pool dies with the context that owns its memory (serve_retiring). Not logged. */
typedef CUresult (*cuCtxSetCurrent_fn)(CUcontext);
typedef CUresult (*cuCtxPushCurrent_v2_fn)(CUcontext);
typedef CUresult (*cuCtxPopCurrent_v2_fn)(CUcontext *);
typedef CUresult (*cuCtxDestroy_v2_fn)(CUcontext);
typedef CUresult (*cuDevicePrimaryCtxRelease_fn)(CUdevice);
typedef CUresult (*cuDevicePrimaryCtxReset_fn)(CUdevice);
typedef CUresult (*cuCtxCreate_v2_fn)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*cuCtxCreate_v3_fn)(CUcontext *, void *, int, unsigned, CUdevice);
typedef CUresult (*cuCtxCreate_v4_fn)(CUcontext *, void *, unsigned, CUdevice);
typedef cudaError_t (*cudaDeviceReset_fn)(void);
BODY CUresult b_cuCtxSetCurrent(cuCtxSetCurrent_fn f, int fid, void *cs, CUcontext c) {
	(void)fid, (void)cs;
	if (c == NULL)
		context_changes();
	return f(c);
}
BODY CUresult b_cuCtxPushCurrent_v2(cuCtxPushCurrent_v2_fn f, int fid, void *cs, CUcontext c) {
	(void)fid, (void)cs;
	context_changes();
	return f(c);
}
BODY CUresult b_cuCtxPopCurrent_v2(cuCtxPopCurrent_v2_fn f, int fid, void *cs, CUcontext *c) {
	(void)fid, (void)cs;
	context_changes();
	return f(c);
}
/* CTX_ENDING runs CALL, which may end contexts, between serve_retiring(CTX, DEV) and
 * serve_retired; DESTROYED says afterwards whether they ended. errno stays the call's. */
#define CTX_ENDING(CTX, DEV, CALL, R, DESTROYED)                                                       	do {                                                                                             		int e_ = errno;                                                                          		context_changes();                                                                       		uint64_t mask_ = serve_retiring(CTX, DEV);                                               		errno = e_;                                                                              		R = CALL;                                                                                		e_ = errno;                                                                              		serve_retired(mask_, DESTROYED);                                                         		errno = e_;                                                                              	} while (0)
BODY CUresult b_cuCtxDestroy_v2(cuCtxDestroy_v2_fn f, int fid, void *cs, CUcontext c) {
	(void)fid, (void)cs;
	CUresult r;
	CTX_ENDING(c, -1, f(c), r, r == 0 && c != NULL);
	if (r == 0)
		serve_ctx_unmade(c);
	return r;
}
BODY CUresult b_cuDevicePrimaryCtxRelease(cuDevicePrimaryCtxRelease_fn f, int fid, void *cs, CUdevice d) {
	(void)fid, (void)cs;
	CUresult r;
	CTX_ENDING(NULL, d, f(d), r, r == 0 && ctx_primary_active(d) == 0);
	return r;
}
BODY CUresult b_cuDevicePrimaryCtxReset(cuDevicePrimaryCtxReset_fn f, int fid, void *cs, CUdevice d) {
	(void)fid, (void)cs;
	CUresult r;
	CTX_ENDING(NULL, d, f(d), r, r == 0);
	return r;
}
BODY cudaError_t b_cudaDeviceReset(cudaDeviceReset_fn f, int fid, void *cs, int unused) {
	(void)fid, (void)cs, (void)unused;
	CUcontext c = NULL;
	int d = -1, e = errno;
	if (!serve_on() || ctx_current(&c, &d) != 0)
		d = -1;
	errno = e;
	cudaError_t r;
	CTX_ENDING(NULL, d, f(), r, r == 0 && d >= 0);
	return r;
}
/* CTX_MADE runs CALL, which makes context *C, noting it: threads ask for their context at every call
 * from then on, and a reset of the device leaves that context's pool alone. */
#define CTX_MADE(C, CALL, R)                                                                             	do {                                                                                             		__atomic_store_n(&g_ctx_made, 1, __ATOMIC_RELEASE);                                      		context_changes();                                                                       		R = CALL;                                                                                		if (R == 0 && (C) != NULL) {                                                             			int e_ = errno;                                                                  			serve_ctx_made(*(C));                                                            			errno = e_;                                                                      		}                                                                                        	} while (0)
BODY CUresult b_cuCtxCreate_v2(cuCtxCreate_v2_fn f, int fid, void *cs, CUcontext *c, unsigned fl, CUdevice d) {
	(void)fid, (void)cs;
	CUresult r;
	CTX_MADE(c, f(c, fl, d), r);
	return r;
}
BODY CUresult b_cuCtxCreate_v3(cuCtxCreate_v3_fn f, int fid, void *cs, CUcontext *c, void *p, int n, unsigned fl,
			       CUdevice d) {
	(void)fid, (void)cs;
	CUresult r;
	CTX_MADE(c, f(c, p, n, fl, d), r);
	return r;
}
BODY CUresult b_cuCtxCreate_v4(cuCtxCreate_v4_fn f, int fid, void *cs, CUcontext *c, void *p, unsigned fl, CUdevice d) {
	(void)fid, (void)cs;
	CUresult r;
	CTX_MADE(c, f(c, p, fl, d), r);
	return r;
}
/* Captures: noted when they begin and end, and the thread's capture mode when it changes
 * (contexts.h). Not logged. */
typedef CUresult (*cuStreamBeginCapture_fn)(CUstream);
typedef CUresult (*cuStreamBeginCapture_v2_fn)(CUstream, int);
typedef CUresult (*cuStreamBeginCaptureToGraph_fn)(CUstream, void *, const void *, const void *, size_t, int);
typedef CUresult (*cuStreamEndCapture_fn)(CUstream, void **);
typedef CUresult (*cuThreadExchangeStreamCaptureMode_fn)(int *);
BODY CUresult b_cuStreamBeginCapture(cuStreamBeginCapture_fn f, int fid, void *cs, CUstream s) {
	(void)fid, (void)cs;
	CUresult r = f(s);
	if (r == 0)
		capture_begun(PTR(s), CAPTURE_GLOBAL);
	return r;
}
BODY CUresult b_cuStreamBeginCapture_v2(cuStreamBeginCapture_v2_fn f, int fid, void *cs, CUstream s, int mode) {
	(void)fid, (void)cs;
	CUresult r = f(s, mode);
	if (r == 0)
		capture_begun(PTR(s), mode);
	return r;
}
BODY CUresult b_cuStreamBeginCaptureToGraph(cuStreamBeginCaptureToGraph_fn f, int fid, void *cs, CUstream s, void *g,
					    const void *deps, const void *data, size_t n, int mode) {
	(void)fid, (void)cs;
	CUresult r = f(s, g, deps, data, n, mode);
	if (r == 0)
		capture_begun(PTR(s), mode);
	return r;
}
BODY CUresult b_cuStreamEndCapture(cuStreamEndCapture_fn f, int fid, void *cs, CUstream s, void **g) {
	(void)fid, (void)cs;
	CUresult r = f(s, g);
	if (r == 0 || r == 901 /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: ended all the same */)
		capture_ended(PTR(s));
	return r;
}
BODY CUresult b_cuThreadExchangeStreamCaptureMode(cuThreadExchangeStreamCaptureMode_fn f, int fid, void *cs, int *mode) {
	(void)fid, (void)cs;
	int want = mode != NULL ? *mode : 0;
	CUresult r = f(mode);
	if (r == 0)
		t_cap_mode = want;
	return r;
}
/* A stream made by the program: a non-blocking one (and every stream of a green context) runs apart
 * from the legacy stream, so record --pool's barriers stop ordering all the device's work; a join
 * barrier orders the non-blocking streams it knows (serve_ordering_barrier). Counted before the
 * call, noted after it: an ordering never relies on a stream being made at that moment. Not logged. */
typedef CUresult (*cuStreamCreate_fn)(CUstream *, unsigned);
typedef CUresult (*cuStreamCreateWithPriority_fn)(CUstream *, unsigned, int);
typedef CUresult (*cuGreenCtxStreamCreate_fn)(CUstream *, void *, unsigned, int);
/* STREAM_MADE runs CALL, the making of stream *S, between serve_stream_making and serve_stream_made
 * when APART (a non-blocking stream), into R; errno stays the call's. */
#define STREAM_MADE(APART, GREEN, S, CALL, R)                                                              \
	do {                                                                                             \
		int e_ = errno;                                                                          \
		int noted_ = (APART) && serve_stream_making();                                           \
		errno = e_;                                                                              \
		R = CALL;                                                                                \
		if (noted_) {                                                                            \
			e_ = errno;                                                                      \
			serve_stream_made(R == 0 && (S) != NULL ? PTR(*(S)) : 0, GREEN);                 \
			errno = e_;                                                                      \
		}                                                                                        \
	} while (0)
BODY CUresult b_cuStreamCreate(cuStreamCreate_fn f, int fid, void *cs, CUstream *s, unsigned flags) {
	(void)fid, (void)cs;
	CUresult r;
	STREAM_MADE(flags & CU_STREAM_NON_BLOCKING, 0, s, f(s, flags), r);
	return r;
}
BODY CUresult b_cuStreamCreateWithPriority(cuStreamCreateWithPriority_fn f, int fid, void *cs, CUstream *s,
					   unsigned flags, int priority) {
	(void)fid, (void)cs;
	CUresult r;
	STREAM_MADE(flags & CU_STREAM_NON_BLOCKING, 0, s, f(s, flags, priority), r);
	return r;
}
BODY CUresult b_cuGreenCtxStreamCreate(cuGreenCtxStreamCreate_fn f, int fid, void *cs, CUstream *s, void *g,
				       unsigned flags, int priority) {
	(void)fid, (void)cs;
	CUresult r;
	STREAM_MADE(1, 1, s, f(s, g, flags, priority), r);
	return r;
}
BODY CUresult b_cuMemAllocPitch_v2(cuMemAllocPitch_v2_fn f, int fid, void *cs, CUdeviceptr *p, size_t *pitch,
				   size_t w, size_t h, unsigned el) {
	ALLOC_BODY(f(p, pitch, w, h, el), fid, 1, *p, r_ == 0 ? *pitch * h : w * h, 0, &g_addrs);
}
BODY CUresult b_cuMemAllocManaged(cuMemAllocManaged_fn f, int fid, void *cs, CUdeviceptr *p, size_t n,
				  unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, *p, n, 0, &g_addrs);
}
BODY CUresult b_cuMemAllocAsync(cuMemAllocAsync_fn f, int fid, void *cs, CUdeviceptr *p, size_t n, CUstream s) {
	int r_try_ = -1, r_cuda_;
	struct stream_ref st = stream_of(PTR(s), fid == FID_cuMemAllocAsync_ptsz);
	SERVED_ALLOC_BODY(SERVED(served_alloc(n, (void **)p, st, 0), RETRIED(f(p, n, s))), r_try_ >= 0,
			  RETRIED(f(p, n, s)), fid, 1, *p, n, s, &g_addrs);
}
BODY CUresult b_cuMemFreeAsync(cuMemFreeAsync_fn f, int fid, void *cs, CUdeviceptr p, CUstream s) {
	int r_try_ = -1;
	struct stream_ref st = stream_of(PTR(s), fid == FID_cuMemFreeAsync_ptsz);
	SERVED_FREE_BODY(SERVED(served_free(p, st), f(p, s)), r_try_ >= 0, f(p, s), fid, &g_addrs, p, s);
}
BODY CUresult b_cuMemAllocFromPoolAsync(cuMemAllocFromPoolAsync_fn f, int fid, void *cs, CUdeviceptr *p,
					size_t n, CUmemoryPool pool, CUstream s) {
	ALLOC_BODY(f(p, n, pool, s), fid, 1, *p, n, s, &g_addrs);
}
BODY CUresult b_cuMemAllocHost_v2(cuMemAllocHost_v2_fn f, int fid, void *cs, void **p, size_t n) {
	ALLOC_BODY(f(p, n), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY CUresult b_cuMemHostAlloc(cuMemHostAlloc_fn f, int fid, void *cs, void **p, size_t n, unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY CUresult b_cuMemFreeHost(cuMemFreeHost_fn f, int fid, void *cs, void *p) {
	FREE_BODY(f(p), fid, &g_addrs, PTR(p), 0);
}

static int prop_device(const void *prop) {
	const struct memAllocPropHead *h = (const struct memAllocPropHead *)prop;
	if (h != NULL && h->locationType == CU_MEM_LOCATION_TYPE_DEVICE)
		return h->locationId;
	return -1;
}

BODY CUresult b_cuMemCreate(cuMemCreate_fn f, int fid, void *cs, CUmemGenericAllocationHandle *h, size_t n,
			    const void *prop, unsigned long long fl) {
	int d = hook_enter(fid);
	if (d < 0)
		return f(h, n, prop, fl);
	TIMED_CALL(d, fid, f(h, n, prop, fl), r, tsc, t0, t1);
	int e = errno;
	uint64_t handle = r == 0 ? *h : 0;
	int dev = r == 0 ? prop_device(prop) : -1;
	if (handle != 0)
		map_insert(&g_handles, handle, pack_val(n, dev));
	emit(d, take_seq(), fid, tsc, t0, t1, handle, n, 0, cs, r, dev);
	hook_leave(d);
	errno = e;
	return r;
}
BODY CUresult b_cuMemRelease(cuMemRelease_fn f, int fid, void *cs, CUmemGenericAllocationHandle h) {
	FREE_BODY(f(h), fid, &g_handles, h, 0);
}
BODY CUresult b_cuMemMap(cuMemMap_fn f, int fid, void *cs, CUdeviceptr p, size_t n, size_t off,
			 CUmemGenericAllocationHandle h, unsigned long long fl) {
	PLAIN_BODY(f(p, n, off, h, fl), fid, p, n, h, val_device(map_find(&g_handles, h, 0)));
}
BODY CUresult b_cuMemUnmap(cuMemUnmap_fn f, int fid, void *cs, CUdeviceptr p, size_t n) {
	PLAIN_BODY(f(p, n), fid, p, n, 0, -1);
}
BODY CUresult b_cuMemAddressReserve(cuMemAddressReserve_fn f, int fid, void *cs, CUdeviceptr *p, size_t n,
				    size_t align, CUdeviceptr addr, unsigned long long fl) {
	ALLOC_BODY(f(p, n, align, addr, fl), fid, 0, *p, n, 0, (struct addr_map *)NULL);
}
BODY CUresult b_cuMemAddressFree(cuMemAddressFree_fn f, int fid, void *cs, CUdeviceptr p, size_t n) {
	PLAIN_BODY(f(p, n), fid, p, n, 0, -1);
}

/* The resolvers: what they hand out is turned into the shim's wrappers (resolve_versioned). */
BODY CUresult b_cuGetProcAddress(cuGetProcAddress_fn f, int path, void *cs, const char *sym, void **fp, int v,
				 unsigned long long fl) {
	(void)cs;
	(void)path;
	CUresult r = f(sym, fp, v, fl);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, v, fl, *fp, P_GPA, (const void *)f);
	errno = e;
	return r;
}
BODY CUresult b_cuGetProcAddress_v2(cuGetProcAddress_v2_fn f, int path, void *cs, const char *sym, void **fp,
				    int v, unsigned long long fl, void *st) {
	(void)cs;
	(void)path;
	CUresult r = f(sym, fp, v, fl, st);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, v, fl, *fp, P_GPA, (const void *)f);
	errno = e;
	return r;
}
BODY cudaError_t b_cudaGetDriverEntryPoint(cudaGetDriverEntryPoint_fn f, int path, void *cs, const char *sym,
					   void **fp, unsigned long long fl, void *st) {
	(void)cs;
	(void)path;
	cudaError_t r = f(sym, fp, fl, st);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, LONG_MAX, fl, *fp, P_EP, (const void *)f);
	errno = e;
	return r;
}
BODY cudaError_t b_cudaGetDriverEntryPointByVersion(cudaGetDriverEntryPointByVersion_fn f, int path, void *cs,
						    const char *sym, void **fp, unsigned int v,
						    unsigned long long fl, void *st) {
	(void)cs;
	(void)path;
	cudaError_t r = f(sym, fp, v, fl, st);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, (long)v, fl, *fp, P_EP, (const void *)f);
	errno = e;
	return r;
}


#endif
