/* A parent that allocates, forks a child that allocates and then execs this program again ("exec"),
 * which allocates too. Output is ordered by waitpid. Exits with 19 (the exec'd image with 23). */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "exec") == 0) {
		void *p[4];
		for (int i = 0; i < 4; i++)
			cudaMalloc(&p[i], 4096u * (unsigned)(i + 1));
		for (int i = 0; i < 4; i++)
			cudaFree(p[i]);
		printf("exec'd child: %#llx %#llx\n", (unsigned long long)(uintptr_t)p[0], (unsigned long long)(uintptr_t)p[3]);
		return 23;
	}
	void *a, *b, *c, *d;
	cudaMalloc(&a, 100);
	cudaMalloc(&b, 200);
	cudaMalloc(&c, 300);
	printf("parent: %#llx %#llx %#llx\n", (unsigned long long)(uintptr_t)a, (unsigned long long)(uintptr_t)b,
	       (unsigned long long)(uintptr_t)c);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		void *x;
		cudaMalloc(&x, 1111);
		cudaFree(x);
		cudaFree(a);
		execl("/proc/self/exe", argv[0], "exec", (char *)NULL);
		_exit(99);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	cudaFree(b);
	cudaFree(c);
	cudaMalloc(&d, 400);
	cudaFree(d);
	cudaFree(a);
	printf("parent done\n");
	return 19;
}
