/* Loads the library argv[1] (testdata/preload/plugin.c) with dlopen, allocates through its
 * plugin_alloc, frees the block, unloads the library with dlclose and only then exits: the
 * library's mappings are gone before the shim's exit, so it must have saved them at the dlclose.
 * Exits 0, or 2 when the library cannot be loaded. */
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
	void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
	void *(*plugin_alloc)(void) = h != NULL ? (void *(*)(void))dlsym(h, "plugin_alloc") : NULL;
	if (plugin_alloc == NULL) {
		fprintf(stderr, "plugin: %s\n", dlerror());
		return 2;
	}
	cudaFree(plugin_alloc());
	dlclose(h);
	return 0;
}
