/* Two devices (run with FAKECUDA_DEVICES=2): a block allocated on device 1 is freed with cudaFreeAsync on
 * a stream of device 1 while device 0 is current, and cudaMallocAsync on that stream (device 0 current)
 * must give device 1's memory. Prints the device of each block, the results, and the safety report. */
#include "safety.h"

int main(void) {
	cudaStream_t s1;
	void *a = NULL, *b = NULL;
	cudaSetDevice(1);
	cudaStreamCreateWithFlags(&s1, 1);
	printf("cudaMalloc on device 1: %d\n", (int)cudaMalloc(&a, 4096));
	printf("block on device: %d\n", fakecuda_device_of((uint64_t)(uintptr_t)a));
	live_add(a, 4096);
	fakecuda_launch(s1, (uint64_t)(uintptr_t)a, 4096, new_owner());
	cudaSetDevice(0);
	live_remove(a);
	printf("cudaFreeAsync on device 1's stream, device 0 current: %d\n", (int)cudaFreeAsync(a, s1));
	printf("cudaMallocAsync on device 1's stream, device 0 current: %d\n", (int)cudaMallocAsync(&b, 4096, s1));
	printf("block on device: %d\n", fakecuda_device_of((uint64_t)(uintptr_t)b));
	live_add(b, 4096);
	fakecuda_launch(s1, (uint64_t)(uintptr_t)b, 4096, new_owner());
	live_remove(b);
	printf("cudaFreeAsync: %d\n", (int)cudaFreeAsync(b, s1));
	cudaSetDevice(1);
	printf("cudaDeviceSynchronize: %d\n", (int)cudaDeviceSynchronize());
	report();
	return 0;
}
