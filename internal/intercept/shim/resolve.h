/*
 * Symbol resolution: variants, paths, wrappers, and the dlsym override.
 *
 * How calls are seen:
 *   - plain symbol binding: the shim exports every hooked name; the real one comes from dlsym(RTLD_NEXT)
 *     (so another interposer loaded after the shim is called in turn), else from an object loaded before
 *     the shim;
 *   - dlsym on a dlopen'ed libcuda / libcudart: the shim overrides dlsym and hands back its wrappers;
 *   - cuGetProcAddress / cuGetProcAddress_v2 (static cudart), including the lookup of "cuGetProcAddress";
 *   - cudaGetDriverEntryPoint / cudaGetDriverEntryPointByVersion.
 * Each way of resolving a function (a "path") has its own wrapper and its own slot for the real
 * pointer, so a wrapper always calls the function the program would have called without the shim.
 * If a path hands out a second, different real pointer for a function, that one is returned unwrapped.
 * A resolver that hands out one of the shim's own exports (a driver linked without -Bsymbolic takes
 * its functions' addresses through the GOT, which binds them to the preloaded shim) meant its own
 * definition: that is looked up in the resolver's object, never through RTLD_NEXT from the shim.
 */
#ifndef ALLOCSCOPE_RESOLVE_H
#define ALLOCSCOPE_RESOLVE_H

#include "common.h"

enum { P_NEXT, P_DLSYM, P_GPA, P_EP, NPATHS };

/* Every interposed entry point. R: runtime (paths NEXT, DLSYM), D: driver (all four paths). */
#define VARIANTS(R, D)                                                                                   \
	R(cudaMalloc, cudaError_t, (void **p, size_t n), (p, n))                                         \
	R(cudaFree, cudaError_t, (void *p), (p))                                                         \
	R(cudaMallocAsync, cudaError_t, (void **p, size_t n, cudaStream_t s), (p, n, s))                 \
	R(cudaFreeAsync, cudaError_t, (void *p, cudaStream_t s), (p, s))                                 \
	R(cudaMallocFromPoolAsync, cudaError_t, (void **p, size_t n, cudaMemPool_t m, cudaStream_t s),   \
	  (p, n, m, s))                                                                                  \
	R(cudaMallocManaged, cudaError_t, (void **p, size_t n, unsigned fl), (p, n, fl))                 \
	R(cudaMallocPitch, cudaError_t, (void **p, size_t *pi, size_t w, size_t h), (p, pi, w, h))       \
	R(cudaMalloc3D, cudaError_t, (struct cudaPitchedPtr * p, struct cudaExtent e), (p, e))           \
	R(cudaMallocHost, cudaError_t, (void **p, size_t n), (p, n))                                     \
	R(cudaHostAlloc, cudaError_t, (void **p, size_t n, unsigned fl), (p, n, fl))                     \
	R(cudaFreeHost, cudaError_t, (void *p), (p))                                                     \
	R(cudaGetDriverEntryPoint, cudaError_t, (const char *sym, void **fp, unsigned long long fl, void *st), \
	  (sym, fp, fl, st))                                                                             \
	R(cudaGetDriverEntryPointByVersion, cudaError_t,                                                 \
	  (const char *sym, void **fp, unsigned int v, unsigned long long fl, void *st), (sym, fp, v, fl, st)) \
	R(cudaDeviceSynchronize, cudaError_t, (void), (0))                                               \
	R(cudaStreamDestroy, cudaError_t, (cudaStream_t s), (s))                                         \
	R(cudaIpcGetMemHandle, cudaError_t, (void *h, void *p), (h, p))                                  \
	R(cudaDeviceReset, cudaError_t, (void), (0))                                                     \
	D(cuMemAlloc_v2, cuMemAlloc_v2, (CUdeviceptr * p, size_t n), (p, n))                             \
	D(cuMemFree_v2, cuMemFree_v2, (CUdeviceptr p), (p))                                              \
	D(cuMemAllocPitch_v2, cuMemAllocPitch_v2, (CUdeviceptr * p, size_t *pi, size_t w, size_t h, unsigned e), \
	  (p, pi, w, h, e))                                                                              \
	D(cuMemAllocManaged, cuMemAllocManaged, (CUdeviceptr * p, size_t n, unsigned fl), (p, n, fl))    \
	D(cuMemAllocAsync, cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))          \
	D(cuMemAllocAsync_ptsz, cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))     \
	D(cuMemFreeAsync, cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                           \
	D(cuMemFreeAsync_ptsz, cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                      \
	D(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, (CUdeviceptr * p, size_t n, CUmemoryPool m, CUstream s), \
	  (p, n, m, s))                                                                                  \
	D(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync,                                         \
	  (CUdeviceptr * p, size_t n, CUmemoryPool m, CUstream s), (p, n, m, s))                         \
	D(cuMemAllocHost_v2, cuMemAllocHost_v2, (void **p, size_t n), (p, n))                            \
	D(cuMemHostAlloc, cuMemHostAlloc, (void **p, size_t n, unsigned fl), (p, n, fl))                 \
	D(cuMemFreeHost, cuMemFreeHost, (void *p), (p))                                                  \
	D(cuMemCreate, cuMemCreate, (CUmemGenericAllocationHandle * h, size_t n, const void *pr, unsigned long long fl), \
	  (h, n, pr, fl))                                                                                \
	D(cuMemRelease, cuMemRelease, (CUmemGenericAllocationHandle h), (h))                             \
	D(cuMemMap, cuMemMap, (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h, unsigned long long fl), \
	  (p, n, o, h, fl))                                                                              \
	D(cuMemUnmap, cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))                                     \
	D(cuMemAddressReserve, cuMemAddressReserve,                                                      \
	  (CUdeviceptr * p, size_t n, size_t al, CUdeviceptr ad, unsigned long long fl), (p, n, al, ad, fl)) \
	D(cuMemAddressFree, cuMemAddressFree, (CUdeviceptr p, size_t n), (p, n))                         \
	D(cuCtxSynchronize, cuCtxSynchronize, (void), (0))                                               \
	D(cuInit, cuInit, (unsigned fl), (fl))                                                           \
	D(cuStreamDestroy_v2, cuStreamDestroy_v2, (CUstream s), (s))                                     \
	D(cuStreamCreate, cuStreamCreate, (CUstream * s, unsigned fl), (s, fl))                          \
	D(cuStreamCreateWithPriority, cuStreamCreateWithPriority, (CUstream * s, unsigned fl, int pr),   \
	  (s, fl, pr))                                                                                   \
	D(cuGreenCtxStreamCreate, cuGreenCtxStreamCreate, (CUstream * s, void *g, unsigned fl, int pr),  \
	  (s, g, fl, pr))                                                                                \
	D(cuIpcGetMemHandle, cuIpcGetMemHandle, (void *h, CUdeviceptr p), (h, p))                        \
	D(cuCtxSetCurrent, cuCtxSetCurrent, (CUcontext c), (c))                                          \
	D(cuCtxPushCurrent_v2, cuCtxPushCurrent_v2, (CUcontext c), (c))                                  \
	D(cuCtxCreate_v2, cuCtxCreate_v2, (CUcontext * c, unsigned fl, CUdevice d), (c, fl, d))          \
	D(cuCtxCreate_v3, cuCtxCreate_v3, (CUcontext * c, void *p, int n, unsigned fl, CUdevice d), (c, p, n, fl, d)) \
	D(cuCtxCreate_v4, cuCtxCreate_v4, (CUcontext * c, void *p, unsigned fl, CUdevice d), (c, p, fl, d)) \
	D(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2, (CUdeviceptr * b, size_t *n, CUdeviceptr p), (b, n, p)) \
	D(cuStreamBeginCapture, cuStreamBeginCapture, (CUstream s), (s))                                 \
	D(cuStreamBeginCapture_ptsz, cuStreamBeginCapture, (CUstream s), (s))                            \
	D(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2, (CUstream s, int m), (s, m))                 \
	D(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2, (CUstream s, int m), (s, m))            \
	D(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph,                                      \
	  (CUstream s, void *g, const void *dp, const void *dd, size_t n, int m), (s, g, dp, dd, n, m))  \
	D(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph,                                 \
	  (CUstream s, void *g, const void *dp, const void *dd, size_t n, int m), (s, g, dp, dd, n, m))  \
	D(cuStreamEndCapture, cuStreamEndCapture, (CUstream s, void **g), (s, g))                        \
	D(cuStreamEndCapture_ptsz, cuStreamEndCapture, (CUstream s, void **g), (s, g))                   \
	D(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, (int *m), (m))           \
	D(cuCtxPopCurrent_v2, cuCtxPopCurrent_v2, (CUcontext * c), (c))                                  \
	D(cuCtxDestroy_v2, cuCtxDestroy_v2, (CUcontext c), (c))                                          \
	D(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, (CUdevice d), (d))                       \
	D(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, (CUdevice d), (d))                    \
	D(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, (CUdevice d), (d))                           \
	D(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, (CUdevice d), (d))                        \
	D(cuGetProcAddress, cuGetProcAddress, (const char *sym, void **fp, int v, unsigned long long fl), \
	  (sym, fp, v, fl))                                                                              \
	D(cuGetProcAddress_v2, cuGetProcAddress_v2,                                                      \
	  (const char *sym, void **fp, int v, unsigned long long fl, void *st), (sym, fp, v, fl, st))

enum {
#define V_R(name, ...) V_##name,
#define V_D(name, ...) V_##name,
	VARIANTS(V_R, V_D)
#undef V_R
#undef V_D
	NVARIANTS
};

/* g_real holds the real function behind each (variant, path), g_wrapper the shim's wrapper of each
 * (hooks.c makes them). */
extern void *g_real[NVARIANTS][NPATHS];
extern void *const g_wrapper[NVARIANTS][NPATHS];

/* real_next returns the definition after the shim of variant v (looked up until found), or NULL. */
void *real_next(int v);

/* resolve_versioned turns what the real resolver (the function at resolver) handed out for sym into
 * the wrapper of path. */
void *resolve_versioned(const char *sym, long version, unsigned long long flags, void *real, int path,
			const void *resolver);

#endif
