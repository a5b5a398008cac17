/*
 * The raw per-process log (format: docs/DESIGN.md; reader: internal/intercept/rawlog.go).
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

#define EXPORT_SIZES 16

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
	/* the sizes of device allocations the program exported with cudaIpcGetMemHandle/cuIpcGetMemHandle
	 * (distinct, in the order first seen; 0: a free entry), recorded with or without a pool, so that
	 * analyze can send such requests to CUDA under record --pool */
	uint64_t ipc_export_sizes[EXPORT_SIZES];
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

extern char g_dir[PATH_MAX];
extern int g_log_state;
extern struct control *g_ctl;
extern uint64_t g_private_seq;
extern uint64_t *g_seq;
extern int g_log_fd, g_lanes_fd;
extern pthread_key_t g_lane_key;

extern TLS struct lane t_lane[MAX_DEPTH];
extern TLS uint32_t t_tid;

static inline uint32_t current_tid(void) {
	if (UNLIKELY(t_tid == 0))
		t_tid = (uint32_t)syscall(SYS_gettid);
	return t_tid;
}

static inline uint64_t take_seq(void) { return __atomic_fetch_add(g_seq, 1, __ATOMIC_RELAXED); }

/* ---- opening --------------------------------------------------------------------------------------- */

void map_control(void);

/* log_open creates this process's log and lanes files. It runs in the shim's constructor and in a
 * forked child, while the process has one thread. */
void log_open(void);

/* log_save_maps appends the executable mappings of files (lines of /proc/self/maps with "x" and a
 * path) to <pid>-<start>.maps next to the log, for analyze to name callsites: at start, before a
 * dlclose when the loader added objects since the last save (the library may be unloaded), and at
 * exit. The reader merges the copies; a line cut short by a kill is skipped. Needs no heap. */
void log_save_maps(void);

/* log_maps_changed reports whether the loader added objects since the mappings were last saved. */
int log_maps_changed(void);

/* log_forget drops the parent's log in a forked child (its mappings would write into the parent's
 * files), so that the child can open its own. */
void log_forget(void);

/* ---- lanes ----------------------------------------------------------------------------------------- */

static inline struct lane lane_at(char *group, uint32_t i) {
	struct lane l = {(struct lane_head *)(group + (size_t)i * sizeof(struct lane_head)),
			 (struct record *)(group + 4096 + (size_t)i * LANE_BYTES)};
	return l;
}

/* lane_acquire gives the calling thread a lane for nesting depth d; 0 when none can be had. */
int lane_acquire(int d);

/* lanes_release frees an exiting thread's lanes (records stay, for the next owner to append to). */
void lanes_release(void *unused);

/* lane_flush copies a full lane into the next chunk of the log and empties it; 0 on a write error. */
int lane_flush(struct lane *l);

/* count_lost counts an event that could not be logged where the reader will find it. */
void count_lost(int d);

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

/* log_note_export notes, in the control file, that the program exported an allocation of size bytes
 * by IPC (each size once; a size that finds no free entry is dropped). */
void log_note_export(uint64_t size);

#endif
