/*
 * `record --pool`: the shim serves the program's device allocations (cudaMalloc, cuMemAlloc_v2 and
 * the stream-ordered cudaMallocAsync, cuMemAllocAsync with their frees) from the C pool (pool.h) that
 * ALLOCSCOPE_POOL describes. Every call is still recorded. docs/record-pool.md says what is
 * guaranteed; this is how.
 *
 * One pool per context: made at the context's first allocation over the real cuMemAlloc_v2 and
 * cuMemFree_v2, with every driver call of its own made in that context (ctx_enter), retired when the
 * context is reset or destroyed (its memory is CUDA's again: the pool is dropped without a free).
 * A synchronous allocation is served from the calling thread's context's pool, a stream-ordered one
 * from its stream's context's pool.
 *
 * THE RELEASE RULE. A freed block carries the ordering it waits for: a synchronous free (cudaFree
 * waits for the device) waits for all work of its pool's context issued before the free; a free on
 * stream S waits for S's work before it. It is handed out again only at a release point that covers
 * that ordering, and a release point releases exactly what was freed before it began:
 *   1. a synchronization of the pool's context (the program's cudaDeviceSynchronize or
 *      cuCtxSynchronize, or the pool's own, made without holding any lock) that began after the free;
 *   2. an ordering the pool records in its context after the free (a barrier on the legacy stream,
 *      or a join barrier over the non-blocking streams; serve_ordering_barrier), which all later
 *      work waits for;
 *   3. for a free on stream S only: an allocation on S itself (S's later work runs after its
 *      earlier work), or an event recorded on S at the free (serve_track) that the new user waits
 *      for: a stream wait on the user's stream, or a host wait, outside every lock, for a
 *      synchronous allocation.
 * Nothing else releases a block. Release points are numbered (cp_begin_release); a deferred block
 * and an in-flight event carry the number current at their free.
 *
 * Nothing is served or ordered on a capturing stream, nor while a capture forbids the call
 * (contexts.h): the call goes to CUDA, and the pool grows instead of ordering. A free of an address
 * inside a pool's reservations never reaches CUDA: a block start is freed, anything else is
 * answered as CUDA answers an unknown pointer. A call made while the same thread is inside the pool
 * (a signal handler) is not served; its free of a pool block is queued and made when the thread
 * leaves the pool. A forked child starts without the parent's pools.
 */
#ifndef ALLOCSCOPE_SERVE_H
#define ALLOCSCOPE_SERVE_H

#include "common.h"

/* The stream a call names: key tells streams apart (a per-thread default stream is a stream per
 * thread), handle names it in a driver call from this thread, policy is what the trace records and
 * package pool's per-stream lists see. The synchronous calls have a key of their own. */
struct stream_ref { uint64_t key, handle, policy; int async; };

#define KEY_SYNC (~0ull)
#define STREAM_LEGACY 0x1ull     /* CU_STREAM_LEGACY */
#define STREAM_PER_THREAD 0x2ull /* CU_STREAM_PER_THREAD */
#define CU_STREAM_NON_BLOCKING 0x1u
#define CUDA_ERROR_STREAM_CAPTURE_IMPLICIT 906
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900 /* cudaErrorStreamCaptureUnsupported too */
#define RESULT_INVALID_VALUE 1                    /* cudaErrorInvalidValue, CUDA_ERROR_INVALID_VALUE */

/* stream_of names the stream of a stream-ordered call; ptsz: the call came through a per-thread
 * default stream variant, where stream 0 is this thread's own. */
struct stream_ref stream_of(uint64_t s, int ptsz);

extern const struct stream_ref sync_stream;

/* The non-blocking streams the program made and has not destroyed, so that a join barrier can order
 * their work with everybody's (serve_ordering_barrier), and events recorded on those it destroyed
 * (their work may still run), which the next join waits for. While a stream is being made, after one could not be
 * noted (more than APART_MAX, an event that could not be recorded, a stream made or destroyed from
 * a signal handler inside the pool) or once a green context made a stream, the pool synchronizes
 * the device instead. */
#define APART_MAX 256

enum { JOIN_NO, JOIN_DONE, JOIN_CAPTURING };

/* A spec the pool refuses (package pool's Validate refuses the same before the program runs):
 * blocks aligned below cudaMalloc's 256 bytes, and a plan whose tables would not fit in host memory. */
#define SERVE_MIN_ALIGN 256
#define SERVE_MAX_BOOK (1ull << 30)

/* serve_init reads the pool to serve from the environment; called by the constructor. */
void serve_init(void);

/* serve_on reports whether record --pool serves this process, for a hook that does not log (and so
 * may run before the shim's constructor, from another library's). */
int serve_on(void);

/* The host side of the first pool made, readied when the program initializes the driver (cuInit),
 * so that its first allocation pays only for the device region: the driver functions the pools
 * use, whether the process sees one device, and a book for the plan's tables, whose pages cost
 * about 1.7 us each to touch on the H200 host. */
enum { SPARE_NONE, SPARE_MAKING, SPARE_READY, SPARE_TAKEN };

/* serve_prepare readies g_spare, once; called after a successful cuInit. */
void serve_prepare(void);

/* ---- which pool ----------------------------------------------------------------------------------- */

/* ---- serving -------------------------------------------------------------------------------------- */

/* serve_alloc serves size bytes for a call on stream st into *addr: 1, or 0 when the call is to go
 * to CUDA (counted, with the reason). */
int serve_alloc(uint64_t size, struct stream_ref st, int runtime, uint64_t *addr);

/* What a free of a pool block needs after the lock is let go. */
enum { GIVEN, GIVEN_AFTER_STREAM };

/* serve_free takes a free of addr on stream st: 0 when addr is not in any pool's memory (the call
 * goes to CUDA), else 1 with *result the call's result. */
int serve_free(uint64_t addr, struct stream_ref st, int *result);

/* A signal handler's frees of pool blocks while its thread was inside the pool: made when the
 * thread leaves it. A full queue keeps the block live (never unsafe). */
#define LATE_FREES 8

/* serve_release_idle gives back the idle regions of the calling thread's context's pool
 * (cp_release_idle) after a device allocation that went to CUDA found it out of memory: 1 when it
 * gave back any, and the call is worth making once more. 0 without a pool, or inside one (a signal
 * handler's call). */
int serve_release_idle(void);

/* A program's synchronization of its context: it releases what was freed before it began. */
struct sync_mark { struct served *s; CUcontext ctx; uint64_t gen, gone, life; };

/* serve_sync_begins notes, before the call, a synchronization of the calling thread's context. */
struct sync_mark serve_sync_begins(void);

/* serve_sync_ended releases what was freed before the synchronization m began, if it succeeded. */
void serve_sync_ended(struct sync_mark m, int ok);

/* serve_export_refused reports whether the program asks for an IPC handle of memory in a pool: it is
 * refused (the handle would name the pool's region, and another process would map the wrong memory),
 * counted, and said once. */
int serve_export_refused(uint64_t addr);

/* serve_address_range answers cuMemGetAddressRange for an address in a pool: 1 with the block that
 * holds it (its start and requested bytes, as CUDA gives an allocation's), 0 when addr is not in a
 * pool's memory (CUDA answers), -1 when it is but in no live block (CUDA_ERROR_NOT_FOUND). */
int serve_address_range(uint64_t addr, uint64_t *base, uint64_t *size);

int serve_stream_destroying(uint64_t stream);

/* serve_stream_destroyed ends what serve_stream_destroying started; destroyed: the call succeeded. */
void serve_stream_destroyed(uint64_t stream, int destroyed);

/* serve_stream_making notes, before the call, that the program makes a non-blocking stream: 1 when
 * the caller is to give the call's outcome to serve_stream_made. Where it cannot be noted, joins end. */
int serve_stream_making(void);

/* serve_stream_made notes the outcome of a call serve_stream_making announced: stream, or 0 when the
 * call failed; green: a green context's stream, which a join cannot order (joins end). A stream that
 * cannot wait for the last barriers gets the device synchronized instead, after g_apart's lock is
 * let go and before the program has the stream. */
void serve_stream_made(uint64_t stream, int green);

/* ---- contexts that end ---------------------------------------------------------------------------- */

/* The contexts the program made (cuCtxCreate), which a reset of their device leaves alone. */
#define MADE_MAX 64

/* serve_ctx_made notes a context the program made; serve_ctx_unmade one it destroyed. */
void serve_ctx_made(CUcontext c);

void serve_ctx_unmade(CUcontext c);

/* serve_retiring stops, before a call that may destroy contexts, the pools of ctx (or, with ctx
 * NULL, of device d's primary context: every pool of d not of a context the program made) from
 * serving: a mask of their slots, for serve_retired. */
uint64_t serve_retiring(CUcontext ctx, int d);

/* serve_retired ends what serve_retiring began: the pools of mask are given up when their contexts
 * were destroyed (their memory went with them: nothing is freed), else serve again. */
void serve_retired(uint64_t mask, int destroyed);

/* serve_forget drops the parent's pools in a forked child. */
void serve_forget(void);

#endif
