/* A daemon's habit: close every descriptor above stderr, then open files of its own (which get the
 * numbers the shim's log had). The shim must never write into them. Usage: closefds FILE1 FILE2.
 * Makes 1 cudaMalloc/cudaFree pair, closes fds 3..1023, writes "hello" into FILE1 and FILE2, makes
 * 3000 more pairs, and prints whether both files still hold just "hello". Exits 0. */
#include "fakecuda.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static int intact(const char *path) {
	struct stat st;
	return stat(path, &st) == 0 && st.st_size == 5;
}

int main(int argc, char **argv) {
	if (argc != 3)
		return 2;
	void *p;
	cudaMalloc(&p, 100);
	cudaFree(p);
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	int f1 = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	int f2 = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (f1 < 0 || f2 < 0 || write(f1, "hello", 5) != 5 || write(f2, "hello", 5) != 5)
		return 3;
	for (int i = 0; i < 3000; i++) {
		cudaMalloc(&p, 512);
		cudaFree(p);
	}
	printf("files intact: %s\n", intact(argv[1]) && intact(argv[2]) ? "yes" : "no");
	return 0;
}
