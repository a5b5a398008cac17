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
#include <link.h>
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
#define RING_SLOTS (1u << 16)  /* 4 MiB ring file */
#define BLOCK_SLOTS (1u << 12) /* drained to the log 256 KiB at a time */
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
	uint64_t claimed; /* slots claimed by writers */
	uint64_t drained; /* slots [0, drained) are in the log file */
	uint32_t ring_slots;
	uint32_t cmdline_len;
	char cmdline[HEADER_SIZE - 72];
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
_Static_assert(RING_SLOTS % BLOCK_SLOTS == 0, "ring of whole blocks");

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
static int g_ring_fd = -1;
static struct record *g_ring; /* RING_SLOTS records, MAP_SHARED on the ring file */
static int g_open_lock;
static int g_drain_lock;
static uint64_t *g_seq;        /* shared counter (seq file) or &g_private_seq */
static uint64_t g_private_seq;
static char g_log_path[PATH_MAX + 64];
static char g_ring_path[PATH_MAX + 64];

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

/* ---- clock ----------------------------------------------------------------------------------------
 * Timestamps are CLOCK_MONOTONIC nanoseconds. Where the TSC runs at a constant rate (x86-64 with
 * constant_tsc and nonstop_tsc) the hot path reads it instead of calling clock_gettime (which costs
 * ~80 ns on a VM without a vDSO clock): each thread re-anchors to clock_gettime every 2^21 ticks
 * (about 1 ms), and the tick rate is refined from the span since the first calibration, so the error
 * stays well under a microsecond; timestamps never go back within a thread. */

#define REANCHOR_TICKS (1ll << 21)

static int g_use_tsc;
static uint64_t g_tsc_mult; /* ns per tick, 32.32 fixed point */
static uint64_t g_cal_ticks;
static int64_t g_cal_ns;
static TLS uint64_t t_anchor_ticks;
static TLS int64_t t_anchor_ns;
static TLS int64_t t_last_ns;

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t read_tsc(void) { return __rdtsc(); }
#else
static inline uint64_t read_tsc(void) { return 0; }
#endif

static inline uint64_t now_ticks(void) {
	if (LIKELY(g_use_tsc))
		return read_tsc();
	return (uint64_t)now_ns(CLOCK_MONOTONIC);
}

/* tsc_pair reads the TSC and the monotonic clock at (nearly) the same instant. */
static void tsc_pair(uint64_t *ticks, int64_t *ns) {
	uint64_t a = read_tsc();
	*ns = now_ns(CLOCK_MONOTONIC);
	uint64_t b = read_tsc();
	*ticks = a + (b - a) / 2;
}

static void set_rate(uint64_t dticks, int64_t dns) {
	if (dticks == 0 || dns <= 0)
		return;
	__atomic_store_n(&g_tsc_mult, (uint64_t)(((unsigned __int128)dns << 32) / dticks), __ATOMIC_RELAXED);
}

static void reanchor(void) {
	tsc_pair(&t_anchor_ticks, &t_anchor_ns);
	int64_t span = t_anchor_ns - g_cal_ns;
	if (span > 10000000) /* 10 ms: refine the rate over the whole span since calibration */
		set_rate(t_anchor_ticks - g_cal_ticks, span);
}

static inline int64_t ticks_ns(uint64_t t) {
	if (!g_use_tsc)
		return (int64_t)t;
	int64_t d = (int64_t)(t - t_anchor_ticks);
	if (UNLIKELY(t_anchor_ticks == 0 || d > REANCHOR_TICKS)) {
		reanchor();
		d = (int64_t)(t - t_anchor_ticks);
	}
	uint64_t mult = __atomic_load_n(&g_tsc_mult, __ATOMIC_RELAXED);
	int64_t ns = t_anchor_ns + (int64_t)(((__int128)d * (__int128)mult) >> 32);
	if (ns < t_last_ns)
		ns = t_last_ns;
	t_last_ns = ns;
	return ns;
}

static inline int64_t ticks_duration(uint64_t t0, uint64_t t1) {
	if (!g_use_tsc)
		return (int64_t)(t1 - t0);
	uint64_t mult = __atomic_load_n(&g_tsc_mult, __ATOMIC_RELAXED);
	return (int64_t)(((unsigned __int128)(t1 - t0) * mult) >> 32);
}

/* tsc_reliable reports whether /proc/cpuinfo lists constant_tsc and nonstop_tsc. */
static int tsc_reliable(void) {
#if defined(__x86_64__)
	char buf[16384];
	int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t n = 0;
	while (n < sizeof buf - 1) {
		ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	char *flags = strstr(buf, "\nflags");
	if (flags == NULL)
		return 0;
	char *end = strchr(flags + 1, '\n');
	if (end != NULL)
		*end = '\0';
	return strstr(flags, " constant_tsc") != NULL && strstr(flags, " nonstop_tsc") != NULL;
#else
	return 0;
#endif
}

/* clock_init calibrates the TSC over about 200 us, once per process (at its first event). */
static void clock_init(void) {
	if (g_use_tsc || !tsc_reliable())
		return;
	uint64_t t0, t1;
	int64_t n0, n1;
	tsc_pair(&t0, &n0);
	do
		tsc_pair(&t1, &n1);
	while (n1 - n0 < 200000);
	g_cal_ticks = t0;
	g_cal_ns = n0;
	set_rate(t1 - t0, n1 - n0);
	__atomic_store_n(&g_use_tsc, 1, __ATOMIC_RELEASE);
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

/* open_mapped creates path (exclusively), gives it size bytes and maps them shared. */
static void *open_mapped(const char *path, size_t size, int *fd_out) {
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_fail(path, errno);
		return NULL;
	}
	int err = posix_fallocate(fd, 0, (off_t)size);
	void *p = MAP_FAILED;
	if (err == 0) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			err = errno;
	}
	if (err != 0) {
		close(fd);
		log_fail(path, err);
		return NULL;
	}
	*fd_out = fd;
	return p;
}

/* log_open creates this process's log file and ring file. Called with g_open_lock held. */
static void log_open(void) {
	uint64_t flags = 0;
	if (g_seq == NULL)
		map_seq_counter(&flags);
	else if (g_seq == &g_private_seq)
		flags |= FLAG_PRIVATE_SEQ;
	int64_t mono = now_ns(CLOCK_MONOTONIC);
	snprintf(g_log_path, sizeof g_log_path, "%s/%d-%lld.alog", g_dir, (int)getpid(), (long long)mono);
	snprintf(g_ring_path, sizeof g_ring_path, "%s/%d-%lld.ring", g_dir, (int)getpid(), (long long)mono);
	int fd = -1, rfd = -1;
	struct log_header *h = (struct log_header *)open_mapped(g_log_path, HEADER_SIZE, &fd);
	if (h == NULL)
		return;
	struct record *ring = (struct record *)open_mapped(g_ring_path, (size_t)RING_SLOTS * RECORD_SIZE, &rfd);
	if (ring == NULL) {
		munmap(h, HEADER_SIZE);
		close(fd);
		return;
	}
	h->version = 1;
	h->record_size = RECORD_SIZE;
	h->pid = (uint32_t)getpid();
	h->ppid = (uint32_t)getppid();
	h->start_mono_ns = mono;
	h->start_real_ns = now_ns(CLOCK_REALTIME);
	h->flags = flags;
	h->ring_slots = RING_SLOTS;
	fill_cmdline(h);
	memcpy(h->magic, "ALSCOPE1", 8);
	g_log_fd = fd;
	g_ring_fd = rfd;
	g_hdr = h;
	g_ring = ring;
	clock_init();
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
	spin_lock(&g_open_lock);
	if (__atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_UNINIT)
		log_open();
	spin_unlock(&g_open_lock);
	errno = e;
	return __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_READY;
}

/* wait_committed waits for the writer of a claimed slot to commit it: a few instructions unless the
 * writer was preempted; after about two seconds (a writer that never returned from a signal handler)
 * the slot is drained uncommitted. */
static void wait_committed(const struct record *r) {
	struct timespec pause = {0, 20000};
	for (int i = 0; __atomic_load_n(&r->function, __ATOMIC_ACQUIRE) == 0 && i < 100100; i++) {
		if (i < 100)
			sched_yield();
		else
			nanosleep(&pause, NULL);
	}
}

/* drain copies the ring's whole blocks below limit into the log file, oldest first, with pwrite
 * (writing fresh memory through a mapping is slow on VMs with shadow page tables; the ring's pages are
 * reused). Only then does it advance the header's drained count, so after a crash a block is either
 * counted in the log file or still whole in the ring. */
static void drain(uint64_t limit) {
	spin_lock(&g_drain_lock);
	int e = errno;
	uint64_t d = __atomic_load_n(&g_hdr->drained, __ATOMIC_ACQUIRE);
	while (d + BLOCK_SLOTS <= limit && __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_READY) {
		struct record *blk = &g_ring[d & (RING_SLOTS - 1)];
		for (unsigned i = 0; i < BLOCK_SLOTS; i++)
			wait_committed(&blk[i]);
		const char *src = (const char *)blk;
		size_t left = (size_t)BLOCK_SLOTS * RECORD_SIZE;
		off_t off = HEADER_SIZE + (off_t)d * RECORD_SIZE;
		while (left > 0) {
			ssize_t w = pwrite(g_log_fd, src, left, off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				log_fail(g_log_path, w < 0 ? errno : ENOSPC);
				break;
			}
			src += w;
			off += w;
			left -= (size_t)w;
		}
		if (left > 0)
			break;
		/* Uncommit the copied slots before the ring may be reused: a slot's function id is non-zero
		 * only while it holds a committed, undrained record. (A crash here loses nothing: the reader
		 * takes slots past drained from the log file when they are there.) */
		for (unsigned i = 0; i < BLOCK_SLOTS; i++)
			__atomic_store_n(&blk[i].function, 0, __ATOMIC_RELAXED);
		d += BLOCK_SLOTS;
		__atomic_store_n(&g_hdr->drained, d, __ATOMIC_RELEASE);
	}
	errno = e;
	spin_unlock(&g_drain_lock);
}

#define PREFETCH_AHEAD 4

static inline uint64_t take_seq(void) { return __atomic_fetch_add(g_seq, 1, __ATOMIC_RELAXED); }

/* claim_slot reserves the next ring slot; NULL when logging stopped. */
static inline struct record *claim_slot(uint64_t *idx_out) {
	uint64_t idx = __atomic_fetch_add(&g_hdr->claimed, 1, __ATOMIC_RELAXED);
	/* A full ring (a writer stalled mid-record, or a drain in progress) waits for the drain. */
	for (;;) {
		int64_t ahead = (int64_t)(idx - __atomic_load_n(&g_hdr->drained, __ATOMIC_ACQUIRE));
		if (LIKELY(ahead < (int64_t)RING_SLOTS && ahead >= 0))
			break;
		/* ahead < 0: this writer stalled for seconds and its slot was drained uncommitted. */
		if (ahead < 0 || __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) != LOG_READY)
			return NULL;
		drain(idx - RING_SLOTS + BLOCK_SLOTS);
	}
	/* The drain left the slot's function id at 0: a crash mid-write leaves it uncommitted. */
	struct record *r = &g_ring[idx & (RING_SLOTS - 1)];
	__builtin_prefetch(&g_ring[(idx + PREFETCH_AHEAD) & (RING_SLOTS - 1)], 1, 3);
	*idx_out = idx;
	return r;
}

/* commit writes one record. Nothing but this function runs between claiming a slot and committing it,
 * so a drain never waits long for a writer. */
static inline void commit(uint64_t seq, int fid, uint64_t t0, uint64_t t1, uint64_t addr, uint64_t size,
			  uint64_t stream, void *callsite, int result, int device) {
	uint64_t idx;
	struct record *r = claim_slot(&idx);
	if (UNLIKELY(r == NULL))
		return;
	r->seq = seq;
	r->time_ns = ticks_ns(t0);
	r->duration_ns = ticks_duration(t0, t1);
	r->address = addr;
	r->size = size;
	r->stream = stream;
	r->callsite = (uint64_t)(uintptr_t)callsite;
	r->tid = current_tid();
	r->result = (uint16_t)result;
	r->device = (int8_t)(device < -1 || device > 127 ? -1 : device);
	__atomic_store_n(&r->function, (uint8_t)fid, __ATOMIC_RELEASE);
	/* The first writer of each block drains the blocks before the previous one. */
	if (UNLIKELY((idx & (BLOCK_SLOTS - 1)) == 0) && idx >= 2 * BLOCK_SLOTS)
		drain(idx - BLOCK_SLOTS);
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
		uint64_t t0 = now_ticks();                                                    \
		int r_ = CALL;                                                                           \
		uint64_t t1 = now_ticks();                                                    \
		int e_ = errno;                                                                          \
		uint64_t addr_ = r_ == 0 ? (uint64_t)(OUT_ADDR) : 0;                                     \
		uint64_t size_ = (uint64_t)(SIZE_EXPR);                                                  \
		int dev_ = (r_ == 0 && (IS_DEVICE)) ? current_device() : -1;                             \
		if (addr_ != 0 && (MAP) != NULL)                                                         \
			map_insert((MAP), addr_, pack_val(size_, dev_));                                 \
		commit(take_seq(), FID, t0, t1, addr_, size_, (uint64_t)(uintptr_t)(STREAM), cs, r_,  \
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
		uint64_t seq_ = take_seq();                                                              \
		uint64_t v_ = map_find(MAP, key_, 1);                                                    \
		errno = e0_;                                                                             \
		uint64_t t0 = now_ticks();                                                    \
		int r_ = CALL;                                                                           \
		uint64_t t1 = now_ticks();                                                    \
		int e_ = errno;                                                                          \
		if (r_ != 0 && v_ != 0)                                                                  \
			map_insert(MAP, key_, v_);                                                       \
		commit(seq_, FID, t0, t1, key_, val_size(v_), (uint64_t)(uintptr_t)(STREAM), cs, r_, \
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
		uint64_t t0 = now_ticks();                                                    \
		int r_ = CALL;                                                                           \
		uint64_t t1 = now_ticks();                                                    \
		int e_ = errno;                                                                          \
		int dev_ = (DEVICE_EXPR);                                                                \
		commit(take_seq(), FID, t0, t1, (uint64_t)(ADDR), (uint64_t)(SIZE),                   \
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
	uint64_t t0 = now_ticks();
	int r = f(h, n, prop, fl);
	uint64_t t1 = now_ticks();
	int e = errno;
	uint64_t handle = r == 0 ? *h : 0;
	int dev = r == 0 ? prop_device(prop) : -1;
	if (handle != 0)
		map_insert(&g_handles, handle, pack_val(n, dev));
	commit(take_seq(), fid, t0, t1, handle, n, 0, cs, r, dev);
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
	dlclose(h);
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

/* The NEXT path: the definition after the shim, looked up until found. */
static void *real_next(int v) {
	void *p = __atomic_load_n(&g_real[v][P_NEXT], __ATOMIC_ACQUIRE);
	if (LIKELY(p != NULL))
		return p;
	dlsym_fn rd = get_real_dlsym();
	if (rd == NULL)
		return NULL;
	p = rd(RTLD_NEXT, variant_names[v]);
	if (p == NULL)
		p = real_elsewhere(rd, variant_names[v]);
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
	}                                                                                                \
	/* the export's own address, which no earlier LD_PRELOAD library can interpose */              \
	extern __typeof__(name) name##__self __attribute__((alias(#name), visibility("hidden")));
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
	g_open_lock = 0;
	g_drain_lock = 0;
	g_addrs.lock = 0;
	g_handles.lock = 0;
	if (g_seq == &g_private_seq)
		g_private_seq = (uint64_t)getpid() << 40;
	if (__atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) != LOG_READY)
		return;
	munmap(g_ring, (size_t)RING_SLOTS * RECORD_SIZE);
	munmap(g_hdr, HEADER_SIZE);
	close(g_ring_fd);
	close(g_log_fd);
	g_ring = NULL;
	g_hdr = NULL;
	g_ring_fd = g_log_fd = -1;
	__atomic_store_n(&g_log_state, LOG_UNINIT, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void shim_init(void) {
	if (__atomic_exchange_n(&g_init_done, 1, __ATOMIC_ACQ_REL))
		return;
	int e = errno;
	get_real_dlsym();
#define FILL_R(name, ...)                                                                                \
	g_wrapper[V_##name][P_NEXT] = (void *)&name##__self;                                             \
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
