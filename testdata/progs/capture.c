/* Graph capture (global mode) on a non-blocking stream: cudaMallocAsync, a launch and cudaFreeAsync are
 * graph nodes and the capture ends with 0; a cudaMalloc of the same size afterwards gets a block to launch
 * on. Then cudaMalloc inside a global-mode capture returns 900 and the capture's end 901. Prints each
 * result, the graph allocations and frees the fake saw and the program made, capture intrusions, and the
 * safety report. */
#include "safety.h"

int main(void) {
	cudaStream_t s;
	void *p = NULL, *q = NULL, *graph = NULL;
	cudaSetDevice(0);
	cudaStreamCreateWithFlags(&s, 1);
	printf("begin: %d\n", (int)cudaStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	printf("cudaMallocAsync while capturing: %d\n", (int)cudaMallocAsync(&p, 4096, s));
	fakecuda_launch(s, (uint64_t)(uintptr_t)p, 4096, new_owner());
	printf("cudaFreeAsync while capturing: %d\n", (int)cudaFreeAsync(p, s));
	printf("end: %d\n", (int)cudaStreamEndCapture(s, &graph));
	printf("graph handle: %s\n", graph != NULL ? "yes" : "no");
	printf("cudaMalloc after the capture: %d\n", (int)cudaMalloc(&q, 4096));
	live_add(q, 4096);
	fakecuda_launch(NULL, (uint64_t)(uintptr_t)q, 4096, new_owner());
	fakecuda_host_use((uint64_t)(uintptr_t)q, 4096, owner_next);
	printf("begin again: %d\n", (int)cudaStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	void *r = NULL;
	printf("cudaMalloc while capturing: %d\n", (int)cudaMalloc(&r, 4096));
	printf("end: %d\n", (int)cudaStreamEndCapture(s, &graph));
	long allocs, frees;
	fakecuda_graph_allocs(&allocs, &frees);
	printf("graph allocations: fake %ld, program 1\ngraph frees: fake %ld, program 1\n", allocs, frees);
	printf("capture intrusions: %ld\n", fakecuda_capture_intrusions());
	live_remove(q);
	printf("cudaFree: %d\n", (int)cudaFree(q));
	report();
	return 0;
}
