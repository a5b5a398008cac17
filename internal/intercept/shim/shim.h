/*
 * The shim's start (shim.c): whether it records, and its start-up, which a hook may run before the
 * shim's constructor when another library's constructor calls CUDA first.
 */
#ifndef ALLOCSCOPE_SHIM_H
#define ALLOCSCOPE_SHIM_H

#include "common.h"

extern int g_enabled;   /* logging on: ALLOCSCOPE_LOG_DIR was set at start-up */
extern int g_init_done;
void shim_init(void);   /* shim.c */

/* shim_enabled reports whether the shim records (and wraps what the program resolves), starting it
 * first when it runs before the shim's constructor, from another library's: a stream that library
 * makes then goes through the hooks too. */
static inline int shim_enabled(void) {
	if (UNLIKELY(!__atomic_load_n(&g_init_done, __ATOMIC_ACQUIRE)))
		shim_init();
	return __atomic_load_n(&g_enabled, __ATOMIC_ACQUIRE);
}

#endif
