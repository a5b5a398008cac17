/*
 * Fake CUDA runtime (libcudart.so) for allocscope's tests. Like the real runtime it reaches the driver
 * only through entry points: dlopen("libcuda.so.1"), dlsym "cuGetProcAddress_v2", ask it for
 * "cuGetProcAddress" itself, then resolve everything else through that pointer.
 * Build: cc -shared -fPIC -O2 -Wl,-soname,libcudart.so -o libcudart.so runtime.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define RUNTIME_VERSION 13000
#define cudaErrorInitializationError 3

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct {
	PFN_cuGetProcAddress_v2 getProcAddress;
	CUresult (*ctxSetCurrent)(CUcontext);
	CUresult (*ctxSynchronize)(void);
	CUresult (*streamDestroy)(CUstream);
	CUresult (*streamCreate)(CUstream *, unsigned int);
	CUresult (*ipcGetMemHandle)(void *, CUdeviceptr);
	CUresult (*memAlloc)(CUdeviceptr *, size_t);
	CUresult (*memFree)(CUdeviceptr);
	CUresult (*memAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
	CUresult (*memAllocManaged)(CUdeviceptr *, size_t, unsigned int);
	CUresult (*memAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*memFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*memAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*memAllocHost)(void **, size_t);
	CUresult (*memHostAlloc)(void **, size_t, unsigned int);
	CUresult (*memFreeHost)(void *);
	/* Optional (not part of drv.ok). */
	CUresult (*ctxGetDevice)(CUdevice *);
	CUresult (*primaryCtxReset)(CUdevice);
	CUresult (*memGetInfo)(size_t *, size_t *);
	CUresult (*beginCapture)(CUstream, int);
	CUresult (*endCapture)(CUstream, void **);
	CUresult (*exchangeCaptureMode)(int *);
	int ok;
} drv;

static void resolve(const char *name, void *slot) {
	if (drv.getProcAddress(name, (void **)slot, RUNTIME_VERSION, 0, NULL) != CUDA_SUCCESS)
		*(void **)slot = NULL;
}

static void runtime_init(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "fakecudart: %s\n", dlerror());
		return;
	}
	PFN_cuGetProcAddress_v2 boot = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
	if (boot == NULL || boot("cuGetProcAddress", (void **)&drv.getProcAddress, RUNTIME_VERSION, 0, NULL) != 0)
		return;
	/* The real runtime initializes the driver first; FAKECUDA_NO_INIT=1 leaves it out, as a program
	 * that reaches the driver without cuInit (only the fake allows that). */
	CUresult (*init)(unsigned int) = NULL;
	resolve("cuInit", &init);
	if (getenv("FAKECUDA_NO_INIT") == NULL && (init == NULL || init(0) != CUDA_SUCCESS))
		return;
	resolve("cuCtxSetCurrent", &drv.ctxSetCurrent);
	resolve("cuCtxSynchronize", &drv.ctxSynchronize);
	resolve("cuStreamDestroy", &drv.streamDestroy);
	resolve("cuStreamCreate", &drv.streamCreate);
	resolve("cuIpcGetMemHandle", &drv.ipcGetMemHandle);
	resolve("cuMemAlloc", &drv.memAlloc);
	resolve("cuMemFree", &drv.memFree);
	resolve("cuMemAllocPitch", &drv.memAllocPitch);
	resolve("cuMemAllocManaged", &drv.memAllocManaged);
	resolve("cuMemAllocAsync", &drv.memAllocAsync);
	resolve("cuMemFreeAsync", &drv.memFreeAsync);
	resolve("cuMemAllocFromPoolAsync", &drv.memAllocFromPoolAsync);
	resolve("cuMemAllocHost", &drv.memAllocHost);
	resolve("cuMemHostAlloc", &drv.memHostAlloc);
	resolve("cuMemFreeHost", &drv.memFreeHost);
	resolve("cuCtxGetDevice", &drv.ctxGetDevice);
	resolve("cuDevicePrimaryCtxReset", &drv.primaryCtxReset);
	resolve("cuMemGetInfo", &drv.memGetInfo);
	resolve("cuStreamBeginCapture", &drv.beginCapture);
	resolve("cuStreamEndCapture", &drv.endCapture);
	resolve("cuThreadExchangeStreamCaptureMode", &drv.exchangeCaptureMode);
	drv.ok = drv.memAlloc && drv.memFree && drv.memAllocPitch && drv.memAllocManaged && drv.memAllocAsync &&
		 drv.memFreeAsync && drv.memAllocFromPoolAsync && drv.memAllocHost && drv.memHostAlloc &&
		 drv.memFreeHost && drv.ctxSetCurrent && drv.ctxSynchronize && drv.streamDestroy && drv.ipcGetMemHandle &&
		 drv.streamCreate;
}

#define INIT()                                                                                           \
	do {                                                                                             \
		pthread_once(&once, runtime_init);                                                       \
		if (!drv.ok)                                                                             \
			return cudaErrorInitializationError;                                             \
		fakecuda_bind();                                                                         \
	} while (0)

/* Driver and runtime codes coincide for everything the fake returns (1, 2, 500). */
static cudaError_t out_ptr(CUresult r, const CUdeviceptr *d, void **p) {
	if (r == CUDA_SUCCESS)
		*p = (void *)(uintptr_t)*d;
	return r;
}

cudaError_t cudaMalloc(void **p, size_t n) {
	INIT();
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (n == 0) {
		*p = NULL;
		return 0;
	}
	CUdeviceptr d = 0;
	return out_ptr(drv.memAlloc(&d, n), &d, p);
}

cudaError_t cudaFree(void *p) {
	INIT();
	if (p == NULL)
		return 0;
	return drv.memFree((CUdeviceptr)(uintptr_t)p);
}

cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
	INIT();
	CUdeviceptr d = 0;
	return out_ptr(drv.memAllocAsync(&d, n, s), &d, p);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
	INIT();
	return drv.memFreeAsync((CUdeviceptr)(uintptr_t)p, s);
}

cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s) {
	INIT();
	CUdeviceptr d = 0;
	return out_ptr(drv.memAllocFromPoolAsync(&d, n, pool, s), &d, p);
}

cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags) {
	INIT();
	CUdeviceptr d = 0;
	return out_ptr(drv.memAllocManaged(&d, n, flags), &d, p);
}

cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
	INIT();
	CUdeviceptr d = 0;
	return out_ptr(drv.memAllocPitch(&d, pitch, width, height, 4), &d, p);
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e) {
	INIT();
	CUdeviceptr d = 0;
	size_t pitch = 0;
	CUresult r = drv.memAllocPitch(&d, &pitch, e.width, e.height * e.depth, 4);
	if (r == CUDA_SUCCESS) {
		pp->ptr = (void *)(uintptr_t)d;
		pp->pitch = pitch;
		pp->xsize = e.width;
		pp->ysize = e.height;
	}
	return r;
}

cudaError_t cudaMallocHost(void **p, size_t n) {
	INIT();
	return drv.memAllocHost(p, n);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
	INIT();
	return drv.memHostAlloc(p, n, flags);
}

cudaError_t cudaFreeHost(void *p) {
	INIT();
	return drv.memFreeHost(p);
}

/* cudaSetDevice makes the device's primary context current (CUDA_ERROR_INVALID_CONTEXT past the last device). */
cudaError_t cudaSetDevice(int device) {
	INIT();
	return drv.ctxSetCurrent((CUcontext)(intptr_t)(device + 1));
}

cudaError_t cudaDeviceSynchronize(void) {
	INIT();
	return drv.ctxSynchronize();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
	INIT();
	return drv.streamCreate((CUstream *)s, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
	INIT();
	return drv.streamDestroy(s);
}

cudaError_t cudaIpcGetMemHandle(void *handle, void *p) {
	INIT();
	return drv.ipcGetMemHandle(handle, (CUdeviceptr)(uintptr_t)p);
}

cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags, void *status) {
	INIT();
	return drv.getProcAddress(sym, fn, RUNTIME_VERSION, flags, status);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int version,
					     unsigned long long flags, void *status) {
	INIT();
	return drv.getProcAddress(sym, fn, (int)version, flags, status);
}

/* cudaDeviceReset resets the current device's primary context (cuDevicePrimaryCtxReset). */
cudaError_t cudaDeviceReset(void) {
	INIT();
	CUdevice d = 0;
	if (drv.ctxGetDevice == NULL || drv.primaryCtxReset == NULL)
		return cudaErrorInitializationError;
	CUresult r = drv.ctxGetDevice(&d);
	return r != CUDA_SUCCESS ? r : drv.primaryCtxReset(d);
}

/* cudaMemGetInfo is cuMemGetInfo_v2 of the current context. */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
	INIT();
	return drv.memGetInfo == NULL ? cudaErrorInitializationError : drv.memGetInfo(free_bytes, total);
}

/* cudaStreamBeginCapture is cuStreamBeginCapture_v2 (modes: global 0, thread-local 1, relaxed 2). */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode) {
	INIT();
	return drv.beginCapture == NULL ? cudaErrorInitializationError : drv.beginCapture(s, mode);
}

/* cudaStreamEndCapture is cuStreamEndCapture (901 for an invalidated capture). */
cudaError_t cudaStreamEndCapture(cudaStream_t s, void **graph) {
	INIT();
	return drv.endCapture == NULL ? cudaErrorInitializationError : drv.endCapture(s, graph);
}

/* cudaThreadExchangeStreamCaptureMode is cuThreadExchangeStreamCaptureMode. */
cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode) {
	INIT();
	return drv.exchangeCaptureMode == NULL ? cudaErrorInitializationError : drv.exchangeCaptureMode(mode);
}
