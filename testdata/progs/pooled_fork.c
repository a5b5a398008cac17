/* record --pool across fork: the parent's pool serves a block; a forked child starts without it,
 * so its first allocation reserves a pool of its own (one driver allocation call in the child), and
 * its block and frees never touch the parent's. Prints the child's facts, then the parent's, exits
 * with the child's status. */
#include "fakecuda.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static long driver_calls(void) {
	long e, g;
	fakecuda_calls(&e, &g);
	return e + g;
}

int main(void) {
	void *a = NULL, *b = NULL, *c = NULL;
	cudaSetDevice(0);
	long before = driver_calls();
	cudaMalloc(&a, 4000);
	long parent_calls = driver_calls() - before;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		long c0 = driver_calls();
		int r = cudaMalloc(&b, 4000);
		int f = cudaFree(b);
		printf("child: malloc %d, free %d, driver allocation calls %ld, same address as the parent's: %s\n", r,
		       f, driver_calls() - c0, a == b ? "yes" : "no");
		return 0;
	}
	int status = 0;
	waitpid(pid, &status, 0);
	int f = cudaFree(a);
	cudaDeviceSynchronize();
	cudaMalloc(&c, 4000);
	printf("parent: driver allocation calls %ld, free %d, reused its own block: %s\n", parent_calls, f,
	       c == a ? "yes" : "no");
	cudaFree(c);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
