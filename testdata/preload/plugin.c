/* A library a program loads with dlopen and unloads with dlclose before it exits (a plugin, a
 * framework's extension): testdata/progs/plugin.c calls plugin_alloc, whose cudaMalloc analyze must
 * still name after the library is gone. Build: cc -shared -fPIC -o libplugin.so plugin.c */
#include "fakecuda.h"

__attribute__((noinline)) void *plugin_alloc(void) {
	void *p = 0;
	cudaMalloc(&p, 8192);
	return p;
}
