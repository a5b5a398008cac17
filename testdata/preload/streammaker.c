/* A library that makes a non-blocking stream in its constructor, as a library may before a shim
 * loaded ahead of it has run its own constructor: it finds the driver as the runtime does (dlopen,
 * dlsym "cuGetProcAddress_v2", then cuStreamCreate through it). Its destructor prints on stderr the
 * streams the fake driver made wait for an event: "streammaker: stream waits N".
 * Build: cc -shared -fPIC -o libstreammaker.so streammaker.c -ldl */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>

typedef void (*events_fn)(long *, long *, long *);

static events_fn events;

__attribute__((constructor)) static void streammaker_init(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return;
	PFN_cuGetProcAddress_v2 gpa = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
	events = (events_fn)dlsym(h, "fakecuda_events");
	CUresult (*create)(CUstream *, unsigned int) = NULL;
	CUstream s;
	if (gpa == NULL || gpa("cuStreamCreate", (void **)&create, 12000, 0, NULL) != CUDA_SUCCESS || create == NULL ||
	    create(&s, 0x1 /* CU_STREAM_NON_BLOCKING */) != CUDA_SUCCESS)
		fprintf(stderr, "streammaker: no stream\n");
}

__attribute__((destructor)) static void streammaker_fini(void) {
	long recorded = 0, waits = 0, host = 0;
	if (events != NULL)
		events(&recorded, &waits, &host);
	fprintf(stderr, "streammaker: stream waits %ld\n", waits);
}
