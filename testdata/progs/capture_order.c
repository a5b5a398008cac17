/* record --pool when the ordering a second stream needs cannot be made, on the fake driver: a block
 * freed on the only stream so far was freed without an event, so another stream may reuse it only
 * after the pool ordered the device, and while a non-blocking stream captures a graph it cannot. The
 * second stream's allocation then goes to CUDA (the driver's own address), and its free too; once
 * the capture ended, the next allocation on that stream orders the device (a join barrier) and reuses
 * the block. Prints one line per fact, exits 0. */
#include "fakecuda.h"

#include <stdio.h>

#define S1 ((cudaStream_t)0x1000)
#define S2 ((cudaStream_t)0x2000)

int main(void) {
	cudaSetDevice(0);
	cudaStream_t apart;
	cudaStreamCreateWithFlags(&apart, 1 /* cudaStreamNonBlocking */);
	void *a, *b, *c;
	cudaMallocAsync(&a, 4000, S1);
	cudaFreeAsync(a, S1);
	long b0 = fakecuda_barriers(), s0 = fakecuda_syncs();
	fakecuda_capture(2);
	cudaMallocAsync(&b, 4000, S2);
	printf("while a non-blocking stream captures, S2's block: %s; barriers %ld, syncs %ld\n",
	       b == a ? "the one S1 freed" : "another", fakecuda_barriers() - b0, fakecuda_syncs() - s0);
	cudaFreeAsync(b, S2);
	fakecuda_capture(0);
	cudaMallocAsync(&c, 4000, S2);
	printf("after the capture, S2's block: %s; barriers %ld, syncs %ld\n", c == a ? "the one S1 freed" : "another",
	       fakecuda_barriers() - b0, fakecuda_syncs() - s0);
	cudaFreeAsync(c, S2);
	cudaStreamDestroy(apart);
	return 0;
}
