/*
 * Definitions every part of the shim shares: the CUDA types it needs (ABI only, no NVIDIA header),
 * the table of hooked functions, the raw log's record, and small helpers.
 */
#ifndef ALLOCSCOPE_COMMON_H
#define ALLOCSCOPE_COMMON_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define TLS __thread __attribute__((tls_model("initial-exec")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Orders this thread's plain stores against a signal handler running on the same thread. */
#define SIGNAL_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

/* ---- CUDA types (ABI only) ---------------------------------------------------------------------- */

typedef int cudaError_t;
typedef int CUresult;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUdevice;
typedef void *CUcontext;
struct cudaPitchedPtr { void *ptr; size_t pitch; size_t xsize; size_t ysize; };
struct cudaExtent { size_t width; size_t height; size_t depth; };
/* The head of CUmemAllocationProp: type, requestedHandleTypes, location {type, id}. */
struct memAllocPropHead { int type; int requestedHandleTypes; int locationType; int locationId; };
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_UNKNOWN_RUNTIME 999
#define PER_THREAD_DEFAULT_STREAM_FLAG 2ull /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

/* ---- function ids: the table rawlog.go mirrors (TestFunctionTableMatchesShim checks it) ---------- */

/* FUNCTION_TABLE_BEGIN  id name op memory layer */
#define FUNCTIONS(X)                                                              \
	X(1, cudaMalloc, alloc, device, runtime)                                  \
	X(2, cudaFree, free, device, runtime)                                     \
	X(3, cudaMallocAsync, alloc, device, runtime)                             \
	X(4, cudaFreeAsync, free, device, runtime)                                \
	X(5, cudaMallocFromPoolAsync, alloc, device, runtime)                     \
	X(6, cudaMallocManaged, alloc, managed, runtime)                          \
	X(7, cudaMallocPitch, alloc, device, runtime)                             \
	X(8, cudaMalloc3D, alloc, device, runtime)                                \
	X(9, cudaMallocHost, alloc, host, runtime)                                \
	X(10, cudaHostAlloc, alloc, host, runtime)                                \
	X(11, cudaFreeHost, free, host, runtime)                                  \
	X(12, cuMemAlloc_v2, alloc, device, driver)                               \
	X(13, cuMemFree_v2, free, device, driver)                                 \
	X(14, cuMemAllocPitch_v2, alloc, device, driver)                          \
	X(15, cuMemAllocManaged, alloc, managed, driver)                          \
	X(16, cuMemAllocAsync, alloc, device, driver)                             \
	X(17, cuMemAllocAsync_ptsz, alloc, device, driver)                        \
	X(18, cuMemFreeAsync, free, device, driver)                               \
	X(19, cuMemFreeAsync_ptsz, free, device, driver)                          \
	X(20, cuMemAllocFromPoolAsync, alloc, device, driver)                     \
	X(21, cuMemAllocFromPoolAsync_ptsz, alloc, device, driver)                \
	X(22, cuMemAllocHost_v2, alloc, host, driver)                             \
	X(23, cuMemHostAlloc, alloc, host, driver)                                \
	X(24, cuMemFreeHost, free, host, driver)                                  \
	X(25, cuMemCreate, create, virtual, driver)                               \
	X(26, cuMemRelease, release, virtual, driver)                             \
	X(27, cuMemMap, map, virtual, driver)                                     \
	X(28, cuMemUnmap, unmap, virtual, driver)                                 \
	X(29, cuMemAddressReserve, reserve, virtual, driver)                      \
	X(30, cuMemAddressFree, unreserve, virtual, driver)
/* FUNCTION_TABLE_END */

enum {
#define X(id, name, op, mem, layer) FID_##name = id,
	FUNCTIONS(X)
#undef X
	FID_COUNT
};

/* The first function id of the driver layer: ids below it are runtime calls. */
#define FID_FIRST_DRIVER FID_cuMemAlloc_v2

/* ---- one record of the raw log (docs/DESIGN.md) --------------------------------------------------- */

#define RECORD_SIZE 64

struct record {
	uint64_t seq;
	int64_t time_ns;
	int64_t duration_ns;
	uint64_t address;
	uint64_t size;
	uint64_t stream;
	uint64_t callsite;
	uint32_t tid;
	uint16_t result;
	int8_t device;
	uint8_t function; /* never 0 in a written record */
};
_Static_assert(sizeof(struct record) == RECORD_SIZE, "record size");

/* ---- small helpers -------------------------------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);

/* The dlsym after the shim (resolve.h). */
HIDDEN dlsym_fn get_real_dlsym(void);

/* shim_dlclose is the real dlclose, for the shim's own handles: the exported dlclose (shim.c)
 * first saves the process's mappings when something was loaded since they were last saved. */
static inline int shim_dlclose(void *h) {
	typedef int (*dlclose_fn)(void *);
	static dlclose_fn real;
	dlclose_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		dlsym_fn rd = get_real_dlsym();
		f = rd != NULL ? (dlclose_fn)rd(RTLD_NEXT, "dlclose") : NULL;
		if (f == NULL)
			return -1;
		__atomic_store_n(&real, f, __ATOMIC_RELEASE);
	}
	return f(h);
}

static inline int64_t now_ns(clockid_t clk) {
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* say writes one line to stderr with write(2): no stdio lock, usable anywhere. */
static inline void say(const char *line, size_t n) {
	while (n > 0) {
		ssize_t w = write(2, line, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		line += w;
		n -= (size_t)w;
	}
}

#endif
