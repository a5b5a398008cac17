/* What `record --pool` does when the device is full, on the fake driver run with a 1 GiB device
 * (FAKECUDA_CAPACITY): the program allocates 600 blocks of 1 MiB (the pool grows its 1 MiB class
 * by slabs), frees them and synchronizes, then asks for 700 MiB: first while a blocking stream
 * captures a graph (the pool gives nothing back then: the request fails, there and at CUDA; without
 * the pool it succeeds and is freed), then after the capture (the pool gives back its idle slabs and
 * serves it). Then a 900 MiB request fails in the pool and at CUDA alike. Prints the results of the
 * large requests and exits 0. */
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
	fakecuda_capture(1);
	int r = (int)cudaMalloc(&big, 700u << 20);
	printf("700 MiB while a stream captures: %d\n", r);
	if (r == 0)
		cudaFree(big);
	fakecuda_capture(0);
	printf("700 MiB after the capture: %d\n", (int)cudaMalloc(&big, 700u << 20));
	printf("900 MiB more: %d\n", (int)cudaMalloc(&bigger, 900u << 20));
	cudaFree(big);
	return 0;
}
