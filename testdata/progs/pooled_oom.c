/* What `record --pool` does when the device is full, on the fake driver run with a 1 GiB device
 * (FAKECUDA_DEVICE_BYTES): the program allocates 600 blocks of 1 MiB (the pool grows its 1 MiB class
 * by slabs), frees them and synchronizes, then asks for 700 MiB. Without a give-back the pool's
 * slabs would keep the freed memory and the request would fail; the pool gives back its idle slabs
 * and serves it. Then a 900 MiB request fails in the pool and at CUDA alike. Prints the results of the
 * two large requests and exits 0. */
#include "fakecuda.h"

#include <stdio.h>

int main(void) {
	static void *v[600];
	cudaSetDevice(0);
	for (int i = 0; i < 600; i++)
		if (cudaMalloc(&v[i], 1u << 20) != 0)
			return 1;
	for (int i = 0; i < 600; i++)
		cudaFree(v[i]);
	cudaDeviceSynchronize();
	void *big = NULL, *bigger = NULL;
	printf("700 MiB after 600 frees of 1 MiB: %d\n", (int)cudaMalloc(&big, 700u << 20));
	printf("900 MiB more: %d\n", (int)cudaMalloc(&bigger, 900u << 20));
	cudaFree(big);
	return 0;
}
