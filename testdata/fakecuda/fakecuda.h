/*
 * Declarations of the fake CUDA runtime (libcudart.so) and driver (libcuda.so.1) used by allocscope's
 * tests. Same ABI as the real libraries for the functions the shim hooks; no NVIDIA header is needed.
 *
 * The fake hands out deterministic addresses: each kind of memory lives in a fixed region, each thread
 * bump-allocates in 64 MiB arenas of it (the first thread to allocate gets the region's base), sizes are
 * rounded up to 512 bytes, and a freed block is reused (last freed first) by the next allocation of the
 * same rounded size on the same thread (never, with FAKECUDA_FRESH=1: see driver.c).
 *
 * With FAKECUDA_DEVICES set, each context has its own device-memory region (device d's primary context at
 * FAKE_DEVICE_BASE + d * 64 GiB, contexts of cuCtxCreate_v2 at FAKE_CTX_BASE + j * 64 GiB); without it the
 * primary contexts share device 0's region (the layout older tests' addresses assume). A reset restarts
 * a region at its base.
 *
 * The fake models device work (driver.c's top comment has the whole model): fakecuda_launch issues a
 * kernel over a range on a stream, by an allocation lifetime ("owner"); work completes only through host
 * waits (device, stream, event synchronization, cuMemFree_v2 of a known block); streams are ordered by
 * vector clocks with CUDA's legacy-stream rules and events. Issuing work over a range that pending,
 * unordered work of another owner covers counts a hazard (one per pair of work items).
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#define FAKE_DEVICE_BASE 0x200000000000ull  /* device memory, 16 GiB */
#define FAKE_MANAGED_BASE 0x300000000000ull /* managed memory, 4 GiB */
#define FAKE_HOST_BASE 0x310000000000ull    /* page-locked host memory, 4 GiB */
#define FAKE_CTX_BASE 0x220000000000ull    /* regions of contexts made with cuCtxCreate_v2, 64 GiB apart */
#define FAKE_GRAPH_BASE 0x230000000000ull  /* graph allocations (cuMemAllocAsync while capturing), not mapped */
#define FAKE_VA_BASE 0x400000000000ull      /* cuMemAddressReserve ranges, 1 TiB, 2 MiB granules */
#define FAKE_HANDLE_BASE 0x1000ull          /* first cuMemCreate handle */
#define FAKE_ARENA (64ull << 20)
#define FAKE_GRAIN 512ull
#define FAKE_PITCH_ALIGN 512ull

typedef int cudaError_t;
typedef int CUresult;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUcontext;
typedef void *CUevent;
typedef void *CUmemoryPool;
typedef int CUdevice;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
struct cudaPitchedPtr { void *ptr; size_t pitch; size_t xsize; size_t ysize; };
struct cudaExtent { size_t width; size_t height; size_t depth; };
typedef struct {
	int type;
	int requestedHandleTypes;
	struct { int type; int id; } location;
	void *win32HandleMetaData;
	struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901
#define CUDA_ERROR_CAPTURED_EVENT 907
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define CU_STREAM_CAPTURE_MODE_RELAXED 2
#define cudaErrorMemoryAllocation 2
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
#define CU_MEM_LOCATION_TYPE_DEVICE 1

/* Runtime API (libcudart.so). */
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s);
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags);
cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags); /* cudaStreamNonBlocking = 1 */
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaIpcGetMemHandle(void *handle, void *p); /* handle: 64 bytes */
cudaError_t cudaDeviceReset(void); /* cuDevicePrimaryCtxReset of the current device */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, void **graph);
cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode);
cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags, void *status);
cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int version,
					     unsigned long long flags, void *status);

/* Driver API (libcuda.so.1). */
CUresult cuInit(unsigned int flags);
CUresult cuCtxGetDevice(CUdevice *d);
CUresult cuDeviceGetCount(int *n); /* FAKECUDA_DEVICES, default 4 */
CUresult cuCtxSetCurrent(CUcontext ctx); /* fake: ctx = (CUcontext)(device + 1) */
CUresult cuCtxSynchronize(void);
/* Streams are any handle; work on them completes only when the program (or the shim) waits for it:
 * an event recorded on a stream is not ready until cuCtxSynchronize, cuStreamSynchronize of its
 * stream or cuEventSynchronize of it. */
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
/* Handles 0x100000, 0x100100, ... of the fake's own making; the flags are kept by nobody. */
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority);
/* On CU_STREAM_LEGACY (0x1) while fakecuda_capture(1) holds: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (906); on
 * every other stream but 0x2 while fakecuda_capture(2) holds: status 1 (CU_STREAM_CAPTURE_STATUS_ACTIVE). */
CUresult cuStreamIsCapturing(CUstream s, int *status);
CUresult cuIpcGetMemHandle(void *handle, CUdeviceptr p); /* fake: writes p into the 64-byte handle */
CUresult cuEventCreate(CUevent *e, unsigned int flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventQuery(CUevent e);
CUresult cuEventSynchronize(CUevent e);
CUresult cuEventDestroy_v2(CUevent e);
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int elem);
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
CUresult cuMemAllocHost_v2(void **p, size_t n);
CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
		     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr p, size_t n);
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr p, size_t n);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *ctx);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice d); /* pushes it */
CUresult cuCtxDestroy_v2(CUcontext ctx); /* resets it (see driver.c) */
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d);
CUresult cuDevicePrimaryCtxRelease(CUdevice d); /* the last release resets the context */
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d);
CUresult cuDevicePrimaryCtxReset(CUdevice d);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice d);
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active);
CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx);
CUresult cuStreamBeginCapture(CUstream s);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, void **graph); /* 901 when invalidated; graph handle otherwise */
CUresult cuStreamGetCaptureInfo(CUstream s, int *status, cuuint64_t *id);
CUresult cuStreamGetCaptureInfo_v2(CUstream s, int *status, cuuint64_t *id, void **graph, const void ***deps,
				   size_t *ndeps);
CUresult cuThreadExchangeStreamCaptureMode(int *mode);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p); /* else 500 */
CUresult cuGetProcAddress(const char *sym, void **fn, int version, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *sym, void **fn, int version, cuuint64_t flags, void *status);
/* Fake only: how many driver calls this thread made through exported symbols and through pointers
 * handed out by cuGetProcAddress (distinct functions, so a test sees which one a wrapper called). */
void fakecuda_calls(long *exported, long *via_proc_address);
/* Fake only: how many times any thread synchronized the device (cuCtxSynchronize, cudaDeviceSynchronize). */
long fakecuda_syncs(void);
/* Fake only: bind the calling thread to device 0's context if it has none (the runtime does). */
void fakecuda_bind(void);
/* Fake only: events recorded, and waits for an event not yet ready (a stream made to wait with
 * cuStreamWaitEvent, the host with cuEventSynchronize), all threads. */
void fakecuda_events(long *recorded, long *stream_waits, long *host_waits);
/* Fake only: events recorded on the legacy stream (CU_STREAM_LEGACY, 0x1), which fakecuda_events does not
 * count, all threads. */
long fakecuda_barriers(void);
/* Fake only: cuCtxGetDevice calls, all threads. */
long fakecuda_ctx_queries(void);
/* Fake only: whether a stream captures a graph: 1, a blocking one, as cuStreamIsCapturing(CU_STREAM_LEGACY)
 * tells; 2, every stream other than the legacy and per-thread ones (status CU_STREAM_CAPTURE_STATUS_ACTIVE); 0, none. */
void fakecuda_capture(int on);

/* Fake only, the work model (driver.c's top comment): device work on stream s over [addr, addr + size)
 * by allocation lifetime owner (a number the program gives each allocation it gets). */
void fakecuda_launch(CUstream s, uint64_t addr, uint64_t size, uint64_t owner);
/* Fake only: the host touches [addr, addr + size) now (a synchronous copy: after all earlier work of the
 * legacy stream, then the host waits). */
void fakecuda_host_use(uint64_t addr, uint64_t size, uint64_t owner);
/* Fake only: hazards counted so far (one per pair of work items: new work over a range that pending,
 * unordered work of another owner covers). FAKECUDA_HAZARD_LOG=1 prints each to stderr. */
long fakecuda_hazards(void);
/* Fake only: events of one context recorded on a stream of another (CUDA_ERROR_INVALID_HANDLE). */
long fakecuda_misuses(void);
/* Fake only: frees of addresses no allocation of the fake starts at, apart from those inside a live
 * allocation (fakecuda_interior_frees). */
long fakecuda_unknown_frees(void);
long fakecuda_interior_frees(void);
/* Fake only: graph allocations and frees (cuMemAllocAsync / cuMemFreeAsync on capturing streams). */
void fakecuda_graph_allocs(long *allocs, long *frees);
/* Fake only: event records and stream waits on capturing streams. */
long fakecuda_capture_intrusions(void);
/* Fake only: device synchronizations now inside their FAKECUDA_SYNC_DELAY_US (snapshot taken, work not
 * yet completed), so a test can issue work a running synchronization does not wait for. */
int fakecuda_syncs_waiting(void);
/* Fake only: the device whose region holds addr, -1 if none. */
int fakecuda_device_of(uint64_t addr);

typedef CUresult (*PFN_cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, void *);
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char *, void **, int, cuuint64_t);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr *, size_t);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr);
typedef CUresult (*PFN_cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*PFN_cuMemFreeAsync)(CUdeviceptr, CUstream);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
				    unsigned long long);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext);
typedef void (*PFN_fakecuda_calls)(long *, long *);

#endif
