/* Waits for SIGINT or SIGTERM: allocates three blocks (1024, 2048 and 3072 bytes), prints "ready",
 * sleeps until one of the two signals arrives, frees the blocks, prints "got signal N" and exits with
 * 42. Used by record's signal-forwarding tests (internal/cli/record): the signal is sent to record,
 * which must pass it on. An alarm ends the program (SIGALRM) if no signal comes within 30 s.
 * Linked with the fake libraries. */
#include "fakecuda.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got;

static void on_signal(int sig) { got = sig; }

int main(void) {
	sigset_t block, wait_mask;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &wait_mask);
	sigdelset(&wait_mask, SIGINT);
	sigdelset(&wait_mask, SIGTERM);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	void *p[3];
	for (int i = 0; i < 3; i++)
		cudaMalloc(&p[i], 1024u * (unsigned)(i + 1));
	alarm(30);
	printf("ready\n");
	fflush(stdout);
	while (!got)
		sigsuspend(&wait_mask);
	for (int i = 0; i < 3; i++)
		cudaFree(p[i]);
	printf("got signal %d\n", (int)got);
	return 42;
}
