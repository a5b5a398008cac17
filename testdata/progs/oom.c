/* Capacity (run with FAKECUDA_CAPACITY=1073741824): 600 blocks of 1 MiB, all freed, then 700 MiB must be
 * had. Prints the failed 1 MiB allocations, the 700 MiB allocation's result, and the safety report. */
#include "safety.h"

#define N 600

int main(void) {
	static void *v[N];
	long failed = 0;
	cudaSetDevice(0);
	for (int i = 0; i < N; i++) {
		failed += cudaMalloc(&v[i], 1u << 20) != 0;
		live_add(v[i], 1u << 20);
	}
	for (int i = 0; i < N; i++) {
		live_remove(v[i]);
		failed += cudaFree(v[i]) != 0;
	}
	printf("failed 1 MiB calls: %ld\n", failed);
	void *big = NULL;
	printf("700 MiB: %d\n", (int)cudaMalloc(&big, 700u << 20));
	live_add(big, 700u << 20);
	report();
	return 0;
}
