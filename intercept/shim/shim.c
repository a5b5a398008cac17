/*
 * allocscope LD_PRELOAD shim: records every CUDA memory allocation and free of an unmodified program
 * into a memory-mapped per-process raw log (format: docs/DESIGN.md, reader: intercept/rawlog.go).
 *
 * Built by intercept.BuildShim with: cc -shared -fPIC -O2 -o liballocscope.so shim.c -ldl -lpthread
 * No CUDA headers are needed: the few CUDA types used are declared below with their documented ABI.
 *
 * How calls are seen:
 *   - plain symbol binding: the shim exports every hooked name; the real one comes from dlsym(RTLD_NEXT);
 *   - dlsym on a dlopen'ed libcuda / libcudart: the shim overrides dlsym and hands back its wrappers;
 *   - cuGetProcAddress / cuGetProcAddress_v2 (static cudart), including the lookup of "cuGetProcAddress";
 *   - cudaGetDriverEntryPoint / cudaGetDriverEntryPointByVersion.
 * Each way of resolving a function (a "path") has its own wrapper and its own slot for the real
 * pointer, so a wrapper always calls the function the program would have called without the shim.
 * If a path hands out a second, different real pointer for a function, that one is returned unwrapped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define TLS __thread __attribute__((tls_model("initial-exec")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- CUDA types (ABI only) ---------------------------------------------------------------------- */

typedef int cudaError_t;
typedef int CUresult;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUdevice;
struct cudaPitchedPtr { void *ptr; size_t pitch; size_t xsize; size_t ysize; };
struct cudaExtent { size_t width; size_t height; size_t depth; };
/* The head of CUmemAllocationProp: type, requestedHandleTypes, location {type, id}. */
struct memAllocPropHead { int type; int requestedHandleTypes; int locationType; int locationId; };
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_UNKNOWN_RUNTIME 999
#define PER_THREAD_DEFAULT_STREAM_FLAG 2ull /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

/* ---- function ids: the table rawlog.go mirrors (TestFunctionTableMatchesShim checks it) ---------- */

/* FUNCTION_TABLE_BEGIN  id name op memory layer */
#define FUNCTIONS(X)                                                              \
	X(1, cudaMalloc, alloc, device, runtime)                                  \
	X(2, cudaFree, free, device, runtime)                                     \
	X(3, cudaMallocAsync, alloc, device, runtime)                             \
	X(4, cudaFreeAsync, free, device, runtime)                                \
	X(5, cudaMallocFromPoolAsync, alloc, device, runtime)                     \
	X(6, cudaMallocManaged, alloc, managed, runtime)                          \
	X(7, cudaMallocPitch, alloc, device, runtime)                             \
	X(8, cudaMalloc3D, alloc, device, runtime)                                \
	X(9, cudaMallocHost, alloc, host, runtime)                                \
	X(10, cudaHostAlloc, alloc, host, runtime)                                \
	X(11, cudaFreeHost, free, host, runtime)                                  \
	X(12, cuMemAlloc_v2, alloc, device, driver)                               \
	X(13, cuMemFree_v2, free, device, driver)                                 \
	X(14, cuMemAllocPitch_v2, alloc, device, driver)                          \
	X(15, cuMemAllocManaged, alloc, managed, driver)                          \
	X(16, cuMemAllocAsync, alloc, device, driver)                             \
	X(17, cuMemAllocAsync_ptsz, alloc, device, driver)                        \
	X(18, cuMemFreeAsync, free, device, driver)                               \
	X(19, cuMemFreeAsync_ptsz, free, device, driver)                          \
	X(20, cuMemAllocFromPoolAsync, alloc, device, driver)                     \
	X(21, cuMemAllocFromPoolAsync_ptsz, alloc, device, driver)                \
	X(22, cuMemAllocHost_v2, alloc, host, driver)                             \
	X(23, cuMemHostAlloc, alloc, host, driver)                                \
	X(24, cuMemFreeHost, free, host, driver)                                  \
	X(25, cuMemCreate, create, virtual, driver)                               \
	X(26, cuMemRelease, release, virtual, driver)                             \
	X(27, cuMemMap, map, virtual, driver)                                     \
	X(28, cuMemUnmap, unmap, virtual, driver)                                 \
	X(29, cuMemAddressReserve, reserve, virtual, driver)                      \
	X(30, cuMemAddressFree, unreserve, virtual, driver)
/* FUNCTION_TABLE_END */

enum {
#define X(id, name, op, mem, layer) FID_##name = id,
	FUNCTIONS(X)
#undef X
	FID_COUNT
};

/* ---- raw log format (docs/DESIGN.md) ------------------------------------------------------------- */

#define HEADER_SIZE 4096
#define RECORD_SIZE 64
#define CHUNK_SIZE (1u << 20)
#define RECORDS_PER_CHUNK (CHUNK_SIZE / RECORD_SIZE)
#define CHUNK_SHIFT 14 /* log2(RECORDS_PER_CHUNK) */
#define MAX_CHUNKS (1u << 18)
#define FLAG_PRIVATE_SEQ 1ull

struct log_header {
	char magic[8];
	uint32_t version;
	uint32_t record_size;
	uint32_t pid;
	uint32_t ppid;
	int64_t start_mono_ns;
	int64_t start_real_ns;
	uint64_t flags;
	uint64_t claimed;
	uint32_t cmdline_len;
	char cmdline[HEADER_SIZE - 60];
};

struct record {
	uint64_t seq;
	int64_t time_ns;
	int64_t duration_ns;
	uint64_t address;
	uint64_t size;
	uint64_t stream;
	uint64_t callsite;
	uint32_t tid;
	uint16_t result;
	int8_t device;
	uint8_t function;
};

_Static_assert(sizeof(struct log_header) == HEADER_SIZE, "header size");
_Static_assert(sizeof(struct record) == RECORD_SIZE, "record size");
_Static_assert(RECORDS_PER_CHUNK == (1u << CHUNK_SHIFT), "chunk shift");

/* ---- global state ------------------------------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);

enum { LOG_UNINIT = 0, LOG_READY = 1, LOG_OFF = 2 };

HIDDEN dlsym_fn real_dlsym_fn; /* read by the dlsym trampoline */
static int g_enabled;          /* ALLOCSCOPE_LOG_DIR was set at start-up */
static int g_init_done;
static char g_dir[PATH_MAX];

static int g_log_state; /* LOG_* */
static int g_log_fd = -1;
static struct log_header *g_hdr;
static char **g_chunks;        /* MAX_CHUNKS pointers, anonymous mapping */
static uint32_t g_chunks_used; /* highest chunk index mapped + 1 */
static int g_chunk_lock;
static uint64_t *g_seq;        /* shared counter (seq file) or &g_private_seq */
static uint64_t g_private_seq;
static char g_log_path[PATH_MAX + 64];

static TLS int t_depth;
static TLS uint32_t t_tid;

static void spin_lock(int *l) {
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}
static void spin_unlock(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

static inline int64_t now_ns(clockid_t clk) {
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint32_t current_tid(void) {
	if (UNLIKELY(t_tid == 0))
		t_tid = (uint32_t)syscall(SYS_gettid);
	return t_tid;
}

static dlsym_fn get_real_dlsym(void) {
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

/* ---- address -> size map (lock-free open addressing; a chain of tables grown under a lock) ------ */

#define MAP_EMPTY 0ull
#define MAP_TOMB (~0ull)
#define MAP_MAX_PROBE 512
#define MAP_MAX_TABLES 6
#define MAP_FIRST_BITS 20
#define VAL_PRESENT (1ull << 63)
#define VAL_SIZE_MASK ((1ull << 55) - 1)

struct map_slot { uint64_t key; uint64_t val; };
struct map_table { unsigned bits; struct map_slot *slots; };
struct addr_map {
	struct map_table tables[MAP_MAX_TABLES];
	int ntables;
	int lock;
};

static struct addr_map g_addrs;   /* device/host/managed addresses and reserved ranges */
static struct addr_map g_handles; /* cuMemCreate handles */

static inline uint64_t pack_val(uint64_t size, int dev) {
	return VAL_PRESENT | ((uint64_t)(uint8_t)(dev + 1) << 55) | (size & VAL_SIZE_MASK);
}
static inline uint64_t val_size(uint64_t v) { return v & VAL_SIZE_MASK; }
static inline int val_device(uint64_t v) { return v ? (int)((v >> 55) & 0xff) - 1 : -1; }

static inline uint64_t map_hash(uint64_t key, unsigned bits) {
	return (key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

static int map_grow(struct addr_map *m, int seen) {
	spin_lock(&m->lock);
	int n = __atomic_load_n(&m->ntables, __ATOMIC_ACQUIRE);
	if (n == seen && n < MAP_MAX_TABLES) {
		unsigned bits = MAP_FIRST_BITS + 2 * (unsigned)n;
		void *p = mmap(NULL, sizeof(struct map_slot) << bits, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED) {
			m->tables[n].bits = bits;
			__atomic_store_n(&m->tables[n].slots, (struct map_slot *)p, __ATOMIC_RELEASE);
			__atomic_store_n(&m->ntables, n + 1, __ATOMIC_RELEASE);
		}
	}
	n = __atomic_load_n(&m->ntables, __ATOMIC_ACQUIRE);
	spin_unlock(&m->lock);
	return n > seen;
}

static void map_insert(struct addr_map *m, uint64_t key, uint64_t val) {
	if (key == MAP_EMPTY || key == MAP_TOMB)
		return;
	for (;;) {
		int n = __atomic_load_n(&m->ntables, __ATOMIC_ACQUIRE);
		for (int t = 0; t < n; t++) {
			struct map_table *tab = &m->tables[t];
			uint64_t mask = (1ull << tab->bits) - 1;
			uint64_t i = map_hash(key, tab->bits);
			for (int p = 0; p < MAP_MAX_PROBE; p++, i = (i + 1) & mask) {
				struct map_slot *s = &tab->slots[i];
				uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
				if (k == key) {
					__atomic_store_n(&s->val, val, __ATOMIC_RELEASE);
					return;
				}
				if ((k == MAP_EMPTY || k == MAP_TOMB) &&
				    __atomic_compare_exchange_n(&s->key, &k, key, 0, __ATOMIC_ACQ_REL,
								__ATOMIC_ACQUIRE)) {
					__atomic_store_n(&s->val, val, __ATOMIC_RELEASE);
					return;
				}
			}
		}
		if (!map_grow(m, n))
			return; /* out of tables or memory: the free will carry size 0 */
	}
}

/* map_find returns the value stored for key (0 if none); with remove set it also removes the entry. */
static uint64_t map_find(struct addr_map *m, uint64_t key, int remove) {
	if (key == MAP_EMPTY || key == MAP_TOMB)
		return 0;
	int n = __atomic_load_n(&m->ntables, __ATOMIC_ACQUIRE);
	for (int t = 0; t < n; t++) {
		struct map_table *tab = &m->tables[t];
		uint64_t mask = (1ull << tab->bits) - 1;
		uint64_t i = map_hash(key, tab->bits);
		for (int p = 0; p < MAP_MAX_PROBE; p++, i = (i + 1) & mask) {
			struct map_slot *s = &tab->slots[i];
			uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
			if (k == MAP_EMPTY)
				break;
			if (k != key)
				continue;
			uint64_t v = __atomic_load_n(&s->val, __ATOMIC_ACQUIRE);
			if (!remove)
				return v;
			if (__atomic_compare_exchange_n(&s->key, &k, MAP_TOMB, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE))
				return v;
			return 0; /* another thread removed it first */
		}
	}
	return 0;
}

/* ---- the raw log ------------------------------------------------------------------------------- */

static void log_fail(const char *path, int err) {
	int st = __atomic_exchange_n(&g_log_state, LOG_OFF, __ATOMIC_ACQ_REL);
	if (st == LOG_OFF)
		return;
	char buf[PATH_MAX + 256];
	char ebuf[128];
	const char *msg = strerror_r(err, ebuf, sizeof ebuf);
	int n = snprintf(buf, sizeof buf, "allocscope: cannot write log %s: %s; recording stopped\n", path,
			 msg);
	if (n > (int)sizeof buf - 1)
		n = (int)sizeof buf - 1;
	if (n > 0) {
		ssize_t w = write(2, buf, (size_t)n);
		(void)w;
	}
}

static void map_seq_counter(uint64_t *flags) {
	char path[PATH_MAX + 8];
	snprintf(path, sizeof path, "%s/seq", g_dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		struct stat st;
		if (fstat(fd, &st) == 0 && st.st_size >= 8) {
			void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (p != MAP_FAILED) {
				close(fd);
				g_seq = (uint64_t *)p;
				return;
			}
		}
		close(fd);
	}
	g_private_seq = (uint64_t)getpid() << 40;
	g_seq = &g_private_seq;
	*flags |= FLAG_PRIVATE_SEQ;
}

static void fill_cmdline(struct log_header *h) {
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	size_t n = 0;
	while (n < sizeof h->cmdline) {
		ssize_t r = read(fd, h->cmdline + n, sizeof h->cmdline - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	h->cmdline_len = (uint32_t)n;
}

/* log_open creates this process's log file. Called with g_chunk_lock held. */
static void log_open(void) {
	uint64_t flags = 0;
	if (g_seq == NULL)
		map_seq_counter(&flags);
	else if (g_seq == &g_private_seq)
		flags |= FLAG_PRIVATE_SEQ;
	int64_t mono = now_ns(CLOCK_MONOTONIC);
	snprintf(g_log_path, sizeof g_log_path, "%s/%d-%lld.alog", g_dir, (int)getpid(), (long long)mono);
	int fd = open(g_log_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_fail(g_log_path, errno);
		return;
	}
	int err = posix_fallocate(fd, 0, HEADER_SIZE);
	void *hp = MAP_FAILED;
	if (err == 0) {
		hp = mmap(NULL, HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (hp == MAP_FAILED)
			err = errno;
	}
	if (g_chunks == NULL && err == 0) {
		void *c = mmap(NULL, sizeof(char *) * MAX_CHUNKS, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (c == MAP_FAILED)
			err = errno;
		else
			g_chunks = (char **)c;
	}
	if (err != 0) {
		if (hp != MAP_FAILED)
			munmap(hp, HEADER_SIZE);
		close(fd);
		log_fail(g_log_path, err);
		return;
	}
	struct log_header *h = (struct log_header *)hp;
	h->version = 1;
	h->record_size = RECORD_SIZE;
	h->pid = (uint32_t)getpid();
	h->ppid = (uint32_t)getppid();
	h->start_mono_ns = mono;
	h->start_real_ns = now_ns(CLOCK_REALTIME);
	h->flags = flags;
	fill_cmdline(h);
	memcpy(h->magic, "ALSCOPE1", 8);
	g_log_fd = fd;
	g_hdr = h;
	__atomic_store_n(&g_log_state, LOG_READY, __ATOMIC_RELEASE);
}

/* log_ready makes sure the log is open; it returns 0 when nothing can be recorded. */
static inline int log_ready(void) {
	int st = __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE);
	if (LIKELY(st == LOG_READY))
		return 1;
	if (st == LOG_OFF)
		return 0;
	int e = errno;
	spin_lock(&g_chunk_lock);
	if (__atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_UNINIT)
		log_open();
	spin_unlock(&g_chunk_lock);
	errno = e;
	return __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_READY;
}

static char *map_chunk(uint64_t c) {
	if (c >= MAX_CHUNKS) {
		log_fail(g_log_path, EFBIG);
		return NULL;
	}
	spin_lock(&g_chunk_lock);
	char *p = __atomic_load_n(&g_chunks[c], __ATOMIC_ACQUIRE);
	if (p == NULL && __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_READY) {
		off_t off = HEADER_SIZE + (off_t)c * CHUNK_SIZE;
		int err = posix_fallocate(g_log_fd, off, CHUNK_SIZE);
		if (err == 0) {
			void *m = mmap(NULL, CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, g_log_fd, off);
			if (m == MAP_FAILED)
				err = errno;
			else
				p = (char *)m;
		}
		if (err != 0) {
			log_fail(g_log_path, err);
		} else {
			__atomic_store_n(&g_chunks[c], p, __ATOMIC_RELEASE);
			if (c + 1 > g_chunks_used)
				g_chunks_used = (uint32_t)(c + 1);
		}
	}
	spin_unlock(&g_chunk_lock);
	return p;
}

/* A claimed slot: where the record goes and its seq. */
struct slot { struct record *rec; uint64_t seq; };

static inline struct slot claim(void) {
	struct slot s = {NULL, 0};
	s.seq = __atomic_fetch_add(g_seq, 1, __ATOMIC_RELAXED);
	uint64_t idx = __atomic_fetch_add(&g_hdr->claimed, 1, __ATOMIC_RELAXED);
	uint64_t c = idx >> CHUNK_SHIFT;
	char *base = LIKELY(c < MAX_CHUNKS) ? __atomic_load_n(&g_chunks[c], __ATOMIC_ACQUIRE) : NULL;
	if (UNLIKELY(base == NULL))
		base = map_chunk(c);
	if (LIKELY(base != NULL))
		s.rec = (struct record *)(base + (idx & (RECORDS_PER_CHUNK - 1)) * RECORD_SIZE);
	return s;
}

static inline void commit(struct slot s, int fid, int64_t t0, int64_t dur, uint64_t addr, uint64_t size,
			  uint64_t stream, void *callsite, int result, int device) {
	struct record *r = s.rec;
	if (r == NULL)
		return;
	r->seq = s.seq;
	r->time_ns = t0;
	r->duration_ns = dur;
	r->address = addr;
	r->size = size;
	r->stream = stream;
	r->callsite = (uint64_t)(uintptr_t)callsite;
	r->tid = current_tid();
	r->result = (uint16_t)result;
	r->device = (int8_t)(device < -1 || device > 127 ? -1 : device);
	__atomic_store_n(&r->function, (uint8_t)fid, __ATOMIC_RELEASE);
}

/* ---- current device (real cuCtxGetDevice, resolved once) ---------------------------------------- */

typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *);
static cuCtxGetDevice_fn g_ctx_get_device;

static int current_device(void) {
	cuCtxGetDevice_fn f = __atomic_load_n(&g_ctx_get_device, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		if (h == NULL)
			return -1;
		dlsym_fn rd = get_real_dlsym();
		f = rd ? (cuCtxGetDevice_fn)rd(h, "cuCtxGetDevice") : NULL;
		if (f == NULL)
			return -1;
		__atomic_store_n(&g_ctx_get_device, f, __ATOMIC_RELEASE);
	}
	CUdevice d = -1;
	if (f(&d) != 0)
		return -1;
	return d;
}

/* ---- hook bodies -------------------------------------------------------------------------------- */

/* An allocation: seq taken after the real call. */
#define ALLOC_BODY(CALL, FID, IS_DEVICE, OUT_ADDR, SIZE_EXPR, STREAM, MAP)                                 \
	do {                                                                                             \
		if (t_depth != 0 || !g_enabled || !log_ready())                                          \
			return CALL;                                                                     \
		t_depth = 1;                                                                             \
		int64_t t0 = now_ns(CLOCK_MONOTONIC);                                                    \
		int r_ = CALL;                                                                           \
		int64_t t1 = now_ns(CLOCK_MONOTONIC);                                                    \
		int e_ = errno;                                                                          \
		uint64_t addr_ = r_ == 0 ? (uint64_t)(OUT_ADDR) : 0;                                     \
		uint64_t size_ = (uint64_t)(SIZE_EXPR);                                                  \
		int dev_ = (r_ == 0 && (IS_DEVICE)) ? current_device() : -1;                             \
		if (addr_ != 0 && (MAP) != NULL)                                                         \
			map_insert((MAP), addr_, pack_val(size_, dev_));                                 \
		commit(claim(), FID, t0, t1 - t0, addr_, size_, (uint64_t)(uintptr_t)(STREAM), cs, r_,  \
		       dev_);                                                                            \
		t_depth = 0;                                                                             \
		errno = e_;                                                                              \
		return r_;                                                                               \
	} while (0)

/* A free: seq and size taken before the real call; the map entry comes back if the call fails. */
#define FREE_BODY(CALL, FID, MAP, KEY, STREAM)                                                           \
	do {                                                                                             \
		if (t_depth != 0 || !g_enabled || !log_ready())                                          \
			return CALL;                                                                     \
		t_depth = 1;                                                                             \
		int e0_ = errno;                                                                         \
		uint64_t key_ = (uint64_t)(KEY);                                                         \
		struct slot s_ = claim();                                                                \
		uint64_t v_ = map_find(MAP, key_, 1);                                                    \
		errno = e0_;                                                                             \
		int64_t t0 = now_ns(CLOCK_MONOTONIC);                                                    \
		int r_ = CALL;                                                                           \
		int64_t t1 = now_ns(CLOCK_MONOTONIC);                                                    \
		int e_ = errno;                                                                          \
		if (r_ != 0 && v_ != 0)                                                                  \
			map_insert(MAP, key_, v_);                                                       \
		commit(s_, FID, t0, t1 - t0, key_, val_size(v_), (uint64_t)(uintptr_t)(STREAM), cs, r_, \
		       val_device(v_));                                                                  \
		t_depth = 0;                                                                             \
		errno = e_;                                                                              \
		return r_;                                                                               \
	} while (0)

/* A call that carries its own size (map, unmap, address free): seq after the call. */
#define PLAIN_BODY(CALL, FID, ADDR, SIZE, STREAM, DEVICE_EXPR)                                           \
	do {                                                                                             \
		if (t_depth != 0 || !g_enabled || !log_ready())                                          \
			return CALL;                                                                     \
		t_depth = 1;                                                                             \
		int64_t t0 = now_ns(CLOCK_MONOTONIC);                                                    \
		int r_ = CALL;                                                                           \
		int64_t t1 = now_ns(CLOCK_MONOTONIC);                                                    \
		int e_ = errno;                                                                          \
		int dev_ = (DEVICE_EXPR);                                                                \
		commit(claim(), FID, t0, t1 - t0, (uint64_t)(ADDR), (uint64_t)(SIZE),                   \
		       (uint64_t)(STREAM), cs, r_, dev_);                                                \
		t_depth = 0;                                                                             \
		errno = e_;                                                                              \
		return r_;                                                                               \
	} while (0)

#define PTR(p) ((uint64_t)(uintptr_t)(p))

/* Function pointer types, and one body per function taking the real pointer and the callsite. */
typedef cudaError_t (*cudaMalloc_fn)(void **, size_t);
typedef cudaError_t (*cudaFree_fn)(void *);
typedef cudaError_t (*cudaMallocAsync_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*cudaFreeAsync_fn)(void *, cudaStream_t);
typedef cudaError_t (*cudaMallocFromPoolAsync_fn)(void **, size_t, cudaMemPool_t, cudaStream_t);
typedef cudaError_t (*cudaMallocManaged_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*cudaMallocPitch_fn)(void **, size_t *, size_t, size_t);
typedef cudaError_t (*cudaMalloc3D_fn)(struct cudaPitchedPtr *, struct cudaExtent);
typedef cudaError_t (*cudaMallocHost_fn)(void **, size_t);
typedef cudaError_t (*cudaHostAlloc_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*cudaFreeHost_fn)(void *);
typedef CUresult (*cuMemAlloc_v2_fn)(CUdeviceptr *, size_t);
typedef CUresult (*cuMemFree_v2_fn)(CUdeviceptr);
typedef CUresult (*cuMemAllocPitch_v2_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*cuMemAllocManaged_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*cuMemAllocAsync_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*cuMemFreeAsync_fn)(CUdeviceptr, CUstream);
typedef CUresult (*cuMemAllocFromPoolAsync_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*cuMemAllocHost_v2_fn)(void **, size_t);
typedef CUresult (*cuMemHostAlloc_fn)(void **, size_t, unsigned int);
typedef CUresult (*cuMemFreeHost_fn)(void *);
typedef CUresult (*cuMemCreate_fn)(CUmemGenericAllocationHandle *, size_t, const void *, unsigned long long);
typedef CUresult (*cuMemRelease_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuMemMap_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*cuMemUnmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuMemAddressReserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*cuMemAddressFree_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuGetProcAddress_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*cuGetProcAddress_v2_fn)(const char *, void **, int, unsigned long long, void *);
typedef cudaError_t (*cudaGetDriverEntryPoint_fn)(const char *, void **, unsigned long long, void *);
typedef cudaError_t (*cudaGetDriverEntryPointByVersion_fn)(const char *, void **, unsigned int,
							    unsigned long long, void *);

#define BODY static inline __attribute__((always_inline))

BODY cudaError_t b_cudaMalloc(cudaMalloc_fn f, int fid, void *cs, void **p, size_t n) {
	ALLOC_BODY(f(p, n), fid, 1, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaFree(cudaFree_fn f, int fid, void *cs, void *p) {
	FREE_BODY(f(p), fid, &g_addrs, PTR(p), 0);
}
BODY cudaError_t b_cudaMallocAsync(cudaMallocAsync_fn f, int fid, void *cs, void **p, size_t n, cudaStream_t s) {
	ALLOC_BODY(f(p, n, s), fid, 1, PTR(*p), n, s, &g_addrs);
}
BODY cudaError_t b_cudaFreeAsync(cudaFreeAsync_fn f, int fid, void *cs, void *p, cudaStream_t s) {
	FREE_BODY(f(p, s), fid, &g_addrs, PTR(p), s);
}
BODY cudaError_t b_cudaMallocFromPoolAsync(cudaMallocFromPoolAsync_fn f, int fid, void *cs, void **p, size_t n,
					   cudaMemPool_t pool, cudaStream_t s) {
	ALLOC_BODY(f(p, n, pool, s), fid, 1, PTR(*p), n, s, &g_addrs);
}
BODY cudaError_t b_cudaMallocManaged(cudaMallocManaged_fn f, int fid, void *cs, void **p, size_t n, unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaMallocPitch(cudaMallocPitch_fn f, int fid, void *cs, void **p, size_t *pitch, size_t w,
				   size_t h) {
	ALLOC_BODY(f(p, pitch, w, h), fid, 1, PTR(*p), r_ == 0 ? *pitch * h : w * h, 0, &g_addrs);
}
BODY cudaError_t b_cudaMalloc3D(cudaMalloc3D_fn f, int fid, void *cs, struct cudaPitchedPtr *pp,
				struct cudaExtent e) {
	ALLOC_BODY(f(pp, e), fid, 1, PTR(pp->ptr), r_ == 0 ? pp->pitch * e.height * e.depth : e.width * e.height * e.depth,
		   0, &g_addrs);
}
BODY cudaError_t b_cudaMallocHost(cudaMallocHost_fn f, int fid, void *cs, void **p, size_t n) {
	ALLOC_BODY(f(p, n), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaHostAlloc(cudaHostAlloc_fn f, int fid, void *cs, void **p, size_t n, unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY cudaError_t b_cudaFreeHost(cudaFreeHost_fn f, int fid, void *cs, void *p) {
	FREE_BODY(f(p), fid, &g_addrs, PTR(p), 0);
}
BODY CUresult b_cuMemAlloc_v2(cuMemAlloc_v2_fn f, int fid, void *cs, CUdeviceptr *p, size_t n) {
	ALLOC_BODY(f(p, n), fid, 1, *p, n, 0, &g_addrs);
}
BODY CUresult b_cuMemFree_v2(cuMemFree_v2_fn f, int fid, void *cs, CUdeviceptr p) {
	FREE_BODY(f(p), fid, &g_addrs, p, 0);
}
BODY CUresult b_cuMemAllocPitch_v2(cuMemAllocPitch_v2_fn f, int fid, void *cs, CUdeviceptr *p, size_t *pitch,
				   size_t w, size_t h, unsigned el) {
	ALLOC_BODY(f(p, pitch, w, h, el), fid, 1, *p, r_ == 0 ? *pitch * h : w * h, 0, &g_addrs);
}
BODY CUresult b_cuMemAllocManaged(cuMemAllocManaged_fn f, int fid, void *cs, CUdeviceptr *p, size_t n,
				  unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, *p, n, 0, &g_addrs);
}
BODY CUresult b_cuMemAllocAsync(cuMemAllocAsync_fn f, int fid, void *cs, CUdeviceptr *p, size_t n, CUstream s) {
	ALLOC_BODY(f(p, n, s), fid, 1, *p, n, s, &g_addrs);
}
BODY CUresult b_cuMemFreeAsync(cuMemFreeAsync_fn f, int fid, void *cs, CUdeviceptr p, CUstream s) {
	FREE_BODY(f(p, s), fid, &g_addrs, p, s);
}
BODY CUresult b_cuMemAllocFromPoolAsync(cuMemAllocFromPoolAsync_fn f, int fid, void *cs, CUdeviceptr *p,
					size_t n, CUmemoryPool pool, CUstream s) {
	ALLOC_BODY(f(p, n, pool, s), fid, 1, *p, n, s, &g_addrs);
}
BODY CUresult b_cuMemAllocHost_v2(cuMemAllocHost_v2_fn f, int fid, void *cs, void **p, size_t n) {
	ALLOC_BODY(f(p, n), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY CUresult b_cuMemHostAlloc(cuMemHostAlloc_fn f, int fid, void *cs, void **p, size_t n, unsigned fl) {
	ALLOC_BODY(f(p, n, fl), fid, 0, PTR(*p), n, 0, &g_addrs);
}
BODY CUresult b_cuMemFreeHost(cuMemFreeHost_fn f, int fid, void *cs, void *p) {
	FREE_BODY(f(p), fid, &g_addrs, PTR(p), 0);
}

static int prop_device(const void *prop) {
	const struct memAllocPropHead *h = (const struct memAllocPropHead *)prop;
	if (h != NULL && h->locationType == CU_MEM_LOCATION_TYPE_DEVICE)
		return h->locationId;
	return -1;
}

BODY CUresult b_cuMemCreate(cuMemCreate_fn f, int fid, void *cs, CUmemGenericAllocationHandle *h, size_t n,
			    const void *prop, unsigned long long fl) {
	if (t_depth != 0 || !g_enabled || !log_ready())
		return f(h, n, prop, fl);
	t_depth = 1;
	int64_t t0 = now_ns(CLOCK_MONOTONIC);
	int r = f(h, n, prop, fl);
	int64_t t1 = now_ns(CLOCK_MONOTONIC);
	int e = errno;
	uint64_t handle = r == 0 ? *h : 0;
	int dev = r == 0 ? prop_device(prop) : -1;
	if (handle != 0)
		map_insert(&g_handles, handle, pack_val(n, dev));
	commit(claim(), fid, t0, t1 - t0, handle, n, 0, cs, r, dev);
	t_depth = 0;
	errno = e;
	return r;
}
BODY CUresult b_cuMemRelease(cuMemRelease_fn f, int fid, void *cs, CUmemGenericAllocationHandle h) {
	FREE_BODY(f(h), fid, &g_handles, h, 0);
}
BODY CUresult b_cuMemMap(cuMemMap_fn f, int fid, void *cs, CUdeviceptr p, size_t n, size_t off,
			 CUmemGenericAllocationHandle h, unsigned long long fl) {
	PLAIN_BODY(f(p, n, off, h, fl), fid, p, n, h, val_device(map_find(&g_handles, h, 0)));
}
BODY CUresult b_cuMemUnmap(cuMemUnmap_fn f, int fid, void *cs, CUdeviceptr p, size_t n) {
	PLAIN_BODY(f(p, n), fid, p, n, 0, -1);
}
BODY CUresult b_cuMemAddressReserve(cuMemAddressReserve_fn f, int fid, void *cs, CUdeviceptr *p, size_t n,
				    size_t align, CUdeviceptr addr, unsigned long long fl) {
	ALLOC_BODY(f(p, n, align, addr, fl), fid, 0, *p, n, 0, NULL);
}
BODY CUresult b_cuMemAddressFree(cuMemAddressFree_fn f, int fid, void *cs, CUdeviceptr p, size_t n) {
	PLAIN_BODY(f(p, n), fid, p, n, 0, -1);
}

/* ---- resolution: variants, paths, wrappers ------------------------------------------------------ */

enum { P_NEXT, P_DLSYM, P_GPA, P_EP, NPATHS };

/* Every interposed entry point. R: runtime (paths NEXT, DLSYM), D: driver (all four paths). */
#define VARIANTS(R, D)                                                                                   \
	R(cudaMalloc, cudaError_t, (void **p, size_t n), (p, n))                                         \
	R(cudaFree, cudaError_t, (void *p), (p))                                                         \
	R(cudaMallocAsync, cudaError_t, (void **p, size_t n, cudaStream_t s), (p, n, s))                 \
	R(cudaFreeAsync, cudaError_t, (void *p, cudaStream_t s), (p, s))                                 \
	R(cudaMallocFromPoolAsync, cudaError_t, (void **p, size_t n, cudaMemPool_t m, cudaStream_t s),   \
	  (p, n, m, s))                                                                                  \
	R(cudaMallocManaged, cudaError_t, (void **p, size_t n, unsigned fl), (p, n, fl))                 \
	R(cudaMallocPitch, cudaError_t, (void **p, size_t *pi, size_t w, size_t h), (p, pi, w, h))       \
	R(cudaMalloc3D, cudaError_t, (struct cudaPitchedPtr * p, struct cudaExtent e), (p, e))           \
	R(cudaMallocHost, cudaError_t, (void **p, size_t n), (p, n))                                     \
	R(cudaHostAlloc, cudaError_t, (void **p, size_t n, unsigned fl), (p, n, fl))                     \
	R(cudaFreeHost, cudaError_t, (void *p), (p))                                                     \
	R(cudaGetDriverEntryPoint, cudaError_t, (const char *sym, void **fp, unsigned long long fl, void *st), \
	  (sym, fp, fl, st))                                                                             \
	R(cudaGetDriverEntryPointByVersion, cudaError_t,                                                 \
	  (const char *sym, void **fp, unsigned int v, unsigned long long fl, void *st), (sym, fp, v, fl, st)) \
	D(cuMemAlloc_v2, cuMemAlloc_v2, (CUdeviceptr * p, size_t n), (p, n))                             \
	D(cuMemFree_v2, cuMemFree_v2, (CUdeviceptr p), (p))                                              \
	D(cuMemAllocPitch_v2, cuMemAllocPitch_v2, (CUdeviceptr * p, size_t *pi, size_t w, size_t h, unsigned e), \
	  (p, pi, w, h, e))                                                                              \
	D(cuMemAllocManaged, cuMemAllocManaged, (CUdeviceptr * p, size_t n, unsigned fl), (p, n, fl))    \
	D(cuMemAllocAsync, cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))          \
	D(cuMemAllocAsync_ptsz, cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))     \
	D(cuMemFreeAsync, cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                           \
	D(cuMemFreeAsync_ptsz, cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                      \
	D(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, (CUdeviceptr * p, size_t n, CUmemoryPool m, CUstream s), \
	  (p, n, m, s))                                                                                  \
	D(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync,                                         \
	  (CUdeviceptr * p, size_t n, CUmemoryPool m, CUstream s), (p, n, m, s))                         \
	D(cuMemAllocHost_v2, cuMemAllocHost_v2, (void **p, size_t n), (p, n))                            \
	D(cuMemHostAlloc, cuMemHostAlloc, (void **p, size_t n, unsigned fl), (p, n, fl))                 \
	D(cuMemFreeHost, cuMemFreeHost, (void *p), (p))                                                  \
	D(cuMemCreate, cuMemCreate, (CUmemGenericAllocationHandle * h, size_t n, const void *pr, unsigned long long fl), \
	  (h, n, pr, fl))                                                                                \
	D(cuMemRelease, cuMemRelease, (CUmemGenericAllocationHandle h), (h))                             \
	D(cuMemMap, cuMemMap, (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h, unsigned long long fl), \
	  (p, n, o, h, fl))                                                                              \
	D(cuMemUnmap, cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))                                     \
	D(cuMemAddressReserve, cuMemAddressReserve,                                                      \
	  (CUdeviceptr * p, size_t n, size_t al, CUdeviceptr ad, unsigned long long fl), (p, n, al, ad, fl)) \
	D(cuMemAddressFree, cuMemAddressFree, (CUdeviceptr p, size_t n), (p, n))                         \
	D(cuGetProcAddress, cuGetProcAddress, (const char *sym, void **fp, int v, unsigned long long fl), \
	  (sym, fp, v, fl))                                                                              \
	D(cuGetProcAddress_v2, cuGetProcAddress_v2,                                                      \
	  (const char *sym, void **fp, int v, unsigned long long fl, void *st), (sym, fp, v, fl, st))

enum {
#define V_R(name, ...) V_##name,
#define V_D(name, ...) V_##name,
	VARIANTS(V_R, V_D)
#undef V_R
#undef V_D
	NVARIANTS
};

static const char *const variant_names[NVARIANTS] = {
#define N_R(name, ...) #name,
#define N_D(name, ...) #name,
	VARIANTS(N_R, N_D)
#undef N_R
#undef N_D
};

static void *g_real[NVARIANTS][NPATHS];
static void *g_wrapper[NVARIANTS][NPATHS]; /* filled by the constructor */

/* The NEXT path: the definition after the shim, looked up until found. */
static void *real_next(int v) {
	void *p = __atomic_load_n(&g_real[v][P_NEXT], __ATOMIC_ACQUIRE);
	if (LIKELY(p != NULL))
		return p;
	dlsym_fn rd = get_real_dlsym();
	if (rd == NULL)
		return NULL;
	p = rd(RTLD_NEXT, variant_names[v]);
	if (p != NULL)
		__atomic_store_n(&g_real[v][P_NEXT], p, __ATOMIC_RELEASE);
	return p;
}

static inline void *real_at(int v, int path) {
	if (path == P_NEXT)
		return real_next(v);
	return __atomic_load_n(&g_real[v][path], __ATOMIC_ACQUIRE);
}

/* Resolver bodies: translate what the real resolver returns into our wrappers. */
static void *install(int v, int path, void *real);
static int variant_versioned(const char *sym, long version, unsigned long long flags);
static int is_wrapper(void *p);

static void *resolve_versioned(const char *sym, long version, unsigned long long flags, void *real, int path) {
	if (real == NULL || sym == NULL || !g_enabled || is_wrapper(real))
		return real;
	int v = variant_versioned(sym, version, flags);
	if (v < 0)
		return real;
	return install(v, path, real);
}

BODY CUresult b_cuGetProcAddress(cuGetProcAddress_fn f, int path, void *cs, const char *sym, void **fp, int v,
				 unsigned long long fl) {
	(void)cs;
	CUresult r = f(sym, fp, v, fl);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, v, fl, *fp, P_GPA);
	errno = e;
	(void)path;
	return r;
}
BODY CUresult b_cuGetProcAddress_v2(cuGetProcAddress_v2_fn f, int path, void *cs, const char *sym, void **fp,
				    int v, unsigned long long fl, void *st) {
	(void)cs;
	(void)path;
	CUresult r = f(sym, fp, v, fl, st);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, v, fl, *fp, P_GPA);
	errno = e;
	return r;
}
BODY cudaError_t b_cudaGetDriverEntryPoint(cudaGetDriverEntryPoint_fn f, int path, void *cs, const char *sym,
					   void **fp, unsigned long long fl, void *st) {
	(void)cs;
	(void)path;
	cudaError_t r = f(sym, fp, fl, st);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, LONG_MAX, fl, *fp, P_EP);
	errno = e;
	return r;
}
BODY cudaError_t b_cudaGetDriverEntryPointByVersion(cudaGetDriverEntryPointByVersion_fn f, int path, void *cs,
						    const char *sym, void **fp, unsigned int v,
						    unsigned long long fl, void *st) {
	(void)cs;
	(void)path;
	cudaError_t r = f(sym, fp, v, fl, st);
	int e = errno;
	if (r == 0 && fp != NULL)
		*fp = resolve_versioned(sym, (long)v, fl, *fp, P_EP);
	errno = e;
	return r;
}

/* Map a body's first "fid" argument: the ptsz variants share a body with their own function id; the
 * resolvers get the path instead. */
#define FID_ARG_cudaMalloc FID_cudaMalloc
#define FID_ARG_cudaFree FID_cudaFree
#define FID_ARG_cudaMallocAsync FID_cudaMallocAsync
#define FID_ARG_cudaFreeAsync FID_cudaFreeAsync
#define FID_ARG_cudaMallocFromPoolAsync FID_cudaMallocFromPoolAsync
#define FID_ARG_cudaMallocManaged FID_cudaMallocManaged
#define FID_ARG_cudaMallocPitch FID_cudaMallocPitch
#define FID_ARG_cudaMalloc3D FID_cudaMalloc3D
#define FID_ARG_cudaMallocHost FID_cudaMallocHost
#define FID_ARG_cudaHostAlloc FID_cudaHostAlloc
#define FID_ARG_cudaFreeHost FID_cudaFreeHost
#define FID_ARG_cudaGetDriverEntryPoint 0
#define FID_ARG_cudaGetDriverEntryPointByVersion 0
#define FID_ARG_cuMemAlloc_v2 FID_cuMemAlloc_v2
#define FID_ARG_cuMemFree_v2 FID_cuMemFree_v2
#define FID_ARG_cuMemAllocPitch_v2 FID_cuMemAllocPitch_v2
#define FID_ARG_cuMemAllocManaged FID_cuMemAllocManaged
#define FID_ARG_cuMemAllocAsync FID_cuMemAllocAsync
#define FID_ARG_cuMemAllocAsync_ptsz FID_cuMemAllocAsync_ptsz
#define FID_ARG_cuMemFreeAsync FID_cuMemFreeAsync
#define FID_ARG_cuMemFreeAsync_ptsz FID_cuMemFreeAsync_ptsz
#define FID_ARG_cuMemAllocFromPoolAsync FID_cuMemAllocFromPoolAsync
#define FID_ARG_cuMemAllocFromPoolAsync_ptsz FID_cuMemAllocFromPoolAsync_ptsz
#define FID_ARG_cuMemAllocHost_v2 FID_cuMemAllocHost_v2
#define FID_ARG_cuMemHostAlloc FID_cuMemHostAlloc
#define FID_ARG_cuMemFreeHost FID_cuMemFreeHost
#define FID_ARG_cuMemCreate FID_cuMemCreate
#define FID_ARG_cuMemRelease FID_cuMemRelease
#define FID_ARG_cuMemMap FID_cuMemMap
#define FID_ARG_cuMemUnmap FID_cuMemUnmap
#define FID_ARG_cuMemAddressReserve FID_cuMemAddressReserve
#define FID_ARG_cuMemAddressFree FID_cuMemAddressFree
#define FID_ARG_cuGetProcAddress 0
#define FID_ARG_cuGetProcAddress_v2 0

#define MISSING_RESULT(name) (#name[1] == 'u' && #name[2] == 'd' ? CUDA_ERROR_UNKNOWN_RUNTIME : CUDA_ERROR_NOT_FOUND)

/* One wrapper per (variant, path). The NEXT wrapper is the exported symbol. */
#define WRAP_NEXT(name, ret, body, params, args)                                                         \
	EXPORT ret name params {                                                                         \
		void *cs = __builtin_return_address(0);                                                  \
		body##_fn f = (body##_fn)real_next(V_##name);                                            \
		if (UNLIKELY(f == NULL))                                                                 \
			return MISSING_RESULT(name);                                                     \
		return b_##body(f, FID_ARG_##name, cs, UNPAREN args);                                    \
	}
#define WRAP_PATH(name, ret, body, path, params, args)                                                   \
	static ret name##__##path params {                                                               \
		void *cs = __builtin_return_address(0);                                                  \
		body##_fn f = (body##_fn)__atomic_load_n(&g_real[V_##name][path], __ATOMIC_ACQUIRE);      \
		return b_##body(f, FID_ARG_##name, cs, UNPAREN args);                                    \
	}
#define UNPAREN(...) __VA_ARGS__

#define W_R(name, ret, params, args)                                                                     \
	WRAP_NEXT(name, ret, name, params, args)                                                         \
	WRAP_PATH(name, ret, name, P_DLSYM, params, args)
#define W_D(name, body, params, args)                                                                    \
	WRAP_NEXT(name, CUresult, body, params, args)                                                    \
	WRAP_PATH(name, CUresult, body, P_DLSYM, params, args)                                           \
	WRAP_PATH(name, CUresult, body, P_GPA, params, args)                                             \
	WRAP_PATH(name, CUresult, body, P_EP, params, args)
VARIANTS(W_R, W_D)
#undef W_R
#undef W_D

static int is_wrapper(void *p) {
	for (int v = 0; v < NVARIANTS; v++)
		for (int path = 0; path < NPATHS; path++)
			if (g_wrapper[v][path] == p)
				return 1;
	return 0;
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
		{"cuGetProcAddress", 12000, V_cuGetProcAddress_v2, -1, V_cuGetProcAddress},
	};
	if (sym[0] != 'c' || sym[1] != 'u' || (sym[2] != 'M' && sym[2] != 'G'))
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
	if (p == g_wrapper[v][P_NEXT] && p != NULL) {
		/* Our own export: visible only if the program could have found the real one. */
		int e = errno;
		void *n = real_next(v);
		errno = e;
		return n != NULL ? p : NULL;
	}
	if (!g_enabled || is_wrapper(p))
		return p;
	return install(v, P_DLSYM, p);
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym,@function\n"
	"dlsym:\n"
	"	cmpq $-1, %rdi\n"
	"	jne 1f\n"
	"	movq real_dlsym_fn(%rip), %rax\n"
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
	"	cbz x16, 1f\n"
	"	br x16\n"
	"1:	b dlsym_c\n"
	".size dlsym, .-dlsym\n");
#else
EXPORT void *dlsym(void *handle, const char *name) { return dlsym_c(handle, name); }
#endif

/* ---- process life cycle ------------------------------------------------------------------------- */

/* In a forked child: forget the parent's log (its own file is opened at its first event). */
static void atfork_child(void) {
	t_tid = 0;
	g_chunk_lock = 0;
	g_addrs.lock = 0;
	g_handles.lock = 0;
	if (g_seq == &g_private_seq)
		g_private_seq = (uint64_t)getpid() << 40;
	if (__atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) != LOG_READY)
		return;
	for (uint32_t c = 0; c < g_chunks_used; c++) {
		if (g_chunks[c] != NULL)
			munmap(g_chunks[c], CHUNK_SIZE);
		g_chunks[c] = NULL;
	}
	g_chunks_used = 0;
	munmap(g_hdr, HEADER_SIZE);
	g_hdr = NULL;
	close(g_log_fd);
	g_log_fd = -1;
	__atomic_store_n(&g_log_state, LOG_UNINIT, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void shim_init(void) {
	if (__atomic_exchange_n(&g_init_done, 1, __ATOMIC_ACQ_REL))
		return;
	int e = errno;
	get_real_dlsym();
#define FILL_R(name, ...)                                                                                \
	g_wrapper[V_##name][P_NEXT] = (void *)&name;                                                     \
	g_wrapper[V_##name][P_DLSYM] = (void *)&name##__P_DLSYM;
#define FILL_D(name, ...)                                                                                \
	FILL_R(name)                                                                                     \
	g_wrapper[V_##name][P_GPA] = (void *)&name##__P_GPA;                                             \
	g_wrapper[V_##name][P_EP] = (void *)&name##__P_EP;
	VARIANTS(FILL_R, FILL_D)
#undef FILL_R
#undef FILL_D
	const char *dir = getenv("ALLOCSCOPE_LOG_DIR");
	if (dir != NULL && dir[0] != '\0' && strlen(dir) < sizeof g_dir) {
		strcpy(g_dir, dir);
		map_grow(&g_addrs, 0);
		map_grow(&g_handles, 0);
		pthread_atfork(NULL, NULL, atfork_child);
		__atomic_store_n(&g_enabled, 1, __ATOMIC_RELEASE);
	}
	errno = e;
}
