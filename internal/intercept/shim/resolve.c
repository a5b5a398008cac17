/* resolve.c: how the real functions are found (see resolve.h), and the dlsym override. */
#include "resolve.h"
#include "hooks.h"

HIDDEN dlsym_fn real_dlsym_fn; /* read by the dlsym trampoline */

/* get_real_dlsym finds the dlsym after the shim (libc's, or another interposer's). The trampoline
 * calls it when a dlsym(RTLD_NEXT, ...) comes before the shim's constructor ran. */
HIDDEN __attribute__((used)) dlsym_fn get_real_dlsym(void) {
	dlsym_fn f = __atomic_load_n(&real_dlsym_fn, __ATOMIC_ACQUIRE);
	if (LIKELY(f != NULL))
		return f;
	f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (f == NULL)
		f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (f == NULL)
		f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17"); /* aarch64 */
	__atomic_store_n(&real_dlsym_fn, f, __ATOMIC_RELEASE);
	return f;
}

static const char *const variant_names[NVARIANTS] = {
#define N_R(name, ...) #name,
#define N_D(name, ...) #name,
	VARIANTS(N_R, N_D)
#undef N_R
#undef N_D
};

void *g_real[NVARIANTS][NPATHS];
static int is_wrapper(void *p);

/* A search of every loaded object for a definition of name that is not the shim's own. */
struct elsewhere_search {
	dlsym_fn rd;
	const char *name;
	void *found;
	const char *shim_name;
};

static int elsewhere_visit(struct dl_phdr_info *info, size_t size, void *data) {
	(void)size;
	struct elsewhere_search *s = data;
	if (info->dlpi_name != NULL && strcmp(info->dlpi_name, s->shim_name) == 0)
		return 1; /* objects after the shim are RTLD_NEXT's business (or not global at all) */
	if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0')
		return 0; /* the main program: RTLD_NEXT already looked there */
	void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL)
		return 0;
	void *p = s->rd(h, s->name);
	shim_dlclose(h);
	if (p != NULL && !is_wrapper(p)) {
		s->found = p;
		return 1;
	}
	return 0;
}

/* real_elsewhere finds the real function when it is defined only in an object loaded BEFORE the shim
 * (LD_PRELOAD=libcudart.so:shim.so), where RTLD_NEXT cannot see it. Only objects ahead of the shim in
 * load order are searched: those are in the global scope, as a plain lookup would see them. */
static void *real_elsewhere(dlsym_fn rd, const char *name) {
	struct elsewhere_search s = {rd, name, NULL, NULL};
	Dl_info self;
	if (dladdr((void *)&real_elsewhere, &self) == 0)
		return NULL;
	s.shim_name = self.dli_fname;
	dl_iterate_phdr(elsewhere_visit, &s);
	return s.found;
}

/* real_in_object looks name up in the object that holds addr and its dependencies (not the global
 * scope, where the shim's export would shadow it); NULL when that gives nothing but a wrapper. */
static void *real_in_object(const void *addr, const char *name) {
	Dl_info info;
	dlsym_fn rd = get_real_dlsym();
	if (rd == NULL || addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL ||
	    info.dli_fname[0] == '\0')
		return NULL;
	void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL)
		return NULL;
	void *p = rd(h, name);
	shim_dlclose(h);
	return p != NULL && !is_wrapper(p) ? p : NULL;
}

/* The NEXT path: the definition after the shim, looked up until found. */
void *real_next(int v) {
	void *p = __atomic_load_n(&g_real[v][P_NEXT], __ATOMIC_ACQUIRE);
	if (LIKELY(p != NULL))
		return p;
	dlsym_fn rd = get_real_dlsym();
	if (rd == NULL)
		return NULL;
	int e = errno;
	p = rd(RTLD_NEXT, variant_names[v]);
	if (p == NULL || is_wrapper(p))
		p = real_elsewhere(rd, variant_names[v]);
	errno = e;
	if (p != NULL)
		__atomic_store_n(&g_real[v][P_NEXT], p, __ATOMIC_RELEASE);
	return p;
}

static void *install(int v, int path, void *real);
static int variant_versioned(const char *sym, long version, unsigned long long flags);
static int export_variant(void *p);

void *resolve_versioned(const char *sym, long version, unsigned long long flags, void *real, int path,
			const void *resolver) {
	if (real == NULL || sym == NULL || !shim_enabled())
		return real;
	int ev = export_variant(real);
	if (ev >= 0) {
		void *own = real_in_object(resolver, variant_names[ev]);
		if (own == NULL)
			return real; /* the export finds the real function as a plain call would */
		real = own;
	} else if (is_wrapper(real)) {
		return real;
	}
	int v = variant_versioned(sym, version, flags);
	if (v < 0)
		return real;
	return install(v, path, real);
}

static int is_wrapper(void *p) {
	for (int v = 0; v < NVARIANTS; v++)
		for (int path = 0; path < NPATHS; path++)
			if (p != NULL && g_wrapper[v][path] == p)
				return 1;
	return 0;
}

/* export_variant returns the variant whose exported wrapper p is, or -1. */
static int export_variant(void *p) {
	for (int v = 0; v < NVARIANTS; v++)
		if (p != NULL && g_wrapper[v][P_NEXT] == p)
			return v;
	return -1;
}

/* install records real as the function behind (v, path) and returns the wrapper; a different real
 * pointer for a slot already taken is returned as it is, so no call is ever routed to the wrong one. */
static void *install(int v, int path, void *real) {
	void *w = g_wrapper[v][path];
	if (w == NULL)
		return real;
	void *cur = NULL;
	if (__atomic_compare_exchange_n(&g_real[v][path], &cur, real, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return w;
	return cur == real ? w : real;
}

static int variant_by_name(const char *name) {
	for (int v = 0; v < NVARIANTS; v++)
		if (strcmp(variant_names[v], name) == 0)
			return v;
	return -1;
}

/* variant_versioned maps a cuGetProcAddress-style request (base name, CUDA version, flags) to a variant. */
static int variant_versioned(const char *sym, long version, unsigned long long flags) {
	static const struct {
		const char *base;
		long min_version; /* below it: an older ABI we do not hook (or, for cuGetProcAddress, the v1) */
		int variant, ptsz_variant, old_variant;
	} table[] = {
		{"cuMemAlloc", 3020, V_cuMemAlloc_v2, -1, -1},
		{"cuMemFree", 3020, V_cuMemFree_v2, -1, -1},
		{"cuMemAllocPitch", 3020, V_cuMemAllocPitch_v2, -1, -1},
		{"cuMemAllocHost", 3020, V_cuMemAllocHost_v2, -1, -1},
		{"cuMemAllocManaged", 0, V_cuMemAllocManaged, -1, -1},
		{"cuMemHostAlloc", 0, V_cuMemHostAlloc, -1, -1},
		{"cuMemFreeHost", 0, V_cuMemFreeHost, -1, -1},
		{"cuMemAllocAsync", 0, V_cuMemAllocAsync, V_cuMemAllocAsync_ptsz, -1},
		{"cuMemFreeAsync", 0, V_cuMemFreeAsync, V_cuMemFreeAsync_ptsz, -1},
		{"cuMemAllocFromPoolAsync", 0, V_cuMemAllocFromPoolAsync, V_cuMemAllocFromPoolAsync_ptsz, -1},
		{"cuMemCreate", 0, V_cuMemCreate, -1, -1},
		{"cuMemRelease", 0, V_cuMemRelease, -1, -1},
		{"cuMemMap", 0, V_cuMemMap, -1, -1},
		{"cuMemUnmap", 0, V_cuMemUnmap, -1, -1},
		{"cuMemAddressReserve", 0, V_cuMemAddressReserve, -1, -1},
		{"cuMemAddressFree", 0, V_cuMemAddressFree, -1, -1},
		{"cuCtxSynchronize", 0, V_cuCtxSynchronize, -1, -1},
		{"cuInit", 2000, V_cuInit, -1, -1},
		{"cuStreamDestroy", 4000, V_cuStreamDestroy_v2, -1, -1},
		{"cuStreamCreate", 0, V_cuStreamCreate, -1, -1},
		{"cuStreamCreateWithPriority", 0, V_cuStreamCreateWithPriority, -1, -1},
		{"cuGreenCtxStreamCreate", 0, V_cuGreenCtxStreamCreate, -1, -1},
		{"cuIpcGetMemHandle", 0, V_cuIpcGetMemHandle, -1, -1},
		{"cuCtxSetCurrent", 0, V_cuCtxSetCurrent, -1, -1},
		{"cuCtxPopCurrent", 4000, V_cuCtxPopCurrent_v2, -1, -1},
		{"cuCtxDestroy", 4000, V_cuCtxDestroy_v2, -1, -1},
		{"cuDevicePrimaryCtxRelease", 11000, V_cuDevicePrimaryCtxRelease_v2, -1, V_cuDevicePrimaryCtxRelease},
		{"cuDevicePrimaryCtxReset", 11000, V_cuDevicePrimaryCtxReset_v2, -1, V_cuDevicePrimaryCtxReset},
		{"cuGetProcAddress", 12000, V_cuGetProcAddress_v2, -1, V_cuGetProcAddress},
		{"cuCtxPushCurrent", 4000, V_cuCtxPushCurrent_v2, -1, -1},
		{"cuMemGetAddressRange", 3020, V_cuMemGetAddressRange_v2, -1, -1},
		{"cuStreamBeginCapture", 10010, V_cuStreamBeginCapture_v2, V_cuStreamBeginCapture_v2_ptsz,
		 V_cuStreamBeginCapture},
		{"cuStreamBeginCaptureToGraph", 0, V_cuStreamBeginCaptureToGraph, V_cuStreamBeginCaptureToGraph_ptsz, -1},
		{"cuStreamEndCapture", 0, V_cuStreamEndCapture, V_cuStreamEndCapture_ptsz, -1},
		{"cuThreadExchangeStreamCaptureMode", 0, V_cuThreadExchangeStreamCaptureMode, -1, -1},
	};
	if (strcmp(sym, "cuCtxCreate") == 0) /* three ABIs: CUDA 3.2, 11.4 (affinity), 12.5 (params) */
		return version >= 12050 ? V_cuCtxCreate_v4 : version >= 11040 ? V_cuCtxCreate_v3 : version >= 3020 ? V_cuCtxCreate_v2 : -1;
	if (sym[0] != 'c' || sym[1] != 'u' || (sym[2] != 'M' && sym[2] != 'G' && sym[2] != 'C' && sym[2] != 'S' && sym[2] != 'I' &&
						      sym[2] != 'D' && sym[2] != 'T'))
		return -1;
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(table[i].base, sym) != 0)
			continue;
		if (version < table[i].min_version)
			return table[i].old_variant;
		if ((flags & PER_THREAD_DEFAULT_STREAM_FLAG) && table[i].ptsz_variant >= 0)
			return table[i].ptsz_variant;
		return table[i].variant;
	}
	int v = variant_by_name(sym); /* a full variant name such as "cuMemAlloc_v2" */
	return v >= V_cuMemAlloc_v2 ? v : -1;
}

/* ---- dlsym override ----------------------------------------------------------------------------- */

/* dlsym_c serves every dlsym call except RTLD_NEXT ones, which the trampoline below sends straight to
 * the real dlsym so that "next" is computed from the caller, not from the shim. */
HIDDEN void *dlsym_c(void *handle, const char *name) {
	dlsym_fn rd = get_real_dlsym();
	if (rd == NULL)
		return NULL;
	void *p = rd(handle, name);
	if (p == NULL || name == NULL || name[0] != 'c' || name[1] != 'u')
		return p;
	int v = variant_by_name(name);
	if (v < 0)
		return p;
	if (p == g_wrapper[v][P_NEXT]) {
		/* Our own export: visible only if the program could have found the real one. */
		return real_next(v) != NULL ? p : NULL;
	}
	if (!shim_enabled() || is_wrapper(p))
		return p;
	return install(v, P_DLSYM, p);
}

/* dlsym: RTLD_NEXT goes to the real dlsym by a tail jump (the caller's return address stays the one it
 * sees), resolving the real dlsym first when no constructor has yet: another library's constructor
 * may call dlsym(RTLD_NEXT, ...) before the shim's runs. */
#if defined(__x86_64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym,@function\n"
	"dlsym:\n"
	"	cmpq $-1, %rdi\n"
	"	jne 1f\n"
	"	movq real_dlsym_fn(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz 2f\n"
	"	jmp *%rax\n"
	"2:	pushq %rdi\n"
	"	pushq %rsi\n"
	"	subq $8, %rsp\n"
	"	call get_real_dlsym\n"
	"	addq $8, %rsp\n"
	"	popq %rsi\n"
	"	popq %rdi\n"
	"	testq %rax, %rax\n"
	"	jz 1f\n"
	"	jmp *%rax\n"
	"1:	jmp dlsym_c\n"
	".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym,%function\n"
	"dlsym:\n"
	"	cmn x0, #1\n"
	"	b.ne 1f\n"
	"	adrp x16, real_dlsym_fn\n"
	"	ldr x16, [x16, :lo12:real_dlsym_fn]\n"
	"	cbz x16, 2f\n"
	"	br x16\n"
	"2:	stp x29, x30, [sp, #-32]!\n"
	"	stp x0, x1, [sp, #16]\n"
	"	bl get_real_dlsym\n"
	"	mov x16, x0\n"
	"	ldp x0, x1, [sp, #16]\n"
	"	ldp x29, x30, [sp], #32\n"
	"	cbz x16, 1f\n"
	"	br x16\n"
	"1:	b dlsym_c\n"
	".size dlsym, .-dlsym\n");
#else
EXPORT void *dlsym(void *handle, const char *name) { return dlsym_c(handle, name); }
#endif

