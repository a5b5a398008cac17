/* Reaches the fake CUDA by plain symbol binding (linked with -lcudart -lcuda): every hooked runtime and
 * driver function once or more, failures included, and cudaGetDriverEntryPoint(ByVersion).
 * Expected output and events: internal/intercept/shim_test.go (TestPlainSymbols). Exits with 7. */
#include "fakecuda.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define P(p) ((unsigned long long)(uintptr_t)(p))

int main(void) {
	void *a = 0, *b = 0, *c = 0, *d = 0, *e = 0, *m = 0, *pp = 0, *h1 = 0, *h2 = 0, *x = 0, *y = 0;
	size_t pitch = 0;
	int r;
	r = cudaMalloc(&a, 1000); printf("cudaMalloc(1000) = %d %#llx\n", r, P(a));
	r = cudaMalloc(&b, 4096); printf("cudaMalloc(4096) = %d %#llx\n", r, P(b));
	r = cudaFree(a); printf("cudaFree = %d\n", r);
	r = cudaMalloc(&c, 1000); printf("cudaMalloc(1000) = %d %#llx\n", r, P(c));
	r = cudaMallocAsync(&d, 2048, (cudaStream_t)0x51); printf("cudaMallocAsync(2048) = %d %#llx\n", r, P(d));
	r = cudaFreeAsync(d, (cudaStream_t)0x51); printf("cudaFreeAsync = %d\n", r);
	r = cudaMallocFromPoolAsync(&e, 512, (cudaMemPool_t)0x77, (cudaStream_t)0x52);
	printf("cudaMallocFromPoolAsync(512) = %d %#llx\n", r, P(e));
	r = cudaMallocManaged(&m, 3000, 1); printf("cudaMallocManaged(3000) = %d %#llx\n", r, P(m));
	r = cudaMallocPitch(&pp, &pitch, 100, 10); printf("cudaMallocPitch(100x10) = %d %#llx pitch %zu\n", r, P(pp), pitch);
	struct cudaPitchedPtr p3;
	memset(&p3, 0, sizeof p3);
	struct cudaExtent ext = {100, 4, 2};
	r = cudaMalloc3D(&p3, ext); printf("cudaMalloc3D(100x4x2) = %d %#llx pitch %zu\n", r, P(p3.ptr), p3.pitch);
	r = cudaMallocHost(&h1, 256); printf("cudaMallocHost(256) = %d %#llx\n", r, P(h1));
	r = cudaHostAlloc(&h2, 100, 0); printf("cudaHostAlloc(100) = %d %#llx\n", r, P(h2));
	memset(h1, 0xab, 256); /* page-locked host memory is real memory */
	r = cudaFreeHost(h1); printf("cudaFreeHost = %d\n", r);
	r = cudaFreeHost(h2); printf("cudaFreeHost = %d\n", r);
	r = cudaMalloc(&x, 2ull << 40); printf("cudaMalloc(2 TiB) = %d\n", r);
	r = cudaFree((void *)0x1234); printf("cudaFree(0x1234) = %d\n", r);
	errno = 1234;
	r = cudaFree(NULL); printf("cudaFree(NULL) = %d errno %d\n", r, errno);
	cudaSetDevice(1);
	r = cudaMalloc(&y, 64); printf("device 1: cudaMalloc(64) = %d %#llx\n", r, P(y));
	cudaSetDevice(0);
	r = cudaFree(y); printf("cudaFree = %d\n", r);
	r = cudaFree(m); printf("cudaFree(managed) = %d\n", r);

	CUdeviceptr da = 0, dp = 0, dm = 0, d1 = 0, d2 = 0, d3 = 0, d4 = 0;
	void *hh1 = 0, *hh2 = 0;
	size_t dpitch = 0;
	r = cuMemAlloc_v2(&da, 777); printf("cuMemAlloc_v2(777) = %d %#llx\n", r, da);
	r = cuMemAllocPitch_v2(&dp, &dpitch, 600, 3, 4); printf("cuMemAllocPitch_v2(600x3) = %d %#llx pitch %zu\n", r, dp, dpitch);
	r = cuMemAllocManaged(&dm, 5000, 1); printf("cuMemAllocManaged(5000) = %d %#llx\n", r, dm);
	r = cuMemAllocAsync(&d1, 300, (CUstream)0x61); printf("cuMemAllocAsync(300) = %d %#llx\n", r, d1);
	r = cuMemAllocAsync_ptsz(&d2, 301, (CUstream)0x62); printf("cuMemAllocAsync_ptsz(301) = %d %#llx\n", r, d2);
	r = cuMemFreeAsync(d1, (CUstream)0x61); printf("cuMemFreeAsync = %d\n", r);
	r = cuMemFreeAsync_ptsz(d2, (CUstream)0x62); printf("cuMemFreeAsync_ptsz = %d\n", r);
	r = cuMemAllocFromPoolAsync(&d3, 7000, (CUmemoryPool)0x71, (CUstream)0x63); printf("cuMemAllocFromPoolAsync(7000) = %d %#llx\n", r, d3);
	r = cuMemAllocFromPoolAsync_ptsz(&d4, 7001, (CUmemoryPool)0x71, (CUstream)0x64); printf("cuMemAllocFromPoolAsync_ptsz(7001) = %d %#llx\n", r, d4);
	r = cuMemAllocHost_v2(&hh1, 1024); printf("cuMemAllocHost_v2(1024) = %d %#llx\n", r, P(hh1));
	r = cuMemHostAlloc(&hh2, 2048, 0); printf("cuMemHostAlloc(2048) = %d %#llx\n", r, P(hh2));
	r = cuMemFreeHost(hh1); printf("cuMemFreeHost = %d\n", r);
	r = cuMemFreeHost(hh2); printf("cuMemFreeHost = %d\n", r);
	r = cuMemFree_v2(da); printf("cuMemFree_v2 = %d\n", r);
	r = cuMemFree_v2(dp); printf("cuMemFree_v2 = %d\n", r);
	r = cuMemFree_v2(dm); printf("cuMemFree_v2(managed) = %d\n", r);
	r = cuMemFree_v2(d3); printf("cuMemFree_v2 = %d\n", r);
	r = cuMemFree_v2(d4); printf("cuMemFree_v2 = %d\n", r);
	r = cuMemFree_v2(da); printf("cuMemFree_v2(again) = %d\n", r);

	CUdeviceptr va = 0;
	CUmemGenericAllocationHandle hd = 0;
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = 1;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 1;
	r = cuMemAddressReserve(&va, 4u << 20, 0, 0, 0); printf("cuMemAddressReserve(4 MiB) = %d %#llx\n", r, va);
	r = cuMemCreate(&hd, 2u << 20, &prop, 0); printf("cuMemCreate(2 MiB) = %d %#llx\n", r, hd);
	r = cuMemMap(va, 2u << 20, 0, hd, 0); printf("cuMemMap = %d\n", r);
	r = cuMemUnmap(va, 2u << 20); printf("cuMemUnmap = %d\n", r);
	r = cuMemRelease(hd); printf("cuMemRelease = %d\n", r);
	r = cuMemAddressFree(va, 4u << 20); printf("cuMemAddressFree = %d\n", r);
	r = cuMemCreate(&hd, 12345, &prop, 0); printf("cuMemCreate(12345) = %d\n", r);

	PFN_cuMemAlloc_v2 ep_alloc = 0;
	PFN_cuMemFree_v2 ep_free = 0;
	PFN_cuMemAllocAsync ep_async = 0;
	PFN_cuMemFreeAsync ep_fasync = 0;
	CUdeviceptr z = 0, z2 = 0;
	r = cudaGetDriverEntryPoint("cuMemAlloc", (void **)&ep_alloc, 0, NULL); printf("cudaGetDriverEntryPoint(cuMemAlloc) = %d\n", r);
	r = cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&ep_free, 12000, 0, NULL); printf("cudaGetDriverEntryPointByVersion(cuMemFree) = %d\n", r);
	r = cudaGetDriverEntryPoint("cuMemAllocAsync", (void **)&ep_async, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL);
	printf("cudaGetDriverEntryPoint(cuMemAllocAsync, ptds) = %d\n", r);
	r = cudaGetDriverEntryPointByVersion("cuMemFreeAsync", (void **)&ep_fasync, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL);
	printf("cudaGetDriverEntryPointByVersion(cuMemFreeAsync, ptds) = %d\n", r);
	r = ep_alloc(&z, 128); printf("entry point cuMemAlloc(128) = %d %#llx\n", r, z);
	r = ep_async(&z2, 129, (CUstream)0x65); printf("entry point cuMemAllocAsync(129) = %d %#llx\n", r, z2);
	r = ep_free(z); printf("entry point cuMemFree = %d\n", r);
	r = ep_fasync(z2, (CUstream)0x65); printf("entry point cuMemFreeAsync = %d\n", r);

	r = cudaFree(b); printf("cudaFree = %d\n", r);
	r = cudaFree(c); printf("cudaFree = %d\n", r);
	r = cudaFreeAsync(e, (cudaStream_t)0x52); printf("cudaFreeAsync = %d\n", r);
	r = cudaFree(pp); printf("cudaFree = %d\n", r);
	r = cudaFree(p3.ptr); printf("cudaFree = %d\n", r);
	printf("errno %#x\n", errno);
	long exported = 0, gpa = 0;
	fakecuda_calls(&exported, &gpa);
	printf("driver calls: exported %ld, through proc address %ld\n", exported, gpa);
	return 7;
}
