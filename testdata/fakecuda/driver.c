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
 *   FAKECUDA_DEVICES=N     cuDeviceGetCount says N (default 4).
 *   FAKECUDA_RAISE=SIG:K   raise(SIG) from inside the K-th cuMemAlloc_v2 call of the process (K >= 1,
 *                          exported and proc-address calls counted together), once.
 *   FAKECUDA_DEVICE_BYTES=N  device allocations fail with CUDA_ERROR_OUT_OF_MEMORY when the device
 *                          blocks allocated (each rounded up to 512 bytes) would exceed N bytes.
 * A signal handler may allocate and free while the interrupted thread is inside the allocator: the
 * handler's calls use a second per-thread cache.
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FAKE_ERRNO 0x5eed
#define FREE_LIST 32
#define ONE_TIB (1ull << 40)

struct region {
	const char *name;
	uint64_t base, size;
	int prot;
	uint64_t *meta; /* requested size + 1 per 512-byte grain; 0 = not allocated */
	uint64_t next;  /* next free arena offset */
	int ok;
};

static struct region regions[3] = {
	{"device", FAKE_DEVICE_BASE, 16ull << 30, PROT_NONE, NULL, 0, 0},
	{"managed", FAKE_MANAGED_BASE, 4ull << 30, PROT_READ | PROT_WRITE, NULL, 0, 0},
	{"host", FAKE_HOST_BASE, 4ull << 30, PROT_READ | PROT_WRITE, NULL, 0, 0},
};
enum { R_DEVICE, R_MANAGED, R_HOST };

struct thread_cache {
	uint64_t cur, end;
	int nfree;
	uint64_t free_addr[FREE_LIST], free_size[FREE_LIST];
};
static __thread struct thread_cache caches[2][3]; /* [nested in a signal handler][region] */
static __thread int in_region;
static int fresh_addresses;
static int lazy_context;            /* FAKECUDA_LAZY_CONTEXT=1: a thread has no context until bound */
static int device_count = 4;        /* FAKECUDA_DEVICES */
static long ctx_queries;            /* cuCtxGetDevice calls, all threads */
static __thread int context_bound; /* cuCtxSetCurrent or a runtime call bound this thread */
static int raise_signal;
static long raise_at, alloc_calls;
static uint64_t device_capacity; /* FAKECUDA_DEVICE_BYTES: device bytes held at most (0: the region) */
static uint64_t device_held;     /* device bytes allocated now, each rounded to the grain */
static __thread int current_device = 0;
static __thread long calls_exported, calls_gpa;

static uint64_t va_next;
static uint64_t handle_next = FAKE_HANDLE_BASE;
#define MAX_HANDLES 65536
static uint64_t handle_size[MAX_HANDLES];

__attribute__((constructor)) static void fake_init(void) {
	const char *v = getenv("FAKECUDA_FRESH");
	fresh_addresses = v != NULL && strcmp(v, "1") == 0;
	v = getenv("FAKECUDA_LAZY_CONTEXT");
	lazy_context = v != NULL && strcmp(v, "1") == 0;
	v = getenv("FAKECUDA_DEVICES");
	if (v != NULL && atoi(v) > 0)
		device_count = atoi(v);
	v = getenv("FAKECUDA_DEVICE_BYTES");
	if (v != NULL)
		device_capacity = strtoull(v, NULL, 10);
	v = getenv("FAKECUDA_RAISE");
	if (v != NULL && sscanf(v, "%d:%ld", &raise_signal, &raise_at) != 2)
		raise_signal = 0;
	for (int i = 0; i < 3; i++) {
		struct region *r = &regions[i];
		void *p = mmap((void *)r->base, r->size, r->prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
			       MAP_FIXED_NOREPLACE, -1, 0);
		size_t meta_bytes = r->size / FAKE_GRAIN * sizeof(uint64_t);
		void *m = mmap(NULL, meta_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
		if (p != (void *)r->base || m == MAP_FAILED) {
			fprintf(stderr, "fakecuda: cannot map the %s region at %#llx\n", r->name,
				(unsigned long long)r->base);
			continue;
		}
		r->meta = (uint64_t *)m;
		r->ok = 1;
	}
	void *va = mmap((void *)FAKE_VA_BASE, 1ull << 40, PROT_NONE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (va != (void *)FAKE_VA_BASE)
		fprintf(stderr, "fakecuda: cannot map the VA region\n");
}

/* Entering and leaving the allocator: a signal handler that allocates meanwhile gets the nested cache. */
static struct thread_cache *cache_enter(int ri) {
	int depth = in_region++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return &caches[depth > 0][ri];
}
static void cache_leave(void) {
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	in_region--;
}

static CUresult region_alloc_in(int ri, struct thread_cache *c, CUdeviceptr *out, size_t n) {
	struct region *r = &regions[ri];
	if (n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > ONE_TIB || !r->ok)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t rounded = (n + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1);
	uint64_t addr = 0;
	if (ri == R_DEVICE && device_capacity > 0 &&
	    __atomic_load_n(&device_held, __ATOMIC_RELAXED) + rounded > device_capacity)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = fresh_addresses && ri == R_DEVICE ? -1 : c->nfree - 1; i >= 0; i--) {
		if (c->free_size[i] == rounded) {
			addr = c->free_addr[i];
			c->nfree--;
			c->free_addr[i] = c->free_addr[c->nfree];
			c->free_size[i] = c->free_size[c->nfree];
			break;
		}
	}
	if (addr == 0) {
		if (c->cur + rounded > c->end) {
			uint64_t len = rounded > FAKE_ARENA ? (rounded + FAKE_ARENA - 1) & ~(FAKE_ARENA - 1) : FAKE_ARENA;
			uint64_t next = __atomic_load_n(&r->next, __ATOMIC_RELAXED), off;
			do { /* a request that does not fit takes nothing: later ones may still fit */
				off = next;
				if (fresh_addresses && ri == R_DEVICE && len == FAKE_ARENA)
					off %= r->size; /* wrap: the region is a multiple of the arena */
				if (off + len > r->size)
					return CUDA_ERROR_OUT_OF_MEMORY;
			} while (!__atomic_compare_exchange_n(&r->next, &next, next + len, 0, __ATOMIC_RELAXED,
							      __ATOMIC_RELAXED));
			c->cur = r->base + off;
			c->end = c->cur + len;
		}
		addr = c->cur;
		c->cur += rounded;
	}
	__atomic_store_n(&r->meta[(addr - r->base) / FAKE_GRAIN], (uint64_t)n + 1, __ATOMIC_RELEASE);
	if (ri == R_DEVICE)
		__atomic_add_fetch(&device_held, rounded, __ATOMIC_RELAXED);
	*out = addr;
	return CUDA_SUCCESS;
}

static CUresult region_alloc(int ri, CUdeviceptr *out, size_t n) {
	CUresult res = region_alloc_in(ri, cache_enter(ri), out, n);
	cache_leave();
	return res;
}

static CUresult region_free_in(int ri, struct thread_cache *c, uint64_t addr) {
	struct region *r = &regions[ri];
	if (addr < r->base || addr >= r->base + r->size || (addr - r->base) % FAKE_GRAIN != 0 || !r->ok)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t v = __atomic_exchange_n(&r->meta[(addr - r->base) / FAKE_GRAIN], 0, __ATOMIC_ACQ_REL);
	if (v == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (ri == R_DEVICE)
		__atomic_sub_fetch(&device_held, ((v - 1) + FAKE_GRAIN - 1) & ~(FAKE_GRAIN - 1), __ATOMIC_RELAXED);
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
	for (int i = 0; i < 3; i++)
		if (addr >= regions[i].base && addr < regions[i].base + regions[i].size)
			return i;
	return -1;
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
	if (lazy_context && !context_bound)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	*d = current_device;
	return CUDA_SUCCESS;
}
static long syncs; /* cuCtxSynchronize calls, all threads */
static void events_complete(int all, CUstream s);
static CUresult i_cuCtxSynchronize(void) {
	__atomic_fetch_add(&syncs, 1, __ATOMIC_RELAXED);
	events_complete(1, NULL);
	return CUDA_SUCCESS;
}

/* Events: a table of handles (index + 1); an event recorded on a stream becomes ready when the device
 * or its stream is synchronized. */
#define MAX_EVENTS 65536
static struct { CUstream stream; int used, recorded, ready; } events[MAX_EVENTS];
static long event_next, events_recorded, stream_waits, host_waits;
static pthread_mutex_t events_mu = PTHREAD_MUTEX_INITIALIZER;

static int event_index(CUevent e) {
	uintptr_t i = (uintptr_t)e;
	return i >= 1 && i <= MAX_EVENTS && events[i - 1].used ? (int)(i - 1) : -1;
}
static void events_complete(int all, CUstream s) {
	pthread_mutex_lock(&events_mu);
	for (long i = 0; i < event_next && i < MAX_EVENTS; i++)
		if (events[i].recorded && (all || events[i].stream == s))
			events[i].ready = 1;
	pthread_mutex_unlock(&events_mu);
}
static CUresult i_cuStreamSynchronize(CUstream s) {
	events_complete(0, s);
	return CUDA_SUCCESS;
}
static CUresult i_cuStreamDestroy_v2(CUstream s) { (void)s; return CUDA_SUCCESS; }
static long streams_made;
static int capturing; /* fakecuda_capture: 1, a blocking stream captures; 2, every other stream does */
static CUresult i_cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority) {
	(void)flags, (void)priority;
	if (s == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*s = (CUstream)(uintptr_t)(0x100000 + 0x100 * __atomic_fetch_add(&streams_made, 1, __ATOMIC_RELAXED));
	return CUDA_SUCCESS;
}
static CUresult i_cuStreamCreate(CUstream *s, unsigned int flags) { return i_cuStreamCreateWithPriority(s, flags, 0); }
static CUresult i_cuStreamIsCapturing(CUstream s, int *status) {
	if (status == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int c = __atomic_load_n(&capturing, __ATOMIC_RELAXED);
	*status = c == 2 && s != (CUstream)0x1 && s != (CUstream)0x2 && s != NULL; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
	return s == (CUstream)0x1 && c == 1 ? 906 : CUDA_SUCCESS;
}
static CUresult i_cuIpcGetMemHandle(void *h, CUdeviceptr p) {
	if (h == NULL || which_region(p) != R_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	memset(h, 0, 64);
	memcpy(h, &p, sizeof p);
	return CUDA_SUCCESS;
}
static CUresult i_cuEventCreate(CUevent *e, unsigned int flags) {
	(void)flags;
	if (e == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&events_mu);
	long i = event_next < MAX_EVENTS ? event_next++ : -1;
	if (i >= 0)
		events[i].used = 1;
	pthread_mutex_unlock(&events_mu);
	if (i < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (CUevent)(uintptr_t)(i + 1);
	return CUDA_SUCCESS;
}
static long barriers; /* events recorded on the legacy stream */
static CUresult i_cuEventRecord(CUevent e, CUstream s) {
	pthread_mutex_lock(&events_mu);
	int i = event_index(e);
	if (i >= 0) {
		events[i].stream = s;
		events[i].recorded = 1;
		events[i].ready = 0;
		if (s == (CUstream)0x1)
			barriers++;
		else
			events_recorded++;
	}
	pthread_mutex_unlock(&events_mu);
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult i_cuEventQuery(CUevent e) {
	pthread_mutex_lock(&events_mu);
	int i = event_index(e);
	CUresult r = i < 0 ? CUDA_ERROR_INVALID_VALUE
			   : (!events[i].recorded || events[i].ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
	pthread_mutex_unlock(&events_mu);
	return r;
}
static CUresult i_cuEventSynchronize(CUevent e) {
	pthread_mutex_lock(&events_mu);
	int i = event_index(e);
	if (i >= 0 && events[i].recorded && !events[i].ready) {
		events[i].ready = 1;
		host_waits++;
	}
	pthread_mutex_unlock(&events_mu);
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult i_cuEventDestroy_v2(CUevent e) {
	pthread_mutex_lock(&events_mu);
	int i = event_index(e);
	if (i >= 0)
		events[i].used = 0;
	pthread_mutex_unlock(&events_mu);
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult i_cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
	(void)s, (void)flags;
	pthread_mutex_lock(&events_mu);
	int i = event_index(e);
	if (i >= 0 && events[i].recorded && !events[i].ready)
		stream_waits++;
	pthread_mutex_unlock(&events_mu);
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult i_cuCtxSetCurrent(CUcontext ctx) {
	context_bound = ctx != NULL;
	current_device = ctx == NULL ? 0 : (int)((intptr_t)ctx - 1);
	return CUDA_SUCCESS;
}
static CUresult i_cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	if (raise_signal != 0 && __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED) == raise_at)
		raise(raise_signal);
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return region_alloc(R_DEVICE, p, n);
}
static CUresult i_cuMemFree_v2(CUdeviceptr p) {
	int ri = which_region(p);
	if (ri == R_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return region_free(ri < 0 ? R_DEVICE : ri, p);
}
static CUresult i_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int elem) {
	(void)elem;
	if (p == NULL || pitch == NULL || w == 0 || h == 0)
		return CUDA_ERROR_INVALID_VALUE;
	size_t pi = (w + FAKE_PITCH_ALIGN - 1) & ~(FAKE_PITCH_ALIGN - 1);
	CUresult r = region_alloc(R_DEVICE, p, pi * h);
	if (r == CUDA_SUCCESS)
		*pitch = pi;
	return r;
}
static CUresult i_cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) {
	(void)flags;
	return p == NULL ? CUDA_ERROR_INVALID_VALUE : region_alloc(R_MANAGED, p, n);
}
static CUresult i_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return i_cuMemAlloc_v2(p, n); }
static CUresult i_cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return i_cuMemFree_v2(p); }
static CUresult i_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
	(void)pool;
	(void)s;
	return i_cuMemAlloc_v2(p, n);
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
	pthread_mutex_lock(&events_mu);
	*recorded = events_recorded;
	*stream_waits_ = stream_waits;
	*host_waits_ = host_waits;
	pthread_mutex_unlock(&events_mu);
}

/* Fake only: the runtime binds the calling thread to its device's context (as the real one does on
 * a thread's first call). */
void fakecuda_bind(void) {
	if (!context_bound) {
		context_bound = 1;
		current_device = 0;
	}
}

long fakecuda_ctx_queries(void) { return __atomic_load_n(&ctx_queries, __ATOMIC_RELAXED); }

long fakecuda_barriers(void) {
	pthread_mutex_lock(&events_mu);
	long n = barriers;
	pthread_mutex_unlock(&events_mu);
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
