/*
 * The raw per-process log (format: docs/DESIGN.md; reader: intercept/rawlog.go).
 *
 * Files, in $ALLOCSCOPE_LOG_DIR:
 *   control               made by record: the seq counter all processes share, and counts of the
 *                         processes that loaded the shim, could not open their log, and of the events
 *                         those could not log.
 *   <pid>-<start>.alog    the log: a 4096-byte header (mapped shared), then chunks of LANE_SLOTS records.
 *   <pid>-<start>.lanes   the lanes, in groups of LANES_PER_GROUP: a page of lane heads, then the lanes'
 *                         records (mapped shared, so SIGKILL loses nothing a writer committed).
 * Both are created when the shim is loaded (and in a forked child), before the program can drop the
 * privileges it needs to create them, and the process holds a shared flock on its .alog until it exits:
 * that is how record knows it is still running.
 *
 * Writers never wait for each other. Each thread writes into a lane of its own (one per signal nesting
 * depth: a handler that interrupts a hook writes into the next lane), committing a record by storing
 * the lane's count. A full lane is flushed by its owner: it claims the next chunk of the .alog
 * (atomic add), notes the chunk in the lane head, copies the records there with pwrite and empties the
 * lane. A lane whose thread exited is handed, records and all, to the next new thread. The only shared
 * writes per event are the seq counter and the address map.
 *
 * Faults: a log that cannot be opened, grown or written stops recording for the process with one line on
 * stderr; every event after that is counted as lost (in the lane, the header or the control file), so
 * that record reports exactly how many calls the trace lacks.
 */
#ifndef ALLOCSCOPE_LOG_H
#define ALLOCSCOPE_LOG_H

#include "common.h"

#define HEADER_SIZE 4096
#define LANE_SLOTS 1024u                                    /* records per lane, and per chunk */
#define LANES_PER_GROUP 32u
#define LANE_BYTES ((size_t)LANE_SLOTS * RECORD_SIZE)       /* 64 KiB */
#define GROUP_BYTES (4096 + LANES_PER_GROUP * LANE_BYTES)   /* lane heads, then the lanes */
#define MAX_GROUPS 512u                                     /* 16384 lanes */
#define MAX_DEPTH 4                                         /* hook nesting through signal handlers */
#define CONTROL_SIZE 4096
#define FLAG_PRIVATE_SEQ 1ull
#define FLAG_FAILED 2ull

/* The control file, mapped shared by every process of a recording. */

/* Why a request of the kinds record --pool serves went to CUDA (pool_counters.pass_by). */
enum pool_pass {
	PASS_NO_POOL,    /* the pool could not be made: driver functions missing, its plan's reservation failed */
	PASS_NO_CONTEXT, /* the calling thread had no current context (device) */
	PASS_CAPTURE,    /* a stream or the device was capturing a graph */
	PASS_SIGNAL,     /* a signal handler's call while its thread was inside the pool */
	PASS_FULL,       /* the pool had no room and could not grow */
	PASS_RETIRED,    /* the context that owned the pool was reset or destroyed */
	PASS_EXCLUDED,   /* pool.json sends this callsite or size to CUDA */
	PASS_OTHER,      /* anything else (no host memory for the pool's lists, a device beyond 64) */
	PASS_REASONS
};

/* What record --pool's pools did, summed over every process and device (peak: the largest). New
 * counters go at the end: the control file of an older shim reads them as 0. */
struct pool_counters {
	uint64_t syncs;          /* device synchronizations the pools made themselves */
	uint64_t sync_ns;        /* time inside them */
	uint64_t reservations;   /* regions reserved from CUDA (the plan and every growth) */
	uint64_t fallbacks;      /* requests that made a pool grow */
	uint64_t passed;         /* requests of the served kinds that went to CUDA */
	uint64_t events;         /* events recorded at stream-ordered frees */
	uint64_t stream_waits;   /* streams made to wait for another stream's free */
	uint64_t host_waits;     /* host waits for another stream's free (cudaMalloc reusing it) */
	uint64_t peak_reserved;  /* the most bytes one pool held reserved */
	uint64_t ipc_exports;    /* pool blocks the program exported with cudaIpcGetMemHandle */
	uint64_t barriers;       /* of syncs: barriers on the legacy stream (the host did not wait) */
	uint64_t streams_apart;  /* non-blocking streams the program made */
	uint64_t pass_by[PASS_REASONS]; /* of passed, by enum pool_pass */
	uint64_t unmade;         /* pools that could not be made (per process and device) */
	uint64_t unmade_error;   /* the CUDA error of the first failed reservation of a pool's plan; 0: none */
	uint64_t peak_sum;       /* sum over every process and device of its pool's peak reserved bytes */
	uint64_t captured_frees; /* pool blocks freed inside a stream capture: kept (the graph may use them) */
	uint64_t late_frees_kept; /* signal handlers' frees of pool blocks that could not be queued: kept */
	uint64_t retired;        /* pools given up with their contexts (reset, destroy) */
	uint64_t idle_releases;  /* idle regions the pools gave back to CUDA (cp_release_idle) */
	uint64_t idle_released_bytes; /* their bytes */
};

struct control {
	uint64_t seq;          /* next seq */
	uint64_t processes;    /* processes that loaded the shim with logging on */
	uint64_t open_failed;  /* processes that could not create their log */
	uint64_t lost;         /* events of processes without a log */
	struct pool_counters pool;
};

_Static_assert(sizeof(struct control) <= CONTROL_SIZE, "control fits its file");

struct log_header {
	char magic[8];
	uint32_t version;
	uint32_t record_size;
	uint32_t pid;
	uint32_t ppid;
	int64_t start_mono_ns;
	int64_t start_real_ns;
	uint64_t flags;
	uint64_t chunks;       /* chunks claimed (atomic) */
	uint64_t lost;         /* events lost outside lanes (atomic) */
	uint32_t lane_slots;
	uint32_t lanes_per_group;
	int32_t fail_errno;    /* why logging stopped, with FLAG_FAILED */
	uint32_t cmdline_len;
	char cmdline[HEADER_SIZE - 80];
};
_Static_assert(sizeof(struct log_header) == HEADER_SIZE, "header size");

enum { LANE_UNUSED = 0, LANE_OWNED = 1, LANE_FREE = 2 };

struct lane_head {
	uint32_t state;        /* LANE_* */
	uint32_t owner;        /* tid of the owning thread */
	uint32_t count;        /* committed records not yet flushed (release store = commit) */
	uint32_t reserved0;
	uint64_t flush_chunk;  /* chunk + 1 of a flush in progress (or cut short), else 0 */
	uint64_t lost;         /* events this lane's writers could not log */
	uint64_t reserved[4];
};
_Static_assert(sizeof(struct lane_head) == 64, "lane head size");
_Static_assert(LANES_PER_GROUP * sizeof(struct lane_head) <= 4096, "lane heads fit a page");

struct lane { struct lane_head *head; struct record *recs; };

enum { LOG_OFF = 0, LOG_READY = 1, LOG_FAILED = 2, LOG_NONE = 3 };

static char g_dir[PATH_MAX];
static int g_log_state;           /* LOG_*: OFF without a log directory, NONE when the log cannot open */
static struct control *g_ctl;     /* the control file, or NULL */
static uint64_t g_private_seq;
static uint64_t *g_seq;           /* &g_ctl->seq or &g_private_seq */
static struct log_header *g_hdr;
static int g_log_fd = -1, g_lanes_fd = -1;
static char g_log_path[PATH_MAX + 64];
static char g_lanes_path[PATH_MAX + 64];
static char *g_groups[MAX_GROUPS];
static dev_t g_log_dev, g_lanes_dev; /* the files' identities, to tell when the program closed a */
static ino_t g_log_ino, g_lanes_ino; /* descriptor and reused its number (a daemon closing all fds) */
static uint32_t g_lanes_next;     /* lanes ever handed out */
static pthread_key_t g_lane_key;  /* its destructor frees an exiting thread's lanes */

static TLS struct lane t_lane[MAX_DEPTH];
static TLS int t_key_set;
static TLS uint32_t t_tid;

static inline uint32_t current_tid(void) {
	if (UNLIKELY(t_tid == 0))
		t_tid = (uint32_t)syscall(SYS_gettid);
	return t_tid;
}

static inline uint64_t take_seq(void) { return __atomic_fetch_add(g_seq, 1, __ATOMIC_RELAXED); }

/* ---- opening --------------------------------------------------------------------------------------- */

/* log_fail stops recording for this process and says why once. */
static void log_fail(const char *path, int err, int opened) {
	int st = __atomic_exchange_n(&g_log_state, opened ? LOG_FAILED : LOG_NONE, __ATOMIC_ACQ_REL);
	if (st == LOG_FAILED || st == LOG_NONE)
		return;
	if (opened) {
		__atomic_store_n(&g_hdr->fail_errno, err, __ATOMIC_RELAXED);
		__atomic_fetch_or(&g_hdr->flags, FLAG_FAILED, __ATOMIC_RELEASE);
	} else if (g_ctl != NULL) {
		__atomic_fetch_add(&g_ctl->open_failed, 1, __ATOMIC_RELAXED);
	}
	char buf[PATH_MAX + 256], ebuf[128];
	const char *msg = strerror_r(err, ebuf, sizeof ebuf);
	int n = snprintf(buf, sizeof buf, "allocscope: cannot write log %s: %s; recording stopped\n", path, msg);
	if (n > (int)sizeof buf - 1)
		n = (int)sizeof buf - 1;
	if (n > 0)
		say(buf, (size_t)n);
}

static void map_control(void) {
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/control", g_dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		struct stat st;
		if (fstat(fd, &st) == 0 && st.st_size >= CONTROL_SIZE) {
			void *p = mmap(NULL, CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (p != MAP_FAILED)
				g_ctl = (struct control *)p;
		}
		close(fd);
	}
	if (g_ctl != NULL) {
		g_seq = &g_ctl->seq;
		__atomic_fetch_add(&g_ctl->processes, 1, __ATOMIC_RELAXED);
	} else {
		g_private_seq = (uint64_t)getpid() << 40;
		g_seq = &g_private_seq;
	}
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

/* log_open creates this process's log and lanes files. It runs in the shim's constructor and in a
 * forked child, while the process has one thread. */
static void log_open(void) {
	int64_t mono = now_ns(CLOCK_MONOTONIC);
	int pid = (int)getpid();
	snprintf(g_log_path, sizeof g_log_path, "%s/%d-%lld.alog", g_dir, pid, (long long)mono);
	snprintf(g_lanes_path, sizeof g_lanes_path, "%s/%d-%lld.lanes", g_dir, pid, (long long)mono);
	int fd = open(g_log_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_fail(g_log_path, errno, 0);
		return;
	}
	int err = posix_fallocate(fd, 0, HEADER_SIZE);
	void *h = MAP_FAILED;
	if (err == 0 && (h = mmap(NULL, HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		err = errno;
	int lfd = err == 0 ? open(g_lanes_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
	if (err == 0 && lfd < 0)
		err = errno;
	if (err != 0) {
		if (h != MAP_FAILED)
			munmap(h, HEADER_SIZE);
		close(fd);
		unlink(g_log_path); /* no half-made log for the reader to trip over */
		log_fail(lfd < 0 && err != 0 && h != MAP_FAILED ? g_lanes_path : g_log_path, err, 0);
		return;
	}
	flock(fd, LOCK_SH); /* held until the process exits: record waits for it */
	struct stat st;
	if (fstat(fd, &st) == 0) {
		g_log_dev = st.st_dev;
		g_log_ino = st.st_ino;
	}
	if (fstat(lfd, &st) == 0) {
		g_lanes_dev = st.st_dev;
		g_lanes_ino = st.st_ino;
	}
	struct log_header *hdr = (struct log_header *)h;
	hdr->version = 2;
	hdr->record_size = RECORD_SIZE;
	hdr->pid = (uint32_t)pid;
	hdr->ppid = (uint32_t)getppid();
	hdr->start_mono_ns = mono;
	hdr->start_real_ns = now_ns(CLOCK_REALTIME);
	hdr->flags = g_ctl == NULL ? FLAG_PRIVATE_SEQ : 0;
	hdr->lane_slots = LANE_SLOTS;
	hdr->lanes_per_group = LANES_PER_GROUP;
	fill_cmdline(hdr);
	__atomic_store_n((uint64_t *)hdr->magic, *(const uint64_t *)"ALSCOPE2", __ATOMIC_RELEASE);
	g_log_fd = fd;
	g_lanes_fd = lfd;
	g_hdr = hdr;
	__atomic_store_n(&g_log_state, LOG_READY, __ATOMIC_RELEASE);
}

/* objects_added is how many objects the dynamic loader has ever added to the process. */
static int objects_added_visit(struct dl_phdr_info *info, size_t size, void *data) {
	if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
		*(unsigned long long *)data = info->dlpi_adds;
	return 1;
}
static unsigned long long objects_added(void) {
	unsigned long long n = 0;
	dl_iterate_phdr(objects_added_visit, &n);
	return n;
}

static unsigned long long g_maps_saved_adds; /* objects_added() at the last save */

/* log_save_maps appends the executable mappings of files (lines of /proc/self/maps with "x" and a
 * path) to <pid>-<start>.maps next to the log, for analyze to name callsites: at start, before a
 * dlclose when the loader added objects since the last save (the library may be unloaded), and at
 * exit. The reader merges the copies; a line cut short by a kill is skipped. Needs no heap. */
static void log_save_maps(void) {
	if (__atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) != LOG_READY)
		return;
	char path[sizeof g_log_path + 8];
	size_t n = strlen(g_log_path);
	if (n < 5 || n + 8 > sizeof path)
		return;
	memcpy(path, g_log_path, n - 5); /* without ".alog" */
	memcpy(path + n - 5, ".maps", 6);
	__atomic_store_n(&g_maps_saved_adds, objects_added(), __ATOMIC_RELAXED);
	int in = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	int out = in < 0 ? -1 : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	char buf[8192], line[PATH_MAX + 256];
	size_t len = 0;
	ssize_t got;
	int ok = out >= 0;
	while (ok && (got = read(in, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < got && ok; i++) {
			if (len < sizeof line - 1)
				line[len++] = buf[i];
			if (buf[i] != '\n')
				continue;
			/* "start-end perms offset dev inode path": keep executable mappings of files */
			char *perms = memchr(line, ' ', len), *slash = memchr(line, '/', len);
			if (perms != NULL && perms + 4 < line + len && perms[3] == 'x' && slash != NULL)
				ok = write(out, line, len) == (ssize_t)len;
			len = 0;
		}
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

/* log_maps_changed reports whether the loader added objects since the mappings were last saved. */
static int log_maps_changed(void) {
	return __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_READY &&
	       objects_added() != __atomic_load_n(&g_maps_saved_adds, __ATOMIC_RELAXED);
}

/* log_forget drops the parent's log in a forked child (its mappings would write into the parent's
 * files), so that the child can open its own. */
static void log_forget(void) {
	for (uint32_t g = 0; g < MAX_GROUPS; g++) {
		if (g_groups[g] != NULL)
			munmap(g_groups[g], GROUP_BYTES);
		g_groups[g] = NULL;
	}
	for (int d = 0; d < MAX_DEPTH; d++)
		t_lane[d] = (struct lane){NULL, NULL};
	g_lanes_next = 0;
	if (g_hdr != NULL)
		munmap(g_hdr, HEADER_SIZE);
	g_hdr = NULL;
	if (g_log_fd >= 0)
		close(g_log_fd); /* the parent's own descriptor keeps its flock */
	if (g_lanes_fd >= 0)
		close(g_lanes_fd);
	g_log_fd = g_lanes_fd = -1;
}

/* still_ours reports whether fd is still the file opened as (dev, ino): a program that closes every
 * descriptor (a daemon) may have reused the number for a file of its own, which the shim must never
 * write. On a mismatch logging stops (EBADF). */
static int still_ours(int fd, dev_t dev, ino_t ino, const char *path) {
	struct stat st;
	if (fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino)
		return 1;
	log_fail(path, EBADF, 1);
	return 0;
}

/* ---- lanes ----------------------------------------------------------------------------------------- */

/* group_map maps lane group g, growing the lanes file; NULL when the file cannot grow. */
static char *group_map(uint32_t g) {
	char *p = __atomic_load_n(&g_groups[g], __ATOMIC_ACQUIRE);
	if (LIKELY(p != NULL))
		return p;
	off_t off = (off_t)g * (off_t)GROUP_BYTES;
	if (!still_ours(g_lanes_fd, g_lanes_dev, g_lanes_ino, g_lanes_path))
		return NULL;
	int err = posix_fallocate(g_lanes_fd, off, (off_t)GROUP_BYTES);
	if (err == 0) {
		p = mmap(NULL, GROUP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, g_lanes_fd, off);
		if (p == MAP_FAILED) {
			err = errno;
			p = NULL;
		}
	}
	if (p == NULL) {
		log_fail(g_lanes_path, err, 1);
		return NULL;
	}
	char *expect = NULL;
	if (!__atomic_compare_exchange_n(&g_groups[g], &expect, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		munmap(p, GROUP_BYTES);
		p = expect;
	}
	return p;
}

static inline struct lane lane_at(char *group, uint32_t i) {
	struct lane l = {(struct lane_head *)(group + (size_t)i * sizeof(struct lane_head)),
			 (struct record *)(group + 4096 + (size_t)i * LANE_BYTES)};
	return l;
}

/* lane_reuse takes a lane that an exited thread freed, or returns 0. */
static int lane_reuse(struct lane *out, uint32_t tid) {
	uint32_t n = __atomic_load_n(&g_lanes_next, __ATOMIC_ACQUIRE);
	for (uint32_t g = 0; g * LANES_PER_GROUP < n && g < MAX_GROUPS; g++) {
		char *group = __atomic_load_n(&g_groups[g], __ATOMIC_ACQUIRE);
		if (group == NULL)
			continue;
		for (uint32_t i = 0; i < LANES_PER_GROUP; i++) {
			struct lane l = lane_at(group, i);
			uint32_t st = LANE_FREE;
			if (__atomic_load_n(&l.head->state, __ATOMIC_RELAXED) == LANE_FREE &&
			    __atomic_compare_exchange_n(&l.head->state, &st, LANE_OWNED, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_RELAXED)) {
				__atomic_store_n(&l.head->owner, tid, __ATOMIC_RELAXED);
				*out = l;
				return 1;
			}
		}
	}
	return 0;
}

/* lane_acquire gives the calling thread a lane for nesting depth d; 0 when none can be had. */
static int lane_acquire(int d) {
	uint32_t tid = current_tid();
	struct lane l;
	if (!lane_reuse(&l, tid)) {
		uint32_t i = __atomic_fetch_add(&g_lanes_next, 1, __ATOMIC_ACQ_REL);
		if (i >= MAX_GROUPS * LANES_PER_GROUP)
			return 0;
		char *group = group_map(i / LANES_PER_GROUP);
		if (group == NULL)
			return 0;
		l = lane_at(group, i % LANES_PER_GROUP);
		__atomic_store_n(&l.head->owner, tid, __ATOMIC_RELAXED);
		__atomic_store_n(&l.head->state, LANE_OWNED, __ATOMIC_RELEASE);
	}
	t_lane[d] = l;
	if (!t_key_set) {
		t_key_set = 1;
		pthread_setspecific(g_lane_key, (void *)1);
	}
	return 1;
}

/* lanes_release frees an exiting thread's lanes (records stay, for the next owner to append to). */
static void lanes_release(void *unused) {
	(void)unused;
	for (int d = 0; d < MAX_DEPTH; d++) {
		struct lane_head *h = t_lane[d].head;
		if (h == NULL)
			continue;
		t_lane[d] = (struct lane){NULL, NULL};
		__atomic_store_n(&h->owner, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&h->state, LANE_FREE, __ATOMIC_RELEASE);
	}
	t_key_set = 0;
}

/* lane_flush copies a full lane into the next chunk of the log and empties it; 0 on a write error. */
static int lane_flush(struct lane *l) {
	if (!still_ours(g_log_fd, g_log_dev, g_log_ino, g_log_path))
		return 0;
	uint32_t n = l->head->count;
	uint64_t chunk = __atomic_fetch_add(&g_hdr->chunks, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&l->head->flush_chunk, chunk + 1, __ATOMIC_RELEASE);
	const char *src = (const char *)l->recs;
	size_t left = (size_t)n * RECORD_SIZE;
	off_t off = HEADER_SIZE + (off_t)chunk * (off_t)LANE_BYTES;
	int e = errno;
	while (left > 0) {
		ssize_t w = pwrite(g_log_fd, src, left, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			log_fail(g_log_path, w < 0 ? errno : ENOSPC, 1);
			errno = e;
			return 0; /* the records stay in the lane; the reader drops what reached the chunk */
		}
		src += w;
		off += w;
		left -= (size_t)w;
	}
	errno = e;
	__atomic_store_n(&l->head->count, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&l->head->flush_chunk, 0, __ATOMIC_RELEASE);
	return 1;
}

/* count_lost counts an event that could not be logged where the reader will find it. */
static void count_lost(int d) {
	if (d >= 0 && d < MAX_DEPTH && t_lane[d].head != NULL)
		__atomic_fetch_add(&t_lane[d].head->lost, 1, __ATOMIC_RELAXED);
	else if (g_hdr != NULL)
		__atomic_fetch_add(&g_hdr->lost, 1, __ATOMIC_RELAXED);
	else if (g_ctl != NULL)
		__atomic_fetch_add(&g_ctl->lost, 1, __ATOMIC_RELAXED);
}

/* log_slot returns the slot for this thread's next record at depth d, or NULL (the event is then
 * counted as lost). The caller fills it and commits it with log_commit. */
static inline struct record *log_slot(int d) {
	if (UNLIKELY(__atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) != LOG_READY))
		return NULL;
	struct lane *l = &t_lane[d];
	if (UNLIKELY(l->head == NULL) && !lane_acquire(d))
		return NULL;
	uint32_t n = l->head->count;
	if (UNLIKELY(n >= LANE_SLOTS)) {
		if (!lane_flush(l))
			return NULL;
		n = 0;
	}
	return &l->recs[n];
}

static inline void log_commit(int d) {
	struct lane_head *h = t_lane[d].head;
	__atomic_store_n(&h->count, h->count + 1, __ATOMIC_RELEASE);
}

#endif
