/*
 * Fake CUDA driver (libcuda.so.1) on host memory, for allocscope's tests.
 * Build: cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o libcuda.so.1 driver.c -lpthread
 *
 * Every exported memory function (cuCtx* and cuInit are not counted: the shim calls cuCtxGetDevice) counts itself as an "exported" call; cuGetProcAddress hands out distinct
 * internal functions that count as "proc-address" calls, so a test can tell which one the shim called.
 * Each driver call sets errno to 0x5eed on purpose: the shim must leave the errno the real call left.
 *
 * Built with -DFAKE_PROC_EXPORTED, cuGetProcAddress hands out the exported functions themselves instead
 * (their addresses come through the dynamic linker, as in a library linked without -Bsymbolic: with
 * an LD_PRELOAD library exporting the same names, they resolve to that library's functions).
 *
 * Opt-in behaviours, read from the environment at load time:
 *   FAKECUDA_FRESH=1       device memory is never reused: pure bump allocation that wraps to the
 *                          region's start when exhausted, so every allocation gets a new address
 *                          (as cudaMallocAsync pools, VMM and bump allocators do).
 *   FAKECUDA_LAZY_CONTEXT=1  a thread has no current context (cuCtxGetDevice fails) until
 *                          cuCtxSetCurrent or a runtime call binds it, as with the real runtime.
 *   FAKECUDA_DEVICES=N     cuDeviceGetCount says N (default 4, at most 16).
 *   FAKECUDA_RAISE=SIG:K   raise(SIG) from inside the K-th cuMemAlloc_v2 call of the process (K >= 1,
 *                          exported and proc-address calls counted together), once.
 *   FAKECUDA_CAPACITY=BYTES  each context's memory holds BYTES (default 16 GiB, its whole region):
 *                          allocations beyond it fail with CUDA_ERROR_OUT_OF_MEMORY; cuMemGetInfo_v2 says
 *                          free = BYTES - allocated, total = BYTES. Accounting granularity: a request
 *                          over 1 MiB counts whole 2 MiB pages, a smaller one its size rounded to 512 bytes.
 *   FAKECUDA_SYNC_DELAY_US=N  a device synchronization (cuCtxSynchronize) sleeps N µs between taking its snapshot of the
 *                          work to complete and completing it, so other threads can issue work meanwhile.
 *   FAKECUDA_SYNC_PROBE=1  inside cuCtxSynchronize and cuEventSynchronize, another thread calls
 *                          cudaMalloc + cudaFree through the symbols the process resolves (dlsym
 *                          RTLD_DEFAULT) and the call waits for it (GPU work waiting for the host): a
 *                          caller holding a lock that allocation needs deadlocks.
 *   FAKECUDA_HAZARD_LOG=1  each hazard is printed to stderr.
 * A signal handler may allocate and free while the interrupted thread is inside the allocator: the
 * handler's calls use a second per-thread cache.
 *
 * Contexts and memory. Each device (up to 16) has a primary context, handle (CUcontext)(device + 1);
 * cuCtxCreate_v2 makes further ones (handles 0x1000 + index, up to 8). Each context allocates device
 * memory from a region of its own: device d's primary context at FAKE_DEVICE_BASE + d * 64 GiB,
 * created context j at FAKE_CTX_BASE + j * 64 GiB (fakecuda_device_of tells the device). Only when
 * FAKECUDA_DEVICES is set, though: without it all primary contexts share device 0's region, the layout
 * older tests' expected addresses assume (a reset of any primary context then resets them all, and
 * fakecuda_device_of says 0 for all). Resetting a
 * context (cudaDeviceReset, cuDevicePrimaryCtxReset, the last cuDevicePrimaryCtxRelease, cuCtxDestroy)
 * frees all its allocations, drops its work and restarts its allocator at the region's base, so the
 * next allocation gets the first address again. A free of an address the fake did not hand out returns
 * CUDA_ERROR_INVALID_VALUE and is counted: fakecuda_unknown_frees, or fakecuda_interior_frees when it
 * lies inside a live allocation. cuMemFree_v2 of a known block first completes all work of its context
 * issued before it (as CUDA's free waits for the device). cuMemFreeAsync of a block that pending work
 * still covers keeps it for a later cuMemAllocAsync of the same rounded size on the same stream, until a
 * device synchronization of its context drops it (it is then never reused); a block no pending work
 * covers is reusable at once (as before the work model): the fake's own stream-ordered reuse is
 * hazard-free.
 *
 * The work model. Device work is what programs issue with fakecuda_launch (a kernel over a range, by an
 * allocation lifetime "owner"), fakecuda_host_use (the host touches a range: work on the legacy stream
 * the host then waits for), and event records (a marker with no range). Work never completes by itself,
 * only through host waits: cuCtxSynchronize / cudaDeviceSynchronize (all work of the current context
 * issued before the call began), cuStreamSynchronize(s) (what s's next work would depend on),
 * cuEventSynchronize(e) (what e captured), cuMemFree_v2 of a known block (all work of its context).
 * Every stream (legacy stream of each context, per-thread streams, streams made by cuStreamCreate, and
 * any other handle, taken as a blocking stream of the current context) is a "slot" with a vector clock:
 * clock[j] is the last work item of slot j that the slot's next work depends on. Work on one slot runs
 * in issue order; the legacy stream (handles 0 and 0x1) joins the clocks of all blocking streams of its
 * context before each item, and each blocking stream joins the legacy stream's clock before each item;
 * non-blocking streams join nothing; cuEventRecord copies the clock (after its marker),
 * cuStreamWaitEvent joins it. A slot's completed prefix only grows, and only by completing whole
 * clocks, so "item k of slot j is complete" is done[j] >= k. An event is ready when its marker is
 * complete (cuEventQuery says CUDA_ERROR_NOT_READY until then).
 *
 * Hazards: when an item by owner B over a range is issued, each item still pending (not complete) by
 * an owner A != B over an overlapping range that the new item's clock does not include counts one
 * hazard (one per pair of items); fakecuda_hazards returns the count. Recording an event of one context
 * on a stream of another returns CUDA_ERROR_INVALID_HANDLE and counts a misuse (fakecuda_misuses).
 *
 * Capture: cuStreamBeginCapture_v2 (modes global 0, thread-local 1, relaxed 2), cuStreamEndCapture,
 * cuStreamIsCapturing, cuStreamGetCaptureInfo(_v2), cuThreadExchangeStreamCaptureMode. While a global
 * capture is active on any thread, or a thread-local one begun by the calling thread, and the calling
 * thread's mode is not relaxed, cuMemAlloc_v2, cuMemFree_v2 and cuCtxSynchronize return
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate those captures (their end returns
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). cuMemAllocAsync / cuMemFreeAsync on a capturing stream are
 * graph nodes: addresses come from FAKE_GRAPH_BASE, never reused, counted by fakecuda_graph_allocs.
 * Launches on a capturing stream are graph nodes too (no work). cuEventQuery / cuEventSynchronize of an
 * event recorded on a capturing stream return CUDA_ERROR_CAPTURED_EVENT and invalidate that capture.
 * Every cuEventRecord / cuStreamWaitEvent on a capturing stream counts a capture intrusion.
 *
 * Locks: the allocation paths stay lock-free (per-thread caches, atomics); the work model, streams,
 * events, contexts and capture state are behind one mutex that allocation takes only to complete work
 * (cuMemFree_v2), for stream-ordered calls and while a capture is active. A call nested in a signal
 * handler on a thread that holds that mutex skips the work model (it neither completes nor checks).
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_ERRNO 0x5eed
#define FREE_LIST 32
#define ONE_TIB (1ull << 40)
#define REGION_BYTES (16ull << 30)
#define REGION_STRIDE (64ull << 30)
#define MAX_DEVICES 16
#define MAX_CREATED 8
#define MAX_CTX (MAX_DEVICES + MAX_CREATED)
#define CREATED_HANDLE 0x1000
#define R_FIRST_CTX 2
#define MAX_REGIONS (R_FIRST_CTX + MAX_CTX)

struct region {
	const char *name;
	uint64_t base, size;
	int prot;
	uint64_t *meta; /* requested size + 1 per 512-byte grain; 0 = not allocated */
	uint64_t next;  /* next free arena offset */
	int ok;
	unsigned gen;       /* bumped by a reset: thread caches of an older generation are dropped */
	uint64_t allocated; /* bytes accounted (FAKECUDA_CAPACITY) */
};

static struct region regions[MAX_REGIONS] = {
	{"managed", FAKE_MANAGED_BASE, 4ull << 30, PROT_READ | PROT_WRITE, NULL, 0, 0, 0, 0},
	{"host", FAKE_HOST_BASE, 4ull << 30, PROT_READ | PROT_WRITE, NULL, 0, 0, 0, 0},
};
enum { R_MANAGED, R_HOST };

struct thread_cache {
	uint64_t cur, end;
	unsigned gen;
	int nfree;
	uint64_t free_addr[FREE_LIST], free_size[FREE_LIST];
};
static __thread struct thread_cache caches[2][MAX_REGIONS]; /* [nested in a signal handler][region] */
static __thread int in_region;
static int fresh_addresses;
static int lazy_context;            /* FAKECUDA_LAZY_CONTEXT=1: a thread has no context until bound */
static int device_count = 4;        /* FAKECUDA_DEVICES */
static int shared_regions;          /* FAKECUDA_DEVICES unset: all primary contexts share device 0's region */
static uint64_t capacity = REGION_BYTES; /* FAKECUDA_CAPACITY */
static long sync_delay_us;          /* FAKECUDA_SYNC_DELAY_US */
static int sync_probe, hazard_log;  /* FAKECUDA_SYNC_PROBE, FAKECUDA_HAZARD_LOG */
static long ctx_queries;            /* cuCtxGetDevice calls, all threads */
static __thread int cur_ctx = -1;   /* the calling thread's current context, -1: none */
static int raise_signal;
static long raise_at, alloc_calls;
static __thread long calls_exported, calls_gpa;
static long unknown_frees, interior_frees, hazards, misuses, graph_allocs, graph_frees, intrusions;

static uint64_t va_next;
static uint64_t handle_next = FAKE_HANDLE_BASE;
#define MAX_HANDLES 65536
static uint64_t handle_size[MAX_HANDLES];

/* map_region maps region ri's address range and grain table; 0 on success. */
static int map_region(int ri) {
	struct region *r = &regions[ri];
	void *p = mmap((void *)r->base, r->size, r->prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
		       MAP_FIXED_NOREPLACE, -1, 0);
	size_t meta_bytes = r->size / FAKE_GRAIN * sizeof(uint64_t);
	void *m = mmap(NULL, meta_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (p != (void *)r->base || m == MAP_FAILED) {
		fprintf(stderr, "fakecuda: cannot map the %s region at %#llx\n", r->name, (unsigned long long)r->base);
		return -1;
	}
	r->meta = (uint64_t *)m;
	__atomic_store_n(&r->ok, 1, __ATOMIC_RELEASE);
	return 0;
}

/* env_long reads a non-negative integer variable, def when unset or malformed (then said on stderr). */
static long long env_long(const char *name, long long def) {
	const char *v = getenv(name);
	if (v == NULL || *v == 0)
		return def;
	char *end = NULL;
	long long n = strtoll(v, &end, 10);
	if (*end != 0 || n < 0) {
		fprintf(stderr, "fakecuda: %s=%s is not a non-negative integer; ignored\n", name, v);
		return def;
	}
	return n;
}

static void contexts_init(void);

__attribute__((constructor)) static void fake_init(void) {
	fresh_addresses = env_long("FAKECUDA_FRESH", 0) == 1;
	lazy_context = env_long("FAKECUDA_LAZY_CONTEXT", 0) == 1;
	shared_regions = getenv("FAKECUDA_DEVICES") == NULL;
	long long n = env_long("FAKECUDA_DEVICES", 4);
	if (n > 0)
		device_count = n > MAX_DEVICES ? MAX_DEVICES : (int)n;
	capacity = (uint64_t)env_long("FAKECUDA_CAPACITY", (long long)REGION_BYTES);
	sync_delay_us = (long)env_long("FAKECUDA_SYNC_DELAY_US", 0);
	sync_probe = env_long("FAKECUDA_SYNC_PROBE", 0) == 1;
	hazard_log = env_long("FAKECUDA_HAZARD_LOG", 0) == 1;
	const char *v = getenv("FAKECUDA_RAISE");
	if (v != NULL && sscanf(v, "%d:%ld", &raise_signal, &raise_at) != 2)
		raise_signal = 0;
	for (int i = 0; i < R_FIRST_CTX; i++)
		map_region(i);
	contexts_init();
	void *va = mmap((void *)FAKE_VA_BASE, 1ull << 40, PROT_NONE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (va != (void *)FAKE_VA_BASE)
		fprintf(stderr, "fakecuda: cannot map the VA region\n");
}

/* Entering and leaving the allocator: a signal handler that allocates meanwhile gets the nested cache. */
static struct thread_cache *cache_enter(int ri) {
	int depth = in_region++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	struct thread_cache *c = &caches[depth > 0][ri];
	unsigned gen = __atomic_load_n(&regions[ri].gen, __ATOMIC_ACQUIRE);
	if (c->gen != gen) { /* the region was reset: its arenas and free blocks are gone */
		memset(c, 0, sizeof *c);
		c->gen = gen;
	}
	return c;
}
static void cache_leave(void) {
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	in_region--;
}

/* accounted is the bytes an allocation of n counts against the capacity. */
static uint64_t accounted(uint64_t n) {
	if (n > (1u << 20))
		return (n + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
	return (n + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1);
}

/* charge counts n bytes against region ri's capacity; 0 when they do not fit (nothing charged). */
static int charge(int ri, uint64_t n) {
	if (ri < R_FIRST_CTX)
		return 1;
	uint64_t a = accounted(n);
	uint64_t now = __atomic_add_fetch(&regions[ri].allocated, a, __ATOMIC_RELAXED);
	if (now > capacity) {
		__atomic_sub_fetch(&regions[ri].allocated, a, __ATOMIC_RELAXED);
		return 0;
	}
	return 1;
}
static void uncharge(int ri, uint64_t n) {
	if (ri >= R_FIRST_CTX)
		__atomic_sub_fetch(&regions[ri].allocated, accounted(n), __ATOMIC_RELAXED);
}

/* take_free takes a block of the rounded size from the thread's free list; 0 if none. */
static uint64_t take_free(struct thread_cache *c, uint64_t rounded) {
	for (int i = c->nfree - 1; i >= 0; i--) {
		if (c->free_size[i] == rounded) {
			uint64_t addr = c->free_addr[i];
			c->nfree--;
			c->free_addr[i] = c->free_addr[c->nfree];
			c->free_size[i] = c->free_size[c->nfree];
			return addr;
		}
	}
	return 0;
}

static CUresult region_alloc_in(int ri, struct thread_cache *c, CUdeviceptr *out, size_t n) {
	struct region *r = &regions[ri];
	if (n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > ONE_TIB || !__atomic_load_n(&r->ok, __ATOMIC_ACQUIRE) || !charge(ri, n))
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t rounded = (n + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1);
	uint64_t addr = fresh_addresses && ri >= R_FIRST_CTX ? 0 : take_free(c, rounded);
	if (addr == 0) {
		if (c->cur + rounded > c->end) {
			uint64_t len = rounded > FAKE_ARENA ? (rounded + FAKE_ARENA - 1) & ~(FAKE_ARENA - 1) : FAKE_ARENA;
			uint64_t next = __atomic_load_n(&r->next, __ATOMIC_RELAXED), off;
			do { /* a request that does not fit takes nothing: later ones may still fit */
				off = next;
				if (fresh_addresses && ri >= R_FIRST_CTX && len == FAKE_ARENA)
					off %= r->size; /* wrap: the region is a multiple of the arena */
				if (off + len > r->size) {
					uncharge(ri, n);
					return CUDA_ERROR_OUT_OF_MEMORY;
				}
			} while (!__atomic_compare_exchange_n(&r->next, &next, next + len, 0, __ATOMIC_RELAXED,
							      __ATOMIC_RELAXED));
			c->cur = r->base + off;
			c->end = c->cur + len;
		}
		addr = c->cur;
		c->cur += rounded;
	}
	__atomic_store_n(&r->meta[(addr - r->base) / FAKE_GRAIN], (uint64_t)n + 1, __ATOMIC_RELEASE);
	*out = addr;
	return CUDA_SUCCESS;
}

static CUresult region_alloc(int ri, CUdeviceptr *out, size_t n) {
	CUresult res = region_alloc_in(ri, cache_enter(ri), out, n);
	cache_leave();
	return res;
}

/* containing finds the live allocation of region ri that contains addr (looking back at most 2 GiB):
 * its start, or 0 (its size in *size). */
static uint64_t containing(int ri, uint64_t addr, uint64_t *size) {
	struct region *r = &regions[ri];
	if (!__atomic_load_n(&r->ok, __ATOMIC_ACQUIRE) || addr < r->base || addr >= r->base + r->size)
		return 0;
	uint64_t g = (addr - r->base) / FAKE_GRAIN;
	uint64_t stop = g > (4ull << 20) ? g - (4ull << 20) : 0;
	for (uint64_t i = g + 1; i-- > stop;) {
		uint64_t v = __atomic_load_n(&r->meta[i], __ATOMIC_ACQUIRE);
		if (v == 0)
			continue;
		uint64_t start = r->base + i * FAKE_GRAIN;
		if (start + (v - 1) > addr) {
			*size = v - 1;
			return start;
		}
		return 0;
	}
	return 0;
}

/* bad_free counts a free of addr that no allocation starts at, as interior or unknown. */
static CUresult bad_free(int ri, uint64_t addr) {
	uint64_t size = 0;
	if (ri >= 0 && containing(ri, addr, &size) != 0)
		__atomic_fetch_add(&interior_frees, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&unknown_frees, 1, __ATOMIC_RELAXED);
	return CUDA_ERROR_INVALID_VALUE;
}

/* region_unmark clears the allocation at addr; its requested size, or 0 if none starts there. */
static uint64_t region_unmark(int ri, uint64_t addr) {
	struct region *r = &regions[ri];
	if (addr < r->base || addr >= r->base + r->size || (addr - r->base) % FAKE_GRAIN != 0 ||
	    !__atomic_load_n(&r->ok, __ATOMIC_ACQUIRE))
		return 0;
	uint64_t v = __atomic_exchange_n(&r->meta[(addr - r->base) / FAKE_GRAIN], 0, __ATOMIC_ACQ_REL);
	if (v == 0)
		return 0;
	uncharge(ri, v - 1);
	return v;
}

static CUresult region_free_in(int ri, struct thread_cache *c, uint64_t addr) {
	uint64_t v = region_unmark(ri, addr);
	if (v == 0)
		return bad_free(ri, addr);
	if (c->nfree < FREE_LIST) {
		c->free_addr[c->nfree] = addr;
		c->free_size[c->nfree] = ((v - 1) + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1);
		c->nfree++;
	}
	return CUDA_SUCCESS;
}

static CUresult region_free(int ri, uint64_t addr) {
	CUresult res = region_free_in(ri, cache_enter(ri), addr);
	cache_leave();
	return res;
}

static int which_region(uint64_t addr) {
	for (int i = 0; i < MAX_REGIONS; i++)
		if (regions[i].size != 0 && addr >= regions[i].base && addr < regions[i].base + regions[i].size)
			return i;
	return -1;
}

/* ---- contexts, streams and the work model (all behind work_mu) ---- */

#define MAX_SLOTS 1024
#define MAX_STREAMS 4096
#define MAX_PENDING 4096

struct context {
	int used, device, primary, refs, alive;
	int legacy; /* its legacy stream's slot */
	int region; /* its device-memory region (device 0's for every primary context in shared mode) */
};
struct slot {
	int ctx, blocking, legacy;
	uint32_t issued, done;
	uint32_t *clock; /* MAX_SLOTS entries */
};
struct stream {
	uintptr_t handle; /* for a handle the fake did not make; 0 for its own */
	int used, slot, ctx;
	int capturing, mode, invalid, tid; /* capture state: mode and beginning thread */
};
struct item { uint64_t addr, end, owner; int slot; uint32_t k; };
struct pending_free { uint64_t addr, size; int ri, slot; };

static pthread_mutex_t work_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int in_work;          /* this thread holds work_mu */
static struct context ctxs[MAX_CTX];
static int created_next = MAX_DEVICES;
static struct slot slots[MAX_SLOTS];
static int nslots;
static struct stream streams[MAX_STREAMS]; /* [0, streams_made): made by cuStreamCreate; then foreign */
static long streams_made, foreign_next = MAX_STREAMS - 1;
static struct item *items;
static long nitems, items_cap;
static struct pending_free pendings[MAX_PENDING];
static int npending;
static int active_captures;           /* streams capturing, all threads */
static __thread int ptds_slot[MAX_CTX]; /* per-thread stream's slot + 1, per context */
static __thread int capture_mode;     /* cuThreadExchangeStreamCaptureMode */
static __thread int my_tid;
static int tid_next;
static uint64_t graph_next;
static long graphs_made;

/* work_lock takes work_mu; 0 (not taken) when this thread already holds it: a call nested in a signal
 * handler then goes on without the work model's lock. */
static int work_lock(void) {
	if (in_work)
		return 0;
	in_work = 1; /* before the lock: a handler interrupting the lock call must not wait for it */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pthread_mutex_lock(&work_mu);
	return 1;
}
static void work_unlock(int took) {
	if (took) {
		pthread_mutex_unlock(&work_mu);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		in_work = 0;
	}
}

/* thread_id is a small number for the calling thread (1, 2, ...). */
static int thread_id(void) {
	if (my_tid == 0)
		my_tid = __atomic_add_fetch(&tid_next, 1, __ATOMIC_RELAXED);
	return my_tid;
}

/* new_slot makes a stream slot of context ctx; -1 when the table is full. */
static int new_slot(int ctx, int blocking, int legacy) {
	if (nslots >= MAX_SLOTS) {
		fprintf(stderr, "fakecuda: more than %d streams\n", MAX_SLOTS);
		return -1;
	}
	struct slot *s = &slots[nslots];
	s->clock = calloc(MAX_SLOTS, sizeof(uint32_t));
	if (s->clock == NULL)
		return -1;
	s->ctx = ctx, s->blocking = blocking, s->legacy = legacy;
	return nslots++;
}

/* context_start readies context i on device d: its region and legacy stream. */
static int context_start(int i, int d, int primary) {
	struct context *c = &ctxs[i];
	struct region *r = &regions[R_FIRST_CTX + i];
	c->region = R_FIRST_CTX + (primary && shared_regions ? 0 : i);
	if (c->region != R_FIRST_CTX + i) {
		c->device = d, c->primary = primary, c->alive = 1, c->used = 1;
		c->legacy = new_slot(i, 1, 1);
		return c->legacy < 0 ? -1 : 0;
	}
	r->name = "device";
	r->base = primary ? FAKE_DEVICE_BASE + (uint64_t)d * REGION_STRIDE
			  : FAKE_CTX_BASE + (uint64_t)(i - MAX_DEVICES) * REGION_STRIDE;
	r->size = REGION_BYTES;
	r->prot = PROT_NONE;
	if (map_region(R_FIRST_CTX + i) != 0)
		return -1;
	c->device = d, c->primary = primary, c->alive = 1, c->used = 1;
	c->legacy = new_slot(i, 1, 1);
	return c->legacy < 0 ? -1 : 0;
}

static void contexts_init(void) {
	for (int d = 0; d < device_count; d++)
		context_start(d, d, 1);
}

/* ctx_index is the context of a handle, -1 if none. */
static int ctx_index(CUcontext h) {
	uintptr_t v = (uintptr_t)h;
	if (v >= 1 && v <= (uintptr_t)device_count)
		return (int)v - 1;
	if (v >= CREATED_HANDLE + MAX_DEVICES && v < CREATED_HANDLE + MAX_CTX && ctxs[v - CREATED_HANDLE].used)
		return (int)(v - CREATED_HANDLE);
	return -1;
}
static CUcontext ctx_handle(int i) {
	return (CUcontext)(uintptr_t)(i < MAX_DEVICES ? (uintptr_t)i + 1 : CREATED_HANDLE + (uintptr_t)i);
}
/* eff_ctx is the context the calling thread's calls use: its current one, else device 0's. */
static int eff_ctx(void) { return cur_ctx < 0 ? 0 : cur_ctx; }

/* stream_of finds (or, for a handle the fake did not make, registers as a blocking stream of the current
 * context) the stream entry of handle h; NULL for the legacy and per-thread handles. */
static struct stream *stream_of(CUstream h) {
	uintptr_t v = (uintptr_t)h;
	if (v <= 2)
		return NULL;
	long made = __atomic_load_n(&streams_made, __ATOMIC_RELAXED);
	if (v >= 0x100000 && (v - 0x100000) % 0x100 == 0 && (long)((v - 0x100000) / 0x100) < made &&
	    (v - 0x100000) / 0x100 < MAX_STREAMS && streams[(v - 0x100000) / 0x100].used)
		return &streams[(v - 0x100000) / 0x100];
	int ctx = eff_ctx();
	for (long i = MAX_STREAMS - 1; i > foreign_next; i--)
		if (streams[i].handle == v && streams[i].ctx == ctx)
			return &streams[i];
	if (foreign_next < made || foreign_next < 0)
		return NULL;
	struct stream *s = &streams[foreign_next];
	s->slot = new_slot(ctx, 1, 0);
	if (s->slot < 0)
		return NULL;
	foreign_next--;
	s->handle = v, s->ctx = ctx, s->used = 1;
	return s;
}

/* slot_of is the slot of stream handle h in the calling thread's view; -1 if none can be made. */
static int slot_of(CUstream h) {
	uintptr_t v = (uintptr_t)h;
	int ctx = eff_ctx();
	if (v == 0 || v == 1)
		return ctxs[ctx].legacy;
	if (v == 2) {
		if (ptds_slot[ctx] == 0)
			ptds_slot[ctx] = new_slot(ctx, 1, 0) + 1;
		return ptds_slot[ctx] - 1;
	}
	struct stream *s = stream_of(h);
	return s == NULL ? -1 : s->slot;
}

static void join(uint32_t *into, const uint32_t *from, int n) {
	for (int j = 0; j < n; j++)
		if (from[j] > into[j])
			into[j] = from[j];
}

/* order_implicit applies the legacy stream's rules to slot s before its next item. */
static void order_implicit(int s) {
	struct slot *sl = &slots[s];
	if (sl->legacy) {
		for (int j = 0; j < nslots; j++)
			if (j != s && slots[j].ctx == sl->ctx && slots[j].blocking)
				join(sl->clock, slots[j].clock, nslots);
	} else if (sl->blocking) {
		join(sl->clock, slots[ctxs[sl->ctx].legacy].clock, nslots);
	}
}

/* complete marks everything clock includes as done. */
static void complete(const uint32_t *clock, int n) {
	for (int j = 0; j < n; j++)
		if (clock[j] > slots[j].done)
			slots[j].done = clock[j];
}

/* check_hazards counts the pending items by other owners over [addr, end) that slot s's clock does not
 * include, dropping completed items on the way. */
static void check_hazards(int s, uint64_t addr, uint64_t end, uint64_t owner) {
	const uint32_t *clock = slots[s].clock;
	for (long i = 0; i < nitems;) {
		struct item *it = &items[i];
		if (slots[it->slot].done >= it->k) {
			items[i] = items[--nitems];
			continue;
		}
		if (it->owner != owner && it->addr < end && addr < it->end && clock[it->slot] < it->k) {
			hazards++;
			if (hazard_log)
				fprintf(stderr, "fakecuda: hazard: [%#llx, %#llx) owner %llu on slot %d (context %d) issued while "
					"[%#llx, %#llx) owner %llu on slot %d (item %u) may still run\n",
					(unsigned long long)addr, (unsigned long long)end, (unsigned long long)owner, s,
					slots[s].ctx, (unsigned long long)it->addr, (unsigned long long)it->end,
					(unsigned long long)it->owner, it->slot, it->k);
		}
		i++;
	}
}

/* issue puts one item on slot s (a marker when size is 0) and returns its number on the slot. */
static uint32_t issue(int s, uint64_t addr, uint64_t size, uint64_t owner) {
	struct slot *sl = &slots[s];
	order_implicit(s);
	if (size != 0)
		check_hazards(s, addr, addr + size, owner);
	sl->issued++;
	sl->clock[s] = sl->issued;
	if (size == 0)
		return sl->issued;
	if (nitems == items_cap) {
		long cap = items_cap == 0 ? 1024 : items_cap * 2;
		struct item *n = realloc(items, (size_t)cap * sizeof *n);
		if (n == NULL) {
			fprintf(stderr, "fakecuda: out of memory for work items\n");
			abort();
		}
		items = n, items_cap = cap;
	}
	items[nitems++] = (struct item){addr, addr + size, owner, s, sl->issued};
	return sl->issued;
}

/* drop_pending forgets the stream-ordered frees of context ctx (their blocks are never reused). */
static void drop_pending(int ctx) {
	for (int i = 0; i < npending;)
		if (slots[pendings[i].slot].ctx == ctx)
			pendings[i] = pendings[--npending];
		else
			i++;
}

/* complete_context completes all work of context ctx issued so far. */
static void complete_context(int ctx) {
	for (int j = 0; j < nslots; j++)
		if (slots[j].ctx == ctx)
			slots[j].done = slots[j].issued;
	drop_pending(ctx);
}

static int syncs_waiting; /* device synchronizations between their snapshot and their completion */

/* fakecuda_syncs_waiting: how many device synchronizations are between their snapshot and their end. */
int fakecuda_syncs_waiting(void) { return __atomic_load_n(&syncs_waiting, __ATOMIC_ACQUIRE); }

/* device_sync completes the work of context ctx issued before the call, after FAKECUDA_SYNC_DELAY_US
 * when delayed (cuCtxSynchronize; not the wait inside cuMemFree_v2). */
static void device_sync(int ctx, int delayed) {
	int took = work_lock();
	if (sync_delay_us == 0 || !delayed) {
		complete_context(ctx);
		work_unlock(took);
		return;
	}
	uint32_t *snap = calloc(MAX_SLOTS, sizeof(uint32_t));
	int n = nslots;
	for (int j = 0; j < n && snap != NULL; j++)
		snap[j] = slots[j].ctx == ctx ? slots[j].issued : 0;
	__atomic_add_fetch(&syncs_waiting, 1, __ATOMIC_RELEASE);
	work_unlock(took);
	usleep((useconds_t)sync_delay_us);
	__atomic_sub_fetch(&syncs_waiting, 1, __ATOMIC_RELEASE);
	took = work_lock();
	if (snap != NULL)
		complete(snap, n);
	drop_pending(ctx);
	work_unlock(took);
	free(snap);
}

/* capture_blocks says whether an active capture forbids the calling thread's unsafe calls, and then
 * invalidates those captures. Called without work_mu held. */
static int capture_blocks(void) {
	if (__atomic_load_n(&active_captures, __ATOMIC_ACQUIRE) == 0 || capture_mode == 2)
		return 0;
	int took = work_lock();
	if (!took)
		return 0;
	int blocked = 0, me = thread_id();
	long made = streams_made < MAX_STREAMS ? streams_made : MAX_STREAMS;
	for (long i = 0; i < MAX_STREAMS; i++) {
		struct stream *s = &streams[i];
		if ((i < made || i > foreign_next) && s->capturing && (s->mode == 0 || (s->mode == 1 && s->tid == me))) {
			s->invalid = 1;
			blocked = 1;
		}
	}
	work_unlock(took);
	return blocked;
}

/* reset_context frees every allocation of context i, drops its work and restarts its allocator. */
static void reset_context(int i) {
	complete_context(i);
	for (long k = 0; k < MAX_STREAMS; k++)
		if (streams[k].used && streams[k].ctx == i && streams[k].capturing) {
			streams[k].capturing = 0;
			__atomic_sub_fetch(&active_captures, 1, __ATOMIC_RELEASE);
		}
	struct region *r = &regions[ctxs[i].region];
	if (__atomic_load_n(&r->ok, __ATOMIC_ACQUIRE)) {
		madvise(r->meta, r->size / FAKE_GRAIN * sizeof(uint64_t), MADV_DONTNEED);
		__atomic_store_n(&r->next, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&r->allocated, 0, __ATOMIC_RELAXED);
		__atomic_add_fetch(&r->gen, 1, __ATOMIC_RELEASE);
	}
}

/* ---- fake-only work calls ---- */

void fakecuda_launch(CUstream s, uint64_t addr, uint64_t size, uint64_t owner) {
	int took = work_lock();
	int sl = slot_of(s);
	struct stream *st = stream_of(s);
	if (sl >= 0 && (st == NULL || !st->capturing)) /* on a capturing stream: a graph node, no work */
		issue(sl, addr, size, owner);
	work_unlock(took);
}

void fakecuda_host_use(uint64_t addr, uint64_t size, uint64_t owner) {
	int took = work_lock();
	int sl = ctxs[eff_ctx()].legacy;
	issue(sl, addr, size, owner);
	complete(slots[sl].clock, nslots);
	work_unlock(took);
}

long fakecuda_hazards(void) {
	int took = work_lock();
	long n = hazards;
	work_unlock(took);
	return n;
}
long fakecuda_misuses(void) { return __atomic_load_n(&misuses, __ATOMIC_RELAXED); }
long fakecuda_unknown_frees(void) { return __atomic_load_n(&unknown_frees, __ATOMIC_RELAXED); }
long fakecuda_interior_frees(void) { return __atomic_load_n(&interior_frees, __ATOMIC_RELAXED); }
long fakecuda_capture_intrusions(void) { return __atomic_load_n(&intrusions, __ATOMIC_RELAXED); }
void fakecuda_graph_allocs(long *allocs, long *frees) {
	*allocs = __atomic_load_n(&graph_allocs, __ATOMIC_RELAXED);
	*frees = __atomic_load_n(&graph_frees, __ATOMIC_RELAXED);
}
int fakecuda_device_of(uint64_t addr) {
	int ri = which_region(addr);
	return ri < R_FIRST_CTX ? -1 : ctxs[ri - R_FIRST_CTX].device;
}

/* ---- implementations ---- */

static CUresult i_cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
static CUresult i_cuDeviceGetCount(int *n) {
	if (n == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*n = device_count;
	return CUDA_SUCCESS;
}
static CUresult i_cuCtxGetDevice(CUdevice *d) {
	__atomic_fetch_add(&ctx_queries, 1, __ATOMIC_RELAXED);
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (lazy_context && cur_ctx < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	*d = ctxs[eff_ctx()].device;
	return CUDA_SUCCESS;
}

/* probe_main is the sync probe's thread: an allocation and a free through the process's symbols. */
static __thread int probe_thread;
static void *probe_main(void *arg) {
	(void)arg;
	probe_thread = 1;
	cudaError_t (*m)(void **, size_t) = (cudaError_t (*)(void **, size_t))dlsym(RTLD_DEFAULT, "cudaMalloc");
	cudaError_t (*f)(void *) = (cudaError_t (*)(void *))dlsym(RTLD_DEFAULT, "cudaFree");
	void *p = NULL;
	if (m != NULL && f != NULL && m(&p, 4096) == 0)
		f(p);
	return NULL;
}
/* sync_probe_run runs the probe (FAKECUDA_SYNC_PROBE=1) and waits for it. */
static void sync_probe_run(void) {
	pthread_t t;
	if (!sync_probe || probe_thread || in_work)
		return;
	if (pthread_create(&t, NULL, probe_main, NULL) == 0)
		pthread_join(t, NULL);
}

static long syncs; /* cuCtxSynchronize calls, all threads */
static CUresult i_cuCtxSynchronize(void) {
	__atomic_fetch_add(&syncs, 1, __ATOMIC_RELAXED);
	if (capture_blocks())
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	sync_probe_run();
	device_sync(eff_ctx(), 1);
	return CUDA_SUCCESS;
}

/* Events: a table of handles (index + 1); an event recorded on a stream becomes ready when its marker
 * item is completed by a wait. */
#define MAX_EVENTS 65536
static struct {
	int used, recorded, captured, ctx, slot, n;
	uint32_t k;
	uint32_t *clock; /* n entries: the recording stream's clock */
	struct stream *capture;
} events[MAX_EVENTS];
static long event_next, events_recorded, stream_waits, host_waits;

static int event_index(CUevent e) {
	uintptr_t i = (uintptr_t)e;
	return i >= 1 && i <= MAX_EVENTS && events[i - 1].used ? (int)(i - 1) : -1;
}
static int event_ready(int i) { return !events[i].recorded || slots[events[i].slot].done >= events[i].k; }

static CUresult i_cuStreamSynchronize(CUstream s) {
	int took = work_lock();
	int sl = slot_of(s);
	if (sl >= 0) {
		order_implicit(sl);
		complete(slots[sl].clock, nslots);
	}
	work_unlock(took);
	return CUDA_SUCCESS;
}
static CUresult i_cuStreamDestroy_v2(CUstream s) { (void)s; return CUDA_SUCCESS; }
static int capturing; /* fakecuda_capture: 1, a blocking stream captures; 2, every other stream does */
static CUresult i_cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority) {
	(void)priority;
	if (s == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	long i = streams_made;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (i < foreign_next) {
		int sl = new_slot(eff_ctx(), !(flags & 1), 0);
		if (sl >= 0) {
			streams[i] = (struct stream){0, 1, sl, eff_ctx(), 0, 0, 0, 0};
			__atomic_store_n(&streams_made, i + 1, __ATOMIC_RELEASE);
			*s = (CUstream)(uintptr_t)(0x100000 + 0x100 * i);
			r = CUDA_SUCCESS;
		}
	}
	work_unlock(took);
	return r;
}
static CUresult i_cuStreamCreate(CUstream *s, unsigned int flags) { return i_cuStreamCreateWithPriority(s, flags, 0); }
static CUresult i_cuStreamIsCapturing(CUstream s, int *status) {
	if (status == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	struct stream *st = stream_of(s);
	int real = st != NULL && st->capturing ? 1 + st->invalid : 0;
	work_unlock(took);
	int c = __atomic_load_n(&capturing, __ATOMIC_RELAXED);
	*status = real ? real : c == 2 && s != (CUstream)0x1 && s != (CUstream)0x2 && s != NULL;
	return s == (CUstream)0x1 && c == 1 ? 906 : CUDA_SUCCESS;
}
static CUresult i_cuIpcGetMemHandle(void *h, CUdeviceptr p) {
	if (h == NULL || which_region(p) < R_FIRST_CTX)
		return CUDA_ERROR_INVALID_VALUE;
	memset(h, 0, 64);
	memcpy(h, &p, sizeof p);
	return CUDA_SUCCESS;
}
static CUresult i_cuEventCreate(CUevent *e, unsigned int flags) {
	(void)flags;
	if (e == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	long i = event_next < MAX_EVENTS ? event_next++ : -1;
	if (i >= 0) {
		events[i].used = 1, events[i].recorded = 0, events[i].captured = 0;
		events[i].ctx = eff_ctx();
	}
	work_unlock(took);
	if (i < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (CUevent)(uintptr_t)(i + 1);
	return CUDA_SUCCESS;
}
static long barriers; /* events recorded on the legacy stream */

/* event_capture_clock copies slot sl's clock into event i. */
static void event_capture_clock(int i, int sl) {
	if (events[i].clock == NULL)
		events[i].clock = malloc(MAX_SLOTS * sizeof(uint32_t));
	if (events[i].clock == NULL)
		abort();
	memcpy(events[i].clock, slots[sl].clock, (size_t)nslots * sizeof(uint32_t));
	events[i].n = nslots;
}

static CUresult i_cuEventRecord(CUevent e, CUstream s) {
	int took = work_lock();
	int i = event_index(e), sl = slot_of(s);
	CUresult r = i < 0 || sl < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS && slots[sl].ctx != events[i].ctx) {
		misuses++;
		r = CUDA_ERROR_INVALID_HANDLE;
	}
	struct stream *st = r == CUDA_SUCCESS ? stream_of(s) : NULL;
	if (r == CUDA_SUCCESS && st != NULL && st->capturing) {
		intrusions++;
		events[i].recorded = 1, events[i].captured = 1, events[i].capture = st;
	} else if (r == CUDA_SUCCESS) {
		events[i].captured = 0;
		events[i].recorded = 1;
		events[i].slot = sl;
		events[i].k = issue(sl, 0, 0, 0);
		event_capture_clock(i, sl);
	}
	if (r == CUDA_SUCCESS && s == (CUstream)0x1)
		barriers++;
	else if (r == CUDA_SUCCESS)
		events_recorded++;
	work_unlock(took);
	return r;
}

/* captured_event invalidates the capture event i was recorded in; CUDA_ERROR_CAPTURED_EVENT. */
static CUresult captured_event(int i) {
	if (events[i].capture != NULL && events[i].capture->capturing)
		events[i].capture->invalid = 1;
	return CUDA_ERROR_CAPTURED_EVENT;
}

static CUresult i_cuEventQuery(CUevent e) {
	int took = work_lock();
	int i = event_index(e);
	CUresult r = i < 0 ? CUDA_ERROR_INVALID_VALUE
		     : events[i].captured ? captured_event(i)
		     : (event_ready(i) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
	work_unlock(took);
	return r;
}
static CUresult i_cuEventSynchronize(CUevent e) {
	sync_probe_run();
	int took = work_lock();
	int i = event_index(e);
	CUresult r = i < 0 ? CUDA_ERROR_INVALID_VALUE : events[i].captured ? captured_event(i) : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS && !event_ready(i)) {
		complete(events[i].clock, events[i].n);
		host_waits++;
	}
	work_unlock(took);
	return r;
}
static CUresult i_cuEventDestroy_v2(CUevent e) {
	int took = work_lock();
	int i = event_index(e);
	if (i >= 0)
		events[i].used = 0;
	work_unlock(took);
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult i_cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
	(void)flags;
	int took = work_lock();
	int i = event_index(e), sl = slot_of(s);
	struct stream *st = stream_of(s);
	if (i >= 0 && st != NULL && st->capturing)
		intrusions++;
	else if (i >= 0 && sl >= 0 && events[i].recorded && !events[i].captured) {
		if (!event_ready(i))
			stream_waits++;
		join(slots[sl].clock, events[i].clock, events[i].n);
	}
	work_unlock(took);
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- contexts ---- */

static __thread int ctx_stack[16];
static __thread int ctx_depth;

static CUresult i_cuCtxSetCurrent(CUcontext ctx) {
	if (ctx == NULL) {
		cur_ctx = -1;
		return CUDA_SUCCESS;
	}
	int i = ctx_index(ctx);
	if (i < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	cur_ctx = i;
	return CUDA_SUCCESS;
}
static CUresult i_cuCtxGetCurrent(CUcontext *ctx) {
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* as cuCtxGetDevice: without FAKECUDA_LAZY_CONTEXT a thread is in device 0's primary context */
	*ctx = cur_ctx < 0 && lazy_context ? NULL : ctx_handle(eff_ctx());
	return CUDA_SUCCESS;
}
static CUresult i_cuCtxPushCurrent_v2(CUcontext ctx) {
	int i = ctx_index(ctx);
	if (i < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth >= 16)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = cur_ctx;
	cur_ctx = i;
	return CUDA_SUCCESS;
}
static CUresult i_cuCtxPopCurrent_v2(CUcontext *ctx) {
	if (cur_ctx < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx != NULL)
		*ctx = ctx_handle(cur_ctx);
	cur_ctx = ctx_depth > 0 ? ctx_stack[--ctx_depth] : -1;
	return CUDA_SUCCESS;
}
static CUresult i_cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice d) {
	(void)flags;
	if (ctx == NULL || d < 0 || d >= device_count)
		return ctx == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_DEVICE;
	int took = work_lock();
	int i = created_next < MAX_CTX ? created_next++ : -1;
	CUresult r = i < 0 || context_start(i, d, 0) != 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	work_unlock(took);
	if (r != CUDA_SUCCESS)
		return r;
	*ctx = ctx_handle(i);
	return i_cuCtxPushCurrent_v2(*ctx);
}
static CUresult i_cuCtxDestroy_v2(CUcontext ctx) {
	int i = ctx_index(ctx);
	if (i < 0 || ctxs[i].primary || !ctxs[i].alive)
		return CUDA_ERROR_INVALID_CONTEXT;
	int took = work_lock();
	reset_context(i);
	ctxs[i].alive = 0;
	work_unlock(took);
	if (cur_ctx == i)
		cur_ctx = ctx_depth > 0 ? ctx_stack[--ctx_depth] : -1;
	return CUDA_SUCCESS;
}
static CUresult i_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
	if (ctx == NULL || d < 0 || d >= device_count)
		return ctx == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_DEVICE;
	int took = work_lock();
	ctxs[d].refs++;
	work_unlock(took);
	*ctx = ctx_handle(d);
	return CUDA_SUCCESS;
}
static CUresult i_cuDevicePrimaryCtxRelease(CUdevice d) {
	if (d < 0 || d >= device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	int took = work_lock();
	CUresult r = ctxs[d].refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS && --ctxs[d].refs == 0)
		reset_context(d);
	work_unlock(took);
	return r;
}
static CUresult i_cuDevicePrimaryCtxReset(CUdevice d) {
	if (d < 0 || d >= device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	int took = work_lock();
	reset_context(d);
	ctxs[d].refs = 0;
	work_unlock(took);
	return CUDA_SUCCESS;
}
static CUresult i_cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
	if (d < 0 || d >= device_count || flags == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	*flags = 0;
	*active = ctxs[d].refs > 0;
	work_unlock(took);
	return CUDA_SUCCESS;
}
static CUresult i_cuStreamGetCtx(CUstream s, CUcontext *ctx) {
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	int sl = slot_of(s);
	if (sl >= 0)
		*ctx = ctx_handle(slots[sl].ctx);
	work_unlock(took);
	return sl < 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

/* ---- capture ---- */

static CUresult i_cuStreamBeginCapture_v2(CUstream s, int mode) {
	if (mode < 0 || mode > 2)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	struct stream *st = stream_of(s);
	CUresult r = st == NULL ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
		     : st->capturing ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS) {
		st->capturing = 1, st->invalid = 0, st->mode = mode, st->tid = thread_id();
		__atomic_add_fetch(&active_captures, 1, __ATOMIC_RELEASE);
	}
	work_unlock(took);
	return r;
}
static CUresult i_cuStreamBeginCapture(CUstream s) { return i_cuStreamBeginCapture_v2(s, 0); }
static CUresult i_cuStreamEndCapture(CUstream s, void **graph) {
	if (graph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	struct stream *st = stream_of(s);
	CUresult r = st == NULL || !st->capturing ? 906 /* CUDA_ERROR_STREAM_CAPTURE_ILLEGAL... not capturing */
		     : st->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
	if (st != NULL && st->capturing) {
		st->capturing = 0;
		__atomic_sub_fetch(&active_captures, 1, __ATOMIC_RELEASE);
	}
	*graph = r == CUDA_SUCCESS ? (void *)(uintptr_t)(0x6000000 + ++graphs_made) : NULL;
	work_unlock(took);
	return r;
}
/* i_cuStreamGetCaptureInfo_v2: status (0 none, 1 active, 2 invalidated) and a capture id; no graph or
 * dependencies (the pointers, when given, get NULL and 0). */
static CUresult i_cuStreamGetCaptureInfo_v2(CUstream s, int *status, cuuint64_t *id, void **graph,
					    const void ***deps, size_t *ndeps) {
	if (status == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	struct stream *st = stream_of(s);
	*status = st != NULL && st->capturing ? 1 + st->invalid : 0;
	if (id != NULL)
		*id = st != NULL ? (cuuint64_t)(st - streams) + 1 : 0;
	work_unlock(took);
	if (graph != NULL)
		*graph = NULL;
	if (deps != NULL)
		*deps = NULL;
	if (ndeps != NULL)
		*ndeps = 0;
	return CUDA_SUCCESS;
}
static CUresult i_cuStreamGetCaptureInfo(CUstream s, int *status, cuuint64_t *id) {
	return i_cuStreamGetCaptureInfo_v2(s, status, id, NULL, NULL, NULL);
}
static CUresult i_cuThreadExchangeStreamCaptureMode(int *mode) {
	if (mode == NULL || *mode < 0 || *mode > 2)
		return CUDA_ERROR_INVALID_VALUE;
	int old = capture_mode;
	capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- memory ---- */

/* ctx_region is the region of the calling thread's context; -1 when that context was destroyed. */
static int ctx_region(void) {
	int c = eff_ctx();
	return ctxs[c].alive ? ctxs[c].region : -1;
}

static CUresult i_cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	if (raise_signal != 0 && __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED) == raise_at)
		raise(raise_signal);
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (capture_blocks())
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	int ri = ctx_region();
	return ri < 0 ? CUDA_ERROR_INVALID_CONTEXT : region_alloc(ri, p, n);
}
static CUresult i_cuMemFree_v2(CUdeviceptr p) {
	if (capture_blocks())
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	int ri = which_region(p);
	if (ri == R_HOST || ri < 0)
		return bad_free(-1, p);
	CUresult r = region_free(ri, p);
	if (r == CUDA_SUCCESS && ri >= R_FIRST_CTX && !in_work) /* CUDA's free waits for the device */
		for (int c = 0; c < MAX_CTX; c++)
			if (ctxs[c].used && ctxs[c].region == ri)
				device_sync(c, 0);
	return r;
}
static CUresult i_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int elem) {
	(void)elem;
	if (p == NULL || pitch == NULL || w == 0 || h == 0)
		return CUDA_ERROR_INVALID_VALUE;
	int ri = ctx_region();
	if (ri < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	size_t pi = (w + FAKE_PITCH_ALIGN - 1) & ~(FAKE_PITCH_ALIGN - 1);
	CUresult r = region_alloc(ri, p, pi * h);
	if (r == CUDA_SUCCESS)
		*pitch = pi;
	return r;
}
static CUresult i_cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) {
	(void)flags;
	return p == NULL ? CUDA_ERROR_INVALID_VALUE : region_alloc(R_MANAGED, p, n);
}

/* capturing_stream says whether handle s is a stream that captures now (work_mu held). */
static int capturing_stream(CUstream s) {
	struct stream *st = stream_of(s);
	return st != NULL && st->capturing;
}

/* graph_alloc hands out a graph allocation's address (never reused). */
static CUdeviceptr graph_alloc(size_t n) {
	uint64_t rounded = (n + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1);
	graph_allocs++;
	return FAKE_GRAPH_BASE + __atomic_fetch_add(&graph_next, rounded == 0 ? FAKE_GRAIN : rounded, __ATOMIC_RELAXED);
}

/* reuse_pending takes a block freed with cuMemFreeAsync on slot sl of region ri, of the rounded size. */
static uint64_t reuse_pending(int ri, int sl, uint64_t rounded, size_t n) {
	for (int i = npending - 1; i >= 0; i--) {
		struct pending_free *f = &pendings[i];
		if (f->ri != ri || f->slot != sl || f->size != rounded || !charge(ri, n))
			continue;
		uint64_t addr = f->addr;
		*f = pendings[--npending];
		struct region *r = &regions[ri];
		__atomic_store_n(&r->meta[(addr - r->base) / FAKE_GRAIN], (uint64_t)n + 1, __ATOMIC_RELEASE);
		return addr;
	}
	return 0;
}

static CUresult i_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
	if (p == NULL || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	int took = work_lock();
	int sl = slot_of(s), ri = sl >= 0 ? ctxs[slots[sl].ctx].region : ctx_region(); /* the stream's device */
	if (sl >= 0 && !ctxs[slots[sl].ctx].alive)
		ri = -1;
	uint64_t addr = 0;
	if (ri < 0) {
		work_unlock(took);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (capturing_stream(s))
		addr = graph_alloc(n);
	else if (sl >= 0)
		addr = reuse_pending(ri, sl, (n + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1), n);
	work_unlock(took);
	if (addr != 0) {
		*p = addr;
		return CUDA_SUCCESS;
	}
	/* A fresh block: never one freed with cuMemFreeAsync (the cache holds only cudaFree'd ones, freed
	 * after the device completed). */
	return region_alloc(ri, p, n);
}
/* work_pending says whether any work item not yet complete overlaps the allocation starting at addr
 * (probe: [addr, end) with end = addr + 1; the item list covers every range). */
static int work_pending(uint64_t addr, uint64_t end) {
	uint64_t size = 0;
	int ri = which_region(addr);
	if (ri >= 0 && containing(ri, addr, &size) == addr)
		end = addr + size;
	for (long i = 0; i < nitems; i++)
		if (slots[items[i].slot].done < items[i].k && items[i].addr < end && addr < items[i].end)
			return 1;
	return 0;
}

static CUresult i_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
	int took = work_lock();
	CUresult r = CUDA_SUCCESS;
	int ri = which_region(p), sl = slot_of(s);
	if (capturing_stream(s)) {
		graph_frees++;
	} else if (ri < R_FIRST_CTX || sl < 0) {
		r = bad_free(ri < 0 ? -1 : ri, p);
	} else if (!work_pending(p, p + 1)) {
		r = region_free(ri, p); /* no work may still use it: reusable at once, as before the work model */
	} else {
		uint64_t v = region_unmark(ri, p);
		if (v == 0)
			r = bad_free(ri, p);
		else if (npending < MAX_PENDING)
			pendings[npending++] = (struct pending_free){p, ((v - 1) + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1), ri, sl};
	}
	work_unlock(took);
	return r;
}
static CUresult i_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
	(void)pool;
	return i_cuMemAllocAsync(p, n, s);
}
static CUresult i_cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
	if (free_bytes == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int ri = ctx_region();
	if (ri < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	uint64_t a = __atomic_load_n(&regions[ri].allocated, __ATOMIC_RELAXED);
	*total = capacity;
	*free_bytes = a > capacity ? 0 : capacity - a;
	return CUDA_SUCCESS;
}
static CUresult i_cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
	int ri = which_region(p);
	uint64_t sz = 0, b = ri < 0 ? 0 : containing(ri, p, &sz);
	if (b == 0)
		return CUDA_ERROR_NOT_FOUND;
	if (base != NULL)
		*base = b;
	if (size != NULL)
		*size = sz;
	return CUDA_SUCCESS;
}

static CUresult i_cuMemAllocHost_v2(void **p, size_t n) {
	CUdeviceptr a = 0;
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = region_alloc(R_HOST, &a, n);
	if (r == CUDA_SUCCESS)
		*p = (void *)(uintptr_t)a;
	return r;
}
static CUresult i_cuMemHostAlloc(void **p, size_t n, unsigned int flags) { (void)flags; return i_cuMemAllocHost_v2(p, n); }
static CUresult i_cuMemFreeHost(void *p) { return region_free(R_HOST, (uint64_t)(uintptr_t)p); }
static CUresult i_cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
			      unsigned long long flags) {
	(void)flags;
	if (h == NULL || prop == NULL || n == 0 || n % (2u << 20) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t id = __atomic_fetch_add(&handle_next, 1, __ATOMIC_RELAXED);
	if (id - FAKE_HANDLE_BASE >= MAX_HANDLES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	__atomic_store_n(&handle_size[id - FAKE_HANDLE_BASE], n, __ATOMIC_RELEASE);
	*h = id;
	return CUDA_SUCCESS;
}
static int handle_ok(CUmemGenericAllocationHandle h) {
	return h >= FAKE_HANDLE_BASE && h - FAKE_HANDLE_BASE < MAX_HANDLES &&
	       __atomic_load_n(&handle_size[h - FAKE_HANDLE_BASE], __ATOMIC_ACQUIRE) != 0;
}
static CUresult i_cuMemRelease(CUmemGenericAllocationHandle h) {
	if (!handle_ok(h))
		return CUDA_ERROR_INVALID_VALUE;
	__atomic_store_n(&handle_size[h - FAKE_HANDLE_BASE], 0, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}
static int va_ok(CUdeviceptr p, size_t n) { return p >= FAKE_VA_BASE && p + n <= FAKE_VA_BASE + (1ull << 40); }
static CUresult i_cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,
			   unsigned long long flags) {
	(void)flags;
	if (!handle_ok(h) || !va_ok(p, n) || off + n > handle_size[h - FAKE_HANDLE_BASE])
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}
static CUresult i_cuMemUnmap(CUdeviceptr p, size_t n) { return va_ok(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
static CUresult i_cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr,
				      unsigned long long flags) {
	(void)align;
	(void)addr;
	(void)flags;
	if (p == NULL || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t len = (n + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
	uint64_t off = __atomic_fetch_add(&va_next, len, __ATOMIC_RELAXED);
	if (off + len > (1ull << 40))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = FAKE_VA_BASE + off;
	return CUDA_SUCCESS;
}
static CUresult i_cuMemAddressFree(CUdeviceptr p, size_t n) { return va_ok(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
static CUresult i_cuGetProcAddress_v2(const char *sym, void **fn, int version, cuuint64_t flags, void *status);
static CUresult i_cuGetProcAddress(const char *sym, void **fn, int version, cuuint64_t flags) {
	return i_cuGetProcAddress_v2(sym, fn, version, flags, NULL);
}

/* ---- exported entry points and the internal ones cuGetProcAddress hands out ---- */

#define ENTRY(name, impl, params, args) ENTRY_COUNTING(name, impl, params, args, 1)
#define ENTRY_UNCOUNTED(name, impl, params, args) ENTRY_COUNTING(name, impl, params, args, 0)
#define ENTRY_COUNTING(name, impl, params, args, count)                                                  \
	CUresult name params {                                                                           \
		calls_exported += count;                                                                 \
		CUresult r = impl args;                                                                  \
		errno = FAKE_ERRNO;                                                                      \
		return r;                                                                                \
	}                                                                                                \
	static CUresult gpa_##name params {                                                              \
		calls_gpa += count;                                                                      \
		CUresult r = impl args;                                                                  \
		errno = FAKE_ERRNO;                                                                      \
		return r;                                                                                \
	}

ENTRY_UNCOUNTED(cuInit, i_cuInit, (unsigned int f), (f))
ENTRY_UNCOUNTED(cuCtxGetDevice, i_cuCtxGetDevice, (CUdevice *d), (d))
ENTRY_UNCOUNTED(cuDeviceGetCount, i_cuDeviceGetCount, (int *n), (n))
ENTRY_UNCOUNTED(cuCtxSetCurrent, i_cuCtxSetCurrent, (CUcontext c), (c))
ENTRY_UNCOUNTED(cuCtxSynchronize, i_cuCtxSynchronize, (void), ())
ENTRY_UNCOUNTED(cuStreamSynchronize, i_cuStreamSynchronize, (CUstream s), (s))
ENTRY_UNCOUNTED(cuStreamDestroy_v2, i_cuStreamDestroy_v2, (CUstream s), (s))
ENTRY_UNCOUNTED(cuStreamCreate, i_cuStreamCreate, (CUstream *s, unsigned int f), (s, f))
ENTRY_UNCOUNTED(cuStreamCreateWithPriority, i_cuStreamCreateWithPriority, (CUstream *s, unsigned int f, int pr),
		(s, f, pr))
ENTRY_UNCOUNTED(cuStreamIsCapturing, i_cuStreamIsCapturing, (CUstream s, int *st), (s, st))
ENTRY_UNCOUNTED(cuIpcGetMemHandle, i_cuIpcGetMemHandle, (void *h, CUdeviceptr p), (h, p))
ENTRY_UNCOUNTED(cuEventCreate, i_cuEventCreate, (CUevent *e, unsigned int f), (e, f))
ENTRY_UNCOUNTED(cuEventRecord, i_cuEventRecord, (CUevent e, CUstream s), (e, s))
ENTRY_UNCOUNTED(cuEventQuery, i_cuEventQuery, (CUevent e), (e))
ENTRY_UNCOUNTED(cuEventSynchronize, i_cuEventSynchronize, (CUevent e), (e))
ENTRY_UNCOUNTED(cuEventDestroy_v2, i_cuEventDestroy_v2, (CUevent e), (e))
ENTRY_UNCOUNTED(cuStreamWaitEvent, i_cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int f), (s, e, f))
ENTRY_UNCOUNTED(cuCtxGetCurrent, i_cuCtxGetCurrent, (CUcontext *c), (c))
ENTRY_UNCOUNTED(cuCtxPushCurrent_v2, i_cuCtxPushCurrent_v2, (CUcontext c), (c))
ENTRY_UNCOUNTED(cuCtxPopCurrent_v2, i_cuCtxPopCurrent_v2, (CUcontext *c), (c))
ENTRY_UNCOUNTED(cuCtxCreate_v2, i_cuCtxCreate_v2, (CUcontext *c, unsigned int f, CUdevice d), (c, f, d))
ENTRY_UNCOUNTED(cuCtxDestroy_v2, i_cuCtxDestroy_v2, (CUcontext c), (c))
ENTRY_UNCOUNTED(cuDevicePrimaryCtxRetain, i_cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d), (c, d))
ENTRY_UNCOUNTED(cuDevicePrimaryCtxRelease, i_cuDevicePrimaryCtxRelease, (CUdevice d), (d))
ENTRY_UNCOUNTED(cuDevicePrimaryCtxRelease_v2, i_cuDevicePrimaryCtxRelease, (CUdevice d), (d))
ENTRY_UNCOUNTED(cuDevicePrimaryCtxReset, i_cuDevicePrimaryCtxReset, (CUdevice d), (d))
ENTRY_UNCOUNTED(cuDevicePrimaryCtxReset_v2, i_cuDevicePrimaryCtxReset, (CUdevice d), (d))
ENTRY_UNCOUNTED(cuDevicePrimaryCtxGetState, i_cuDevicePrimaryCtxGetState, (CUdevice d, unsigned int *f, int *a),
		(d, f, a))
ENTRY_UNCOUNTED(cuStreamGetCtx, i_cuStreamGetCtx, (CUstream s, CUcontext *c), (s, c))
ENTRY_UNCOUNTED(cuStreamBeginCapture, i_cuStreamBeginCapture, (CUstream s), (s))
ENTRY_UNCOUNTED(cuStreamBeginCapture_v2, i_cuStreamBeginCapture_v2, (CUstream s, int m), (s, m))
ENTRY_UNCOUNTED(cuStreamEndCapture, i_cuStreamEndCapture, (CUstream s, void **g), (s, g))
ENTRY_UNCOUNTED(cuStreamGetCaptureInfo, i_cuStreamGetCaptureInfo, (CUstream s, int *st, cuuint64_t *id), (s, st, id))
ENTRY_UNCOUNTED(cuStreamGetCaptureInfo_v2, i_cuStreamGetCaptureInfo_v2,
		(CUstream s, int *st, cuuint64_t *id, void **g, const void ***d, size_t *n), (s, st, id, g, d, n))
ENTRY_UNCOUNTED(cuThreadExchangeStreamCaptureMode, i_cuThreadExchangeStreamCaptureMode, (int *m), (m))
ENTRY_UNCOUNTED(cuMemGetInfo_v2, i_cuMemGetInfo_v2, (size_t *f, size_t *t), (f, t))
ENTRY_UNCOUNTED(cuMemGetAddressRange_v2, i_cuMemGetAddressRange_v2, (CUdeviceptr *b, size_t *s, CUdeviceptr p),
		(b, s, p))
ENTRY(cuMemAlloc_v2, i_cuMemAlloc_v2, (CUdeviceptr *p, size_t n), (p, n))
ENTRY(cuMemFree_v2, i_cuMemFree_v2, (CUdeviceptr p), (p))
ENTRY(cuMemAllocPitch_v2, i_cuMemAllocPitch_v2, (CUdeviceptr *p, size_t *pi, size_t w, size_t h, unsigned int e),
      (p, pi, w, h, e))
ENTRY(cuMemAllocManaged, i_cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned int f), (p, n, f))
ENTRY(cuMemAllocAsync, i_cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))
ENTRY(cuMemAllocAsync_ptsz, i_cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))
ENTRY(cuMemFreeAsync, i_cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
ENTRY(cuMemFreeAsync_ptsz, i_cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
ENTRY(cuMemAllocFromPoolAsync, i_cuMemAllocFromPoolAsync, (CUdeviceptr *p, size_t n, CUmemoryPool m, CUstream s),
      (p, n, m, s))
ENTRY(cuMemAllocFromPoolAsync_ptsz, i_cuMemAllocFromPoolAsync,
      (CUdeviceptr *p, size_t n, CUmemoryPool m, CUstream s), (p, n, m, s))
ENTRY(cuMemAllocHost_v2, i_cuMemAllocHost_v2, (void **p, size_t n), (p, n))
ENTRY(cuMemHostAlloc, i_cuMemHostAlloc, (void **p, size_t n, unsigned int f), (p, n, f))
ENTRY(cuMemFreeHost, i_cuMemFreeHost, (void *p), (p))
ENTRY(cuMemCreate, i_cuMemCreate,
      (CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *pr, unsigned long long f),
      (h, n, pr, f))
ENTRY(cuMemRelease, i_cuMemRelease, (CUmemGenericAllocationHandle h), (h))
ENTRY(cuMemMap, i_cuMemMap,
      (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h, unsigned long long f), (p, n, o, h, f))
ENTRY(cuMemUnmap, i_cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))
ENTRY(cuMemAddressReserve, i_cuMemAddressReserve,
      (CUdeviceptr *p, size_t n, size_t a, CUdeviceptr ad, unsigned long long f), (p, n, a, ad, f))
ENTRY(cuMemAddressFree, i_cuMemAddressFree, (CUdeviceptr p, size_t n), (p, n))
ENTRY(cuGetProcAddress, i_cuGetProcAddress, (const char *s, void **fn, int v, cuuint64_t f), (s, fn, v, f))
ENTRY(cuGetProcAddress_v2, i_cuGetProcAddress_v2, (const char *s, void **fn, int v, cuuint64_t f, void *st),
      (s, fn, v, f, st))

void fakecuda_events(long *recorded, long *stream_waits_, long *host_waits_) {
	int took = work_lock();
	*recorded = events_recorded;
	*stream_waits_ = stream_waits;
	*host_waits_ = host_waits;
	work_unlock(took);
}

/* Fake only: the runtime binds the calling thread to its device's context (as the real one does on
 * a thread's first call). */
void fakecuda_bind(void) {
	if (cur_ctx < 0)
		cur_ctx = 0;
}

long fakecuda_ctx_queries(void) { return __atomic_load_n(&ctx_queries, __ATOMIC_RELAXED); }

long fakecuda_barriers(void) {
	int took = work_lock();
	long n = barriers;
	work_unlock(took);
	return n;
}

void fakecuda_capture(int on) { __atomic_store_n(&capturing, on, __ATOMIC_RELAXED); }

long fakecuda_syncs(void) { return __atomic_load_n(&syncs, __ATOMIC_RELAXED); }

void fakecuda_calls(long *exported, long *via_proc_address) {
	*exported = calls_exported;
	*via_proc_address = calls_gpa;
}

#ifdef FAKE_PROC_EXPORTED
#define PROC(name) ((void *)name)
#else
#define PROC(name) ((void *)gpa_##name)
#endif

/* cuGetProcAddress: base name + the CUDA version the caller was built for + flags pick the function. */
static const struct {
	const char *name;
	int min_version; /* below it: not found (an older ABI the fake does not have) */
	void *fn, *ptsz, *old;
} proc_table[] = {
	{"cuInit", 2000, PROC(cuInit), NULL, NULL},
	{"cuCtxGetDevice", 2000, PROC(cuCtxGetDevice), NULL, NULL},
	{"cuDeviceGetCount", 2000, PROC(cuDeviceGetCount), NULL, NULL},
	{"cuCtxSetCurrent", 4000, PROC(cuCtxSetCurrent), NULL, NULL},
	{"cuCtxSynchronize", 2000, PROC(cuCtxSynchronize), NULL, NULL},
	{"cuStreamSynchronize", 2000, PROC(cuStreamSynchronize), NULL, NULL},
	{"cuStreamDestroy", 4000, PROC(cuStreamDestroy_v2), NULL, NULL},
	{"cuStreamCreate", 2000, PROC(cuStreamCreate), NULL, NULL},
	{"cuStreamCreateWithPriority", 5050, PROC(cuStreamCreateWithPriority), NULL, NULL},
	{"cuStreamIsCapturing", 10000, PROC(cuStreamIsCapturing), NULL, NULL},
	{"cuIpcGetMemHandle", 4010, PROC(cuIpcGetMemHandle), NULL, NULL},
	{"cuEventCreate", 2000, PROC(cuEventCreate), NULL, NULL},
	{"cuEventRecord", 2000, PROC(cuEventRecord), NULL, NULL},
	{"cuEventQuery", 2000, PROC(cuEventQuery), NULL, NULL},
	{"cuEventSynchronize", 2000, PROC(cuEventSynchronize), NULL, NULL},
	{"cuEventDestroy", 4000, PROC(cuEventDestroy_v2), NULL, NULL},
	{"cuStreamWaitEvent", 3020, PROC(cuStreamWaitEvent), NULL, NULL},
	{"cuCtxGetCurrent", 4000, PROC(cuCtxGetCurrent), NULL, NULL},
	{"cuCtxPushCurrent", 4000, PROC(cuCtxPushCurrent_v2), NULL, NULL},
	{"cuCtxPopCurrent", 4000, PROC(cuCtxPopCurrent_v2), NULL, NULL},
	{"cuCtxCreate", 3020, PROC(cuCtxCreate_v2), NULL, NULL},
	{"cuCtxDestroy", 4000, PROC(cuCtxDestroy_v2), NULL, NULL},
	{"cuDevicePrimaryCtxRetain", 7000, PROC(cuDevicePrimaryCtxRetain), NULL, NULL},
	{"cuDevicePrimaryCtxRelease", 11000, PROC(cuDevicePrimaryCtxRelease_v2), NULL, PROC(cuDevicePrimaryCtxRelease)},
	{"cuDevicePrimaryCtxReset", 11000, PROC(cuDevicePrimaryCtxReset_v2), NULL, PROC(cuDevicePrimaryCtxReset)},
	{"cuDevicePrimaryCtxGetState", 7000, PROC(cuDevicePrimaryCtxGetState), NULL, NULL},
	{"cuStreamGetCtx", 9020, PROC(cuStreamGetCtx), NULL, NULL},
	{"cuStreamBeginCapture", 10010, PROC(cuStreamBeginCapture_v2), NULL, PROC(cuStreamBeginCapture)},
	{"cuStreamEndCapture", 10000, PROC(cuStreamEndCapture), NULL, NULL},
	{"cuStreamGetCaptureInfo", 11030, PROC(cuStreamGetCaptureInfo_v2), NULL, PROC(cuStreamGetCaptureInfo)},
	{"cuThreadExchangeStreamCaptureMode", 10010, PROC(cuThreadExchangeStreamCaptureMode), NULL, NULL},
	{"cuMemGetInfo", 3020, PROC(cuMemGetInfo_v2), NULL, NULL},
	{"cuMemGetAddressRange", 3020, PROC(cuMemGetAddressRange_v2), NULL, NULL},
	{"cuMemAlloc", 3020, PROC(cuMemAlloc_v2), NULL, NULL},
	{"cuMemFree", 3020, PROC(cuMemFree_v2), NULL, NULL},
	{"cuMemAllocPitch", 3020, PROC(cuMemAllocPitch_v2), NULL, NULL},
	{"cuMemAllocManaged", 6000, PROC(cuMemAllocManaged), NULL, NULL},
	{"cuMemAllocAsync", 11020, PROC(cuMemAllocAsync), PROC(cuMemAllocAsync_ptsz), NULL},
	{"cuMemFreeAsync", 11020, PROC(cuMemFreeAsync), PROC(cuMemFreeAsync_ptsz), NULL},
	{"cuMemAllocFromPoolAsync", 11020, PROC(cuMemAllocFromPoolAsync),
	 PROC(cuMemAllocFromPoolAsync_ptsz), NULL},
	{"cuMemAllocHost", 3020, PROC(cuMemAllocHost_v2), NULL, NULL},
	{"cuMemHostAlloc", 2020, PROC(cuMemHostAlloc), NULL, NULL},
	{"cuMemFreeHost", 2000, PROC(cuMemFreeHost), NULL, NULL},
	{"cuMemCreate", 10020, PROC(cuMemCreate), NULL, NULL},
	{"cuMemRelease", 10020, PROC(cuMemRelease), NULL, NULL},
	{"cuMemMap", 10020, PROC(cuMemMap), NULL, NULL},
	{"cuMemUnmap", 10020, PROC(cuMemUnmap), NULL, NULL},
	{"cuMemAddressReserve", 10020, PROC(cuMemAddressReserve), NULL, NULL},
	{"cuMemAddressFree", 10020, PROC(cuMemAddressFree), NULL, NULL},
	{"cuGetProcAddress", 12000, PROC(cuGetProcAddress_v2), NULL, PROC(cuGetProcAddress)},
};

static CUresult i_cuGetProcAddress_v2(const char *sym, void **fn, int version, cuuint64_t flags, void *status) {
	if (status != NULL)
		*(int *)status = 0;
	if (sym == NULL || fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*fn = NULL;
	for (size_t i = 0; i < sizeof proc_table / sizeof proc_table[0]; i++) {
		if (strcmp(proc_table[i].name, sym) != 0)
			continue;
		if (version < proc_table[i].min_version)
			*fn = proc_table[i].old;
		else if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && proc_table[i].ptsz)
			*fn = proc_table[i].ptsz;
		else
			*fn = proc_table[i].fn;
		break;
	}
	if (*fn == NULL) {
		if (status != NULL)
			*(int *)status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
		return CUDA_ERROR_NOT_FOUND;
	}
	return CUDA_SUCCESS;
}
