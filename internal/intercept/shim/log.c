/* log.c: see log.h. */
#include "log.h"

char g_dir[PATH_MAX];

int g_log_state;           /* LOG_*: OFF without a log directory, NONE when the log cannot open */

struct control *g_ctl;     /* the control file, or NULL */

uint64_t g_private_seq;

uint64_t *g_seq;           /* &g_ctl->seq or &g_private_seq */

static struct log_header *g_hdr;

int g_log_fd = -1, g_lanes_fd = -1;

static char g_log_path[PATH_MAX + 64];

static char g_lanes_path[PATH_MAX + 64];

static char *g_groups[MAX_GROUPS];

static dev_t g_log_dev, g_lanes_dev; /* the files' identities, to tell when the program closed a */

static ino_t g_log_ino, g_lanes_ino; /* descriptor and reused its number (a daemon closing all fds) */

static uint32_t g_lanes_next;     /* lanes ever handed out */

pthread_key_t g_lane_key;  /* its destructor frees an exiting thread's lanes */

TLS struct lane t_lane[MAX_DEPTH];

static TLS int t_key_set;

TLS uint32_t t_tid;

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

void map_control(void) {
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

void log_open(void) {
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

void log_save_maps(void) {
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

int log_maps_changed(void) {
	return __atomic_load_n(&g_log_state, __ATOMIC_ACQUIRE) == LOG_READY &&
	       objects_added() != __atomic_load_n(&g_maps_saved_adds, __ATOMIC_RELAXED);
}

void log_forget(void) {
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

int lane_acquire(int d) {
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

void lanes_release(void *unused) {
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

int lane_flush(struct lane *l) {
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

void count_lost(int d) {
	if (d >= 0 && d < MAX_DEPTH && t_lane[d].head != NULL)
		__atomic_fetch_add(&t_lane[d].head->lost, 1, __ATOMIC_RELAXED);
	else if (g_hdr != NULL)
		__atomic_fetch_add(&g_hdr->lost, 1, __ATOMIC_RELAXED);
	else if (g_ctl != NULL)
		__atomic_fetch_add(&g_ctl->lost, 1, __ATOMIC_RELAXED);
}

void log_note_export(uint64_t size) {
	if (g_ctl == NULL || size == 0)
		return;
	uint64_t *sizes = g_ctl->pool.ipc_export_sizes;
	for (int i = 0; i < EXPORT_SIZES; i++) {
		uint64_t cur = __atomic_load_n(&sizes[i], __ATOMIC_ACQUIRE);
		if (cur == size)
			return;
		if (cur == 0 && (__atomic_compare_exchange_n(&sizes[i], &cur, size, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
				 cur == size))
			return;
	}
}
