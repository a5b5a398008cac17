/* CUDA calls from signal handlers. A handler for SIGUSR1 and SIGALRM makes one cudaMalloc(777) and its
 * cudaFree and counts them. Run with FAKECUDA_RAISE=<SIGUSR1>:1, the first signal arrives from inside
 * the main thread's first cudaMalloc (the fake driver raises it within the first cuMemAlloc_v2); then
 * an interval timer (ITIMER_REAL, every 50 us) interrupts a loop of PAIRS cudaMalloc(4096)/cudaFree
 * pairs on the main thread, so that handlers land in every phase of the shim's work.
 * Usage: sighandler [pairs] (default 200000). Prints "main pairs M, handler pairs H, failures F"
 * (M = pairs + 1) and exits with 0.
 * Known limit: a handler's driver-API call made while the thread is inside a runtime call cannot be
 * told from the runtime's own nested driver call, so the handler uses the runtime API only. */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile sig_atomic_t handler_pairs, handler_failures;

static void on_signal(int sig) {
	(void)sig;
	void *p = NULL;
	if (cudaMalloc(&p, 777) != 0 || cudaFree(p) != 0)
		handler_failures++;
	handler_pairs++;
}

int main(int argc, char **argv) {
	long pairs = argc > 1 ? atol(argv[1]) : 200000, failures = 0;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	void *first = NULL;
	failures += cudaMalloc(&first, 4096) != 0 || cudaFree(first) != 0;
	struct itimerval it = {{0, 50}, {0, 50}};
	setitimer(ITIMER_REAL, &it, NULL);
	for (long i = 0; i < pairs; i++) {
		void *p = NULL;
		failures += cudaMalloc(&p, 4096) != 0 || cudaFree(p) != 0;
	}
	memset(&it, 0, sizeof it);
	setitimer(ITIMER_REAL, &it, NULL);
	printf("main pairs %ld, handler pairs %d, failures %ld\n", pairs + 1, (int)handler_pairs,
	       failures + handler_failures);
	return 0;
}
