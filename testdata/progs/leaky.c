/* Allocates from two functions of its own and frees neither: analyze names the code that
 * allocated each leak (leak_small, leak_large and the lines of their calls), from the modules
 * record saved and the program's debug information. Exits 0. */
#include "fakecuda.h"

__attribute__((noinline)) static void *leak_small(void) {
	void *p = 0;
	cudaMalloc(&p, 4096);
	return p;
}

__attribute__((noinline)) void *leak_large(void) {
	void *p = 0;
	cudaMalloc(&p, 1 << 20);
	return p;
}

int main(void) {
	volatile void *a = leak_small(), *b = leak_large();
	(void)a, (void)b;
	return 0;
}
