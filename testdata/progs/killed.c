/* Allocates 10000 blocks and frees them (20000 events, more than one 1 MiB log chunk), prints "ready"
 * and kills itself with SIGKILL: everything logged before must be recoverable. */
#include "fakecuda.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define N 10000

int main(void) {
	static void *p[N];
	for (int i = 0; i < N; i++)
		cudaMalloc(&p[i], 512u * (unsigned)(i % 16 + 1));
	for (int i = 0; i < N; i++)
		cudaFree(p[i]);
	printf("ready\n");
	fflush(stdout);
	raise(SIGKILL);
	return 0;
}
