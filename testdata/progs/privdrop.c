/* Drops root privileges before its first allocation: as root, calls cuInit(0) (not recorded; it also
 * keeps libcuda.so.1 linked, so the runtime need not open it after the drop), then setgid(65534) and
 * setuid(65534) (nobody), then makes 100 cudaMalloc/cudaFree pairs of 2048 bytes. Prints "uid U, failures F" and exits with 0
 * (4 when the drop fails). */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <grp.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
	cuInit(0);
	if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
		perror("privdrop");
		return 4;
	}
	int failures = 0;
	for (int i = 0; i < 100; i++) {
		void *p = NULL;
		failures += cudaMalloc(&p, 2048) != 0 || cudaFree(p) != 0;
	}
	printf("uid %d, failures %d\n", (int)getuid(), failures);
	return 0;
}
