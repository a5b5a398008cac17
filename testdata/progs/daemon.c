/* Leaves a daemon behind: forks and exits with 0 at once, without CUDA calls. The grandchild calls
 * setsid(), points stdin, stdout and stderr at /dev/null (so nothing waits on its output), sleeps
 * 300 ms plus the optional extra milliseconds, makes 700 cudaMalloc/cudaFree pairs (1,400 events;
 * 4096 bytes each), then creates the marker file and exits with 0 (2 when a call failed). With GO, it
 * waits after the sleep until the file GO exists (looking every 10 ms), so that a test decides when
 * the calls come. Usage: daemon MARKER [extra_sleep_ms [GO]]. Exits with 0 (1 without a marker path,
 * 3 when fork fails). */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 2)
		return 1;
	long extra_ms = argc > 2 ? atol(argv[2]) : 0;
	pid_t pid = fork();
	if (pid < 0)
		return 3;
	if (pid > 0)
		return 0;
	setsid();
	int null = open("/dev/null", O_RDWR);
	dup2(null, 0);
	dup2(null, 1);
	dup2(null, 2);
	long ms = 300 + extra_ms;
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	struct timespec look = {0, 10 * 1000000L};
	while (argc > 3 && access(argv[3], F_OK) != 0)
		nanosleep(&look, NULL);
	int failed = 0;
	for (int i = 0; i < 700; i++) {
		void *p = NULL;
		failed |= cudaMalloc(&p, 4096) != 0 || cudaFree(p) != 0;
	}
	int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0)
		close(fd);
	_exit(failed ? 2 : 0);
}
