/* hooks.c: the shim's wrappers, one per interposed entry point and way of resolving it (resolve.h),
 * each running its hook body (hooks.h). */
#include "hooks.h"
#include "resolve.h"

TLS int t_depth;
TLS unsigned char t_frame[MAX_DEPTH];
struct addr_map g_addrs;   /* device/host/managed addresses */
struct addr_map g_handles; /* cuMemCreate handles */

/* Map a body's first "fid" argument: the ptsz variants share a body with their own function id; the
 * resolvers get the path instead. */
#define FID_ARG_cudaMalloc FID_cudaMalloc
#define FID_ARG_cudaFree FID_cudaFree
#define FID_ARG_cudaMallocAsync FID_cudaMallocAsync
#define FID_ARG_cudaFreeAsync FID_cudaFreeAsync
#define FID_ARG_cudaMallocFromPoolAsync FID_cudaMallocFromPoolAsync
#define FID_ARG_cudaMallocManaged FID_cudaMallocManaged
#define FID_ARG_cudaMallocPitch FID_cudaMallocPitch
#define FID_ARG_cudaMalloc3D FID_cudaMalloc3D
#define FID_ARG_cudaMallocHost FID_cudaMallocHost
#define FID_ARG_cudaHostAlloc FID_cudaHostAlloc
#define FID_ARG_cudaFreeHost FID_cudaFreeHost
#define FID_ARG_cudaGetDriverEntryPoint 0
#define FID_ARG_cudaGetDriverEntryPointByVersion 0
#define FID_ARG_cudaDeviceSynchronize 0
#define FID_ARG_cuCtxSynchronize 0
#define FID_ARG_cuInit 0
#define FID_ARG_cudaStreamDestroy 0
#define FID_ARG_cuStreamDestroy_v2 0
#define FID_ARG_cuStreamCreate 0
#define FID_ARG_cuStreamCreateWithPriority 0
#define FID_ARG_cuGreenCtxStreamCreate 0
#define FID_ARG_cudaIpcGetMemHandle 0
#define FID_ARG_cuIpcGetMemHandle 0
#define FID_ARG_cuCtxSetCurrent 0
#define FID_ARG_cudaDeviceReset 0
#define FID_ARG_cuCtxPushCurrent_v2 0
#define FID_ARG_cuCtxCreate_v2 0
#define FID_ARG_cuCtxCreate_v3 0
#define FID_ARG_cuCtxCreate_v4 0
#define FID_ARG_cuMemGetAddressRange_v2 0
#define FID_ARG_cuStreamBeginCapture 0
#define FID_ARG_cuStreamBeginCapture_ptsz 0
#define FID_ARG_cuStreamBeginCapture_v2 0
#define FID_ARG_cuStreamBeginCapture_v2_ptsz 0
#define FID_ARG_cuStreamBeginCaptureToGraph 0
#define FID_ARG_cuStreamBeginCaptureToGraph_ptsz 0
#define FID_ARG_cuStreamEndCapture 0
#define FID_ARG_cuStreamEndCapture_ptsz 0
#define FID_ARG_cuThreadExchangeStreamCaptureMode 0
#define FID_ARG_cuCtxPopCurrent_v2 0
#define FID_ARG_cuCtxDestroy_v2 0
#define FID_ARG_cuDevicePrimaryCtxRelease 0
#define FID_ARG_cuDevicePrimaryCtxRelease_v2 0
#define FID_ARG_cuDevicePrimaryCtxReset 0
#define FID_ARG_cuDevicePrimaryCtxReset_v2 0
#define FID_ARG_cuMemAlloc_v2 FID_cuMemAlloc_v2
#define FID_ARG_cuMemFree_v2 FID_cuMemFree_v2
#define FID_ARG_cuMemAllocPitch_v2 FID_cuMemAllocPitch_v2
#define FID_ARG_cuMemAllocManaged FID_cuMemAllocManaged
#define FID_ARG_cuMemAllocAsync FID_cuMemAllocAsync
#define FID_ARG_cuMemAllocAsync_ptsz FID_cuMemAllocAsync_ptsz
#define FID_ARG_cuMemFreeAsync FID_cuMemFreeAsync
#define FID_ARG_cuMemFreeAsync_ptsz FID_cuMemFreeAsync_ptsz
#define FID_ARG_cuMemAllocFromPoolAsync FID_cuMemAllocFromPoolAsync
#define FID_ARG_cuMemAllocFromPoolAsync_ptsz FID_cuMemAllocFromPoolAsync_ptsz
#define FID_ARG_cuMemAllocHost_v2 FID_cuMemAllocHost_v2
#define FID_ARG_cuMemHostAlloc FID_cuMemHostAlloc
#define FID_ARG_cuMemFreeHost FID_cuMemFreeHost
#define FID_ARG_cuMemCreate FID_cuMemCreate
#define FID_ARG_cuMemRelease FID_cuMemRelease
#define FID_ARG_cuMemMap FID_cuMemMap
#define FID_ARG_cuMemUnmap FID_cuMemUnmap
#define FID_ARG_cuMemAddressReserve FID_cuMemAddressReserve
#define FID_ARG_cuMemAddressFree FID_cuMemAddressFree
#define FID_ARG_cuGetProcAddress 0
#define FID_ARG_cuGetProcAddress_v2 0

#define MISSING_RESULT(name) (#name[1] == 'u' && #name[2] == 'd' ? CUDA_ERROR_UNKNOWN_RUNTIME : CUDA_ERROR_NOT_FOUND)

/* One wrapper per (variant, path). The NEXT wrapper is the exported symbol. */
#define WRAP_NEXT(name, ret, body, params, args)                                                         \
	EXPORT ret name params {                                                                         \
		void *cs = __builtin_return_address(0);                                                  \
		body##_fn f = (body##_fn)real_next(V_##name);                                            \
		if (UNLIKELY(f == NULL))                                                                 \
			return MISSING_RESULT(name);                                                     \
		return b_##body(f, FID_ARG_##name, cs, UNPAREN args);                                    \
	}                                                                                                \
	/* the export's own address, which no earlier LD_PRELOAD library can interpose */              \
	extern __typeof__(name) name##__self __attribute__((alias(#name), visibility("hidden")));
#define WRAP_PATH(name, ret, body, path, params, args)                                                   \
	static ret name##__##path params {                                                               \
		void *cs = __builtin_return_address(0);                                                  \
		body##_fn f = (body##_fn)__atomic_load_n(&g_real[V_##name][path], __ATOMIC_ACQUIRE);      \
		return b_##body(f, FID_ARG_##name, cs, UNPAREN args);                                    \
	}
#define UNPAREN(...) __VA_ARGS__

#define W_R(name, ret, params, args)                                                                     \
	WRAP_NEXT(name, ret, name, params, args)                                                         \
	WRAP_PATH(name, ret, name, P_DLSYM, params, args)
#define W_D(name, body, params, args)                                                                    \
	WRAP_NEXT(name, CUresult, body, params, args)                                                    \
	WRAP_PATH(name, CUresult, body, P_DLSYM, params, args)                                           \
	WRAP_PATH(name, CUresult, body, P_GPA, params, args)                                             \
	WRAP_PATH(name, CUresult, body, P_EP, params, args)
VARIANTS(W_R, W_D)
#undef W_R
#undef W_D

/* Every wrapper, by variant and path: static data, relocated by ld.so before any constructor runs. */
void *const g_wrapper[NVARIANTS][NPATHS] = {
#define G_R(name, ...) [V_##name] = {(void *)&name##__self, (void *)&name##__P_DLSYM, NULL, NULL},
#define G_D(name, ...)                                                                                   \
	[V_##name] = {(void *)&name##__self, (void *)&name##__P_DLSYM, (void *)&name##__P_GPA,           \
		      (void *)&name##__P_EP},
	VARIANTS(G_R, G_D)
#undef G_R
#undef G_D
};

