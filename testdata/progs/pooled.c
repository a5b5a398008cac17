/* What `record --pool` changes for a program, on the fake driver: a block freed with cudaFree is not
 * reused before the device synchronizes; after cudaDeviceSynchronize it is; a second free of a block
 * returns an error; a class full of pending blocks makes the pool order the device once rather than
 * grow (a barrier on the legacy stream: the program made no non-blocking stream);
 * a large block comes from the arena; exporting a pool block with cudaIpcGetMemHandle works (the shim
 * warns that the handle names the pool's region). Prints one line per fact (with the pool: no, yes, 1, 0 and 1, yes,
 * and the driver's allocation calls the program caused), exits 0. 2,059 calls are recorded. */
#include "fakecuda.h"

#include <stdio.h>

int main(void) {
	long e0, g0, e1, g1;
	cudaSetDevice(0); /* the runtime's start-up lookups are not the program's allocations */
	fakecuda_calls(&e0, &g0);
	void *a, *b, *c, *w;
	cudaMalloc(&a, 4000);
	cudaFree(a);
	cudaMalloc(&b, 4000);
	printf("reused before a sync: %s\n", a == b ? "yes" : "no");
	cudaDeviceSynchronize();
	cudaMalloc(&c, 4000);
	printf("reused after a sync: %s\n", c == a ? "yes" : "no");
	cudaFree(b);
	cudaFree(c);
	printf("second free: %d\n", (int)cudaFree(c));
	static void *v[1024];
	for (int i = 0; i < 1024; i++)
		cudaMalloc(&v[i], 500);
	for (int i = 0; i < 1024; i++)
		cudaFree(v[i]);
	long s1 = fakecuda_syncs(), b1 = fakecuda_barriers();
	cudaMalloc(&w, 500);
	printf("a full class with frees pending: syncs %ld, barriers %ld\n", fakecuda_syncs() - s1,
	       fakecuda_barriers() - b1);
	printf("reused a pending block: %s\n", w == v[1023] ? "yes" : "no");
	CUdeviceptr big = 0;
	cuMemAlloc_v2(&big, 200u << 20);
	cuMemFree_v2(big);
	char handle[64];
	printf("exported a pool block: %d\n", (int)cudaIpcGetMemHandle(handle, w));
	cudaFree(w);
	fakecuda_calls(&e1, &g1);
	printf("driver allocation calls: %ld\n", (e1 - e0) + (g1 - g0));
	return 0;
}
