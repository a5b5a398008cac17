/* record --pool asks the driver for a thread's device once where the process sees one device
 * (run with FAKECUDA_DEVICES=1 FAKECUDA_LAZY_CONTEXT=1), and again after a context is unset. Prints
 * the cuCtxGetDevice calls of 1,000 served alloc/free pairs, of an allocation made without a context
 * (passed to CUDA) and of 1,000 pairs after the context is set again; exits 0. */
#include "fakecuda.h"

#include <stdio.h>

/* pairs makes n alloc/free pairs of cuMemAlloc_v2/cuMemFree_v2 and returns the device queries they cost. */
static long pairs(int n) {
	long q = fakecuda_ctx_queries();
	for (int i = 0; i < n; i++) {
		CUdeviceptr p;
		cuMemAlloc_v2(&p, 4000);
		cuMemFree_v2(p);
	}
	return fakecuda_ctx_queries() - q;
}

int main(void) {
	cuCtxSetCurrent((CUcontext)(intptr_t)1); /* device 0 */
	printf("device queries, 1000 pairs: %ld\n", pairs(1000));
	cuCtxSetCurrent(NULL);
	printf("device queries, a pair without a context: %ld\n", pairs(1));
	cuCtxSetCurrent((CUcontext)(intptr_t)1);
	printf("device queries, 1000 pairs with the context again: %ld\n", pairs(1000));
	return 0;
}
