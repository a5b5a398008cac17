package intercept

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// record --pool on the fake driver (testdata/progs/pooled.c): a block freed with cudaFree is reused
// only after the device synchronized; a second free fails as CUDA's does; a class whose slots are
// all pending makes the pool order the device once (a barrier) instead of growing, and then reuses the block freed
// last; the program's 2,059 calls reach the driver as one allocation (the pool's plan) and are all
// recorded, marked as the pool's (trace.Event.Pool). Without the pool the fake driver reuses at once and every call reaches it.
func TestServedFromPool(t *testing.T) {
	t.Run("after cuInit", func(t *testing.T) { testServedFromPool(t) })
	// The host side of the pool is readied at cuInit; a program that never calls it is served the same.
	t.Run("without cuInit", func(t *testing.T) { testServedFromPool(t, "FAKECUDA_NO_INIT=1") })
}

func testServedFromPool(t *testing.T, extraEnv ...string) {
	dir := newLogDir(t)
	got := runServed(t, dir, sizeClassPool(t), "pooled", extraEnv...)
	want := "reused before a sync: no\nreused after a sync: yes\nsecond free: 1\n" +
		"a full class with frees pending: syncs 0, barriers 1\nreused a pending block: yes\nexported a pool block: 1\n" +
		"driver allocation calls: 1\n"
	wantErr := "allocscope: the program asked for an IPC handle (cudaIpcGetMemHandle) of a block of record --pool's pool; " +
		"refused with an invalid-value error, as CUDA refuses stream-ordered blocks: record this program without --pool\n"
	if got.ExitCode != 0 || got.Stdout != want || got.Stderr != wantErr {
		t.Errorf("with the pool: exit %d, stdout\n%s\nstderr %q; want\n%s", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	events, sum := convertDir(t, dir)
	byFunction := map[string]int{}
	served := 0
	for i := range events {
		byFunction[events[i].Function]++
		if events[i].Pool {
			served++
		}
	}
	// Every call was the pool's to answer (the second free of a block too: it refused it), and the
	// trace says so.
	if served != 2059 {
		t.Errorf("%d calls marked as served by the pool, want all 2059", served)
	}
	if len(events) != 2059 || sum.Lost != 0 || byFunction["cudaMalloc"] != 1028 || byFunction["cudaFree"] != 1029 ||
		byFunction["cuMemAlloc_v2"] != 1 || byFunction["cuMemFree_v2"] != 1 {
		t.Errorf("trace: %d events %v, %d lost; want 2059: 1028 cudaMalloc, 1029 cudaFree, one of each driver call",
			len(events), byFunction, sum.Lost)
	}
	base := runWith(t, "", nil, nil, "pooled")
	if !strings.HasPrefix(base.Stdout, "reused before a sync: yes\n") ||
		!strings.HasSuffix(base.Stdout, "driver allocation calls: 2059\n") {
		t.Errorf("without the pool: %q, want the fake driver's own reuse and all 2059 calls reaching it", base.Stdout)
	}
}

// record --pool orders the device before it reuses blocks freed with cudaFree
// (testdata/progs/barriers.c): with a barrier on the legacy stream while the program made no
// non-blocking stream, not at all while a blocking stream captures a graph (the pool grows: one more
// driver allocation), with a barrier for a second, blocking stream, and with a join barrier once a
// non-blocking stream exists: an event recorded on it, the legacy stream made to wait for it, the
// barrier, the stream made to wait for the barrier; the non-blocking stream, made after barriers, first
// waits for the last one. While it captures, the pool grows again; once it is destroyed, the next join
// waits for the event recorded on it then. The driver sees the pool's plan, then two growths.
func TestServedBarriers(t *testing.T) {
	dir := newLogDir(t)
	got := runServed(t, dir, sizeClassPool(t), "barriers")
	want := `a full class with frees pending: syncs 0, barriers 1, driver calls 1
the same while a blocking stream captures: syncs 0, barriers 0, driver calls 1
a second stream, blocking: syncs 0, barriers 1, driver calls 0
  a non-blocking stream made after barriers waits for the last: events 0, stream waits 1
a non-blocking stream made, a stream destroyed: syncs 0, barriers 1, driver calls 0
a full class, one non-blocking stream: syncs 0, barriers 1, driver calls 0
  the join: events 1, stream waits 2
the same while a non-blocking stream captures: syncs 0, barriers 0, driver calls 1
the non-blocking stream destroyed, then a stream-ordered call: syncs 0, barriers 1, driver calls 0
  the join: events 1, stream waits 1
`
	if got.ExitCode != 0 || got.Stdout != want || got.Stderr != "" {
		t.Errorf("exit %d, stdout\n%s\nstderr %q; want\n%s", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	_, sum := convertDir(t, dir)
	if p := sum.Pool; p == nil || p.Syncs != 5 || p.Barriers != 5 || p.StreamsApart != 1 || p.Fallbacks != 2 ||
		p.Reservations != 3 {
		t.Errorf("pool activity %+v; want 5 orderings, all barriers, 1 non-blocking stream, 2 growths", p)
	}
}

// When the ordering a second stream needs cannot be made (a non-blocking stream captures a graph),
// record --pool does not hand that stream the block the first stream freed without an event: the
// allocation goes to CUDA, and so does its free (testdata/progs/capture_order.c). Once the capture
// ended, the next call on that stream makes the ordering (a join barrier) and reuses the block.
func TestServedOrderingNotMade(t *testing.T) {
	events, sum := servedTrace(t, "capture_order",
		"while a non-blocking stream captures, S2's block: another; barriers 0, syncs 0\n"+
			"after the capture, S2's block: the one S1 freed; barriers 1, syncs 0\n")
	var served, passed int
	for i := range events {
		if events[i].Function == "cudaMallocAsync" || events[i].Function == "cudaFreeAsync" {
			if events[i].Pool {
				served++
			} else {
				passed++
			}
		}
	}
	if served != 4 || passed != 2 || sum.Pool == nil || sum.Pool.PassedThrough != 1 || sum.Pool.Barriers != 1 ||
		!maps.Equal(sum.Pool.PassedBy, map[string]int64{"capture": 1}) {
		t.Errorf("%d stream-ordered calls served, %d passed to CUDA, pool %+v; want 4 and 2 (S2's first pair), "+
			"1 request passed (capture), 1 barrier", served, passed, sum.Pool)
	}
}

// A non-blocking stream made by another library's constructor before the shim's own has run (a
// preload ahead of it: testdata/preload/streammaker.c, finding the driver as the runtime does) is
// known to record --pool: the ordering of testdata/progs/pooled.c is a join barrier (the legacy stream
// waits for an event on that stream, the stream waits for the barrier), not a plain barrier that
// would leave the stream's work unordered.
func TestServedKnowsStreamsMadeBeforeItsConstructor(t *testing.T) {
	spec, err := PoolSpec(sizeClassPool(t))
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	got := runWith(t, newLogDir(t), []string{e.Shim, e.Preload("streammaker")}, []string{EnvPool + "=" + spec}, "pooled")
	if !strings.Contains(got.Stdout, "a full class with frees pending: syncs 0, barriers 1\n") ||
		!strings.HasSuffix(got.Stderr, "streammaker: stream waits 2\n") {
		t.Errorf("exit %d, stdout\n%s\nstderr %q; want one barrier, a join: 2 stream waits", got.ExitCode, got.Stdout,
			got.Stderr)
	}
}

// Where the process sees one device, a thread's device is asked of the driver once, not at every
// call (testdata/progs/ctxcache.c): 1,000 served pairs cost one cuCtxGetDevice; unsetting the context
// makes the shim ask again (the pair without a context passes to CUDA: the pool finds no context with
// cuCtxGetCurrent, and the record asks for the device once), and so does setting it again. With four
// devices every served allocation asks twice, for the pool and for its record.
func TestServedKnowsTheDevice(t *testing.T) {
	for _, c := range []struct {
		devices, want string
	}{
		{"1", "device queries, 1000 pairs: 1\ndevice queries, a pair without a context: 1\n" +
			"device queries, 1000 pairs with the context again: 1\n"},
		{"4", "device queries, 1000 pairs: 2000\ndevice queries, a pair without a context: 1\n" +
			"device queries, 1000 pairs with the context again: 2000\n"},
	} {
		got := runServed(t, newLogDir(t), sizeClassPool(t), "ctxcache", "FAKECUDA_DEVICES="+c.devices,
			"FAKECUDA_LAZY_CONTEXT=1")
		if got.ExitCode != 0 || got.Stdout != c.want {
			t.Errorf("%s devices: exit %d, stdout\n%s\nstderr %q; want\n%s", c.devices, got.ExitCode, got.Stdout,
				got.Stderr, c.want)
		}
	}
}

// record --pool serves the stream-ordered calls with CUDA's stream-ordered rules
// (testdata/progs/streams.c, on a fake driver where stream work completes only when waited for):
// reuse at once on the stream that freed a block; one ordering when a second stream appears (or a
// stream is destroyed): a join barrier on device 0, where the program made a non-blocking stream (an
// event on it, two stream waits), a synchronization once two devices have pools; from then on an event per stream-ordered free, a GPU-side wait when
// another stream gets the block, a host wait when cudaMalloc gets it, nothing after a device
// synchronization. Per-thread default streams of two threads are two streams.
func TestServedStreamOrdered(t *testing.T) {
	dir := newLogDir(t)
	got := runServed(t, dir, sizeClassPool(t), "streams")
	want := `start: syncs 0, events 0, stream waits 0, host waits 0
reused at once on the same stream: yes
one stream: syncs 0, events 0, stream waits 0, host waits 0
a second stream: syncs 0, events 1, stream waits 2, host waits 0
reused on another stream: yes
freed on S1, handed out on S2: syncs 0, events 1, stream waits 1, host waits 0
reused on the same stream: yes
freed on S2, handed out on S2: syncs 0, events 1, stream waits 0, host waits 0
reused by cudaMalloc: yes
freed on S2, handed out by cudaMalloc: syncs 0, events 1, stream waits 0, host waits 1
device synchronized: syncs 1, events 1, stream waits 0, host waits 0
after the synchronization: syncs 0, events 0, stream waits 0, host waits 0
device 1, one stream: syncs 0, events 1, stream waits 0, host waits 0
device 1 reused after the stream was destroyed: yes
device 1, a destroyed stream's handle again: syncs 1, events 0, stream waits 0, host waits 0
device 2, one thread's default stream: syncs 0, events 1, stream waits 0, host waits 0
device 2, another thread's default stream: syncs 1, events 0, stream waits 0, host waits 0
`
	if got.ExitCode != 0 || got.Stdout != want || got.Stderr != "" {
		t.Errorf("exit %d, stdout\n%s\nstderr %q; want\n%s", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	events, sum := convertDir(t, dir)
	served := 0
	for i := range events {
		if events[i].Pool {
			served++
		}
	}
	if len(events) != 20 || served != 20 || sum.Lost != 0 {
		t.Errorf("trace: %d events, %d served by the pool, %d lost; want 20, all served, 0 lost", len(events), served, sum.Lost)
	}
}

// record --pool with 64 threads on this machine's cores (testdata/progs/pooled_threads.c): 20
// rounds in which every thread holds 32 blocks of the pool's classes and arena at once; no two live
// blocks ever overlap, no call fails, and all 81,920 calls are recorded, every one served by the
// pool, none lost.
func TestServedManyThreads(t *testing.T) {
	dir := newLogDir(t)
	got := runServed(t, dir, sizeClassPool(t), "pooled_threads")
	var want strings.Builder
	for r := 0; r < 20; r++ {
		fmt.Fprintf(&want, "round %d overlaps: 0\n", r)
	}
	want.WriteString("failed calls: 0\ncalls: 81920\n")
	if got.ExitCode != 0 || got.Stdout != want.String() || got.Stderr != "" {
		t.Errorf("exit %d, stdout\n%s\nstderr %q; want\n%s", got.ExitCode, got.Stdout, got.Stderr, want.String())
	}
	events, sum := convertDir(t, dir)
	served := 0
	for i := range events {
		if events[i].Pool {
			served++
		}
	}
	if len(events) != 81920 || served != 81920 || sum.Lost != 0 {
		t.Errorf("trace: %d events, %d served by the pool, %d lost; want 81920, all served, 0 lost",
			len(events), served, sum.Lost)
	}
}

// record --pool across fork (testdata/progs/pooled_fork.c): the child starts without the parent's
// pool and reserves its own (one driver call), the parent's pool goes on as before, and both
// processes' calls are recorded as the pool's.
func TestServedFork(t *testing.T) {
	events, sum := servedTrace(t, "pooled_fork",
		"child: malloc 0, free 0, driver allocation calls 1, same address as the parent's: no\n"+
			"parent: driver allocation calls 1, free 0, reused its own block: yes\n")
	pids := map[uint32]int{}
	served := 0
	for i := range events {
		pids[events[i].PID]++
		if events[i].Pool {
			served++
		}
	}
	if len(events) != 6 || served != 6 || len(pids) != 2 || sum.Lost != 0 {
		t.Errorf("trace: %d events in %d processes, %d served, %d lost; want 6 in 2, all served, 0 lost",
			len(events), len(pids), served, sum.Lost)
	}
	// Each process reserved sizeclass.json's plan once: the largest pool's peak is one plan, the sum
	// of every pool's peak two.
	const plan = 512*1024 + 4096*256 + 65536*64 + 1048576*16 + 256<<20
	if p := sum.Pool; p == nil || p.Reservations != 2 || p.PeakReservedBytes != plan || p.PeakReservedSumBytes != 2*plan ||
		p.PassedThrough != 0 || p.PassedBy != nil || sum.PoolServed != 3 {
		t.Errorf("pool activity %+v, %d served; want 2 reservations, peak %d, peaks summed %d, nothing passed, 3 served",
			p, sum.PoolServed, plan, 2*plan)
	}
}

// record --pool serves a thread's first runtime call (testdata/progs/pooled_lazy.c), made before
// the runtime gave the thread a context, from device 0's pool, where the runtime puts the thread.
func TestServedFirstCallOfThread(t *testing.T) {
	dir := newLogDir(t)
	got := runServed(t, dir, sizeClassPool(t), "pooled_lazy", "FAKECUDA_LAZY_CONTEXT=1")
	if want := "new thread's block from the pool: yes\n"; got.ExitCode != 0 || got.Stdout != want || got.Stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want %q", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	events, sum := convertDir(t, dir)
	served := 0
	for i := range events {
		if events[i].Pool {
			served++
		}
	}
	if len(events) != 4 || served != 4 || sum.Lost != 0 || sum.Pool == nil || sum.Pool.PassedThrough != 0 {
		t.Errorf("trace: %d events, %d served, %d lost, pool %+v; want 4, all served, none passed to CUDA",
			len(events), served, sum.Lost, sum.Pool)
	}
}

// With free lists per stream, a block freed on a stream of its own is only ever handed out on that
// stream again: the stream-ordered frees on S1 and S2 record no event (testdata/progs/streams.c
// under a per-stream pool); the frees on the shared legacy stream would.
func TestServedPerStreamNeedsNoEvents(t *testing.T) {
	cfg := sizeClassPool(t)
	sc := *cfg.SizeClass
	sc.PerStream = true
	cfg.SizeClass = &sc
	got := runServed(t, newLogDir(t), cfg, "streams")
	want := `start: syncs 0, events 0, stream waits 0, host waits 0
reused at once on the same stream: yes
one stream: syncs 0, events 0, stream waits 0, host waits 0
a second stream: syncs 0, events 1, stream waits 2, host waits 0
reused on another stream: no
freed on S1, handed out on S2: syncs 0, events 0, stream waits 0, host waits 0
reused on the same stream: yes
freed on S2, handed out on S2: syncs 0, events 0, stream waits 0, host waits 0
reused by cudaMalloc: no
freed on S2, handed out by cudaMalloc: syncs 0, events 0, stream waits 0, host waits 0
device synchronized: syncs 1, events 0, stream waits 0, host waits 0
after the synchronization: syncs 0, events 0, stream waits 0, host waits 0
device 1, one stream: syncs 0, events 0, stream waits 0, host waits 0
device 1 reused after the stream was destroyed: yes
device 1, a destroyed stream's handle again: syncs 1, events 0, stream waits 0, host waits 0
device 2, one thread's default stream: syncs 0, events 0, stream waits 0, host waits 0
device 2, another thread's default stream: syncs 1, events 0, stream waits 0, host waits 0
`
	if got.ExitCode != 0 || got.Stdout != want || got.Stderr != "" {
		t.Errorf("exit %d, stdout\n%s\nstderr %q; want\n%s", got.ExitCode, got.Stdout, got.Stderr, want)
	}
}

// sizeClassPool is the pool the record --pool tests serve from: pool/testdata/sizeclass.json.
// servedTrace runs the test program name under record --pool with the size-class pool, checks that it
// exits 0 with stdout want and nothing on stderr, and returns the events and summary of its trace.
func servedTrace(t *testing.T, name, want string, extraEnv ...string) ([]trace.Event, Summary) {
	t.Helper()
	dir := newLogDir(t)
	got := runServed(t, dir, sizeClassPool(t), name, extraEnv...)
	if got.ExitCode != 0 || got.Stdout != want || got.Stderr != "" {
		t.Errorf("%s: exit %d, stdout\n%s\nstderr %q; want\n%s", name, got.ExitCode, got.Stdout, got.Stderr, want)
	}
	return convertDir(t, dir)
}

func sizeClassPool(t *testing.T) pool.Config {
	return loadConfig(t, filepath.Join("..", "..", "pool", "testdata", "sizeclass.json"))
}

// runServed runs a test program under the shim recording into dir, its allocations served by a
// pool of cfg, with extraEnv added to its environment.
func runServed(t *testing.T, dir string, cfg pool.Config, name string, extraEnv ...string) result {
	t.Helper()
	spec, err := PoolSpec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return runWith(t, dir, []string{env(t).Shim}, append([]string{EnvPool + "=" + spec}, extraEnv...), name)
}

// record --pool and signal handlers (testdata/progs/sighandler.c, 1,000 pairs): the first SIGUSR1
// arrives inside the reservation of the pool's plan, so that handler's cudaMalloc goes to CUDA,
// counted as "signal"; every request that went to CUDA did so for that reason, and each is a
// cudaMalloc the trace shows as not the pool's.
func TestServedSignalHandlerPasses(t *testing.T) {
	dir := newLogDir(t)
	spec, err := PoolSpec(sizeClassPool(t))
	if err != nil {
		t.Fatal(err)
	}
	raise := fmt.Sprintf("FAKECUDA_RAISE=%d:1", int(syscall.SIGUSR1))
	got := runWith(t, dir, []string{env(t).Shim}, []string{EnvPool + "=" + spec, raise}, "sighandler", "1000")
	mainPairs, handlerPairs := parseSighandler(t, "under the pool", got)
	events, sum := convertDir(t, dir)
	var notServed int64
	for i := range events {
		if events[i].Function == "cudaMalloc" && !events[i].Pool {
			notServed++
		}
	}
	p := sum.Pool
	if mainPairs != 1001 || handlerPairs < 1 || p == nil || p.PassedThrough < 1 || p.PassedThrough != notServed ||
		!maps.Equal(p.PassedBy, map[string]int64{"signal": p.PassedThrough}) {
		t.Errorf("main pairs %d, handler pairs %d, %d cudaMalloc not served, pool %+v; want 1001, at least 1, "+
			"every passed request a signal handler's", mainPairs, handlerPairs, notServed, p)
	}
}

// record --pool on a full device (testdata/progs/pooled_oom.c, a fake device of 1 GiB): after 600
// blocks of 1 MiB came and went, 700 MiB are served (the pool gives back its 73 idle slabs first), as
// they are without the pool, except while a stream captures a graph (the pool gives nothing back
// then, and the call fails with CUDA's out of memory); 900 MiB more fail in the pool, then at CUDA.
// The same when the pool passes the large requests to CUDA (its arena capped): the call that finds
// CUDA out of memory is made once more after the give-back.
func TestServedGivesBackIdleMemory(t *testing.T) {
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		Classes: []pool.Class{{Size: 1 << 20, Slots: 16}}, LargeThreshold: 1 << 20, ArenaBytes: 64 << 20, GrowSlots: 8},
		BestFit: &pool.BestFitConfig{GrowBytes: 64 << 20}}
	device := "FAKECUDA_CAPACITY=1073741824"
	want := "700 MiB while a stream captures: 2\n700 MiB after the capture: 0\n900 MiB more: 2\n"
	dir := newLogDir(t)
	got := runServed(t, dir, cfg, "pooled_oom", device)
	if got.ExitCode != 0 || got.Stdout != want {
		t.Errorf("with the pool: exit %d, stdout %q, stderr %q; want %q", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	// the 73 slabs of 8 MiB, given back after the capture; none while it lasted
	if _, sum := convertDir(t, dir); sum.Pool == nil || sum.Pool.IdleReleases != 73 || sum.Pool.IdleReleasedBytes != 584<<20 {
		t.Errorf("pool activity %+v, want 73 idle regions of 584 MiB given back", sum.Pool)
	}
	// With the arena capped at its plan, the pool refuses the large requests without growing: they go
	// to CUDA, which is out of memory, and are made once more after the pool gave back its slabs; for
	// the 900 MiB, with nothing else idle, it gives back its plan too (16 MiB of slots and the 64 MiB
	// arena), to no avail.
	capped := cfg
	capped.BestFit = &pool.BestFitConfig{GrowBytes: 64 << 20, MaximumBytes: 64 << 20}
	dir = newLogDir(t)
	if got := runServed(t, dir, capped, "pooled_oom", device); got.ExitCode != 0 || got.Stdout != want {
		t.Errorf("arena capped: exit %d, stdout %q, stderr %q; want %q", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	if _, sum := convertDir(t, dir); sum.Pool == nil || sum.Pool.IdleReleases != 74 || sum.Pool.IdleReleasedBytes != 664<<20 ||
		sum.Pool.PassedThrough != 3 {
		t.Errorf("arena capped: pool activity %+v, want 74 idle regions of 664 MiB given back, 3 requests passed to CUDA", sum.Pool)
	}
	// With the 600 blocks in the plan, nothing but the plan is idle once they are freed: the pool gives
	// the whole of it back (600 MiB of slots and the 64 MiB arena) and is made again later.
	planned := cfg
	planned.SizeClass = &pool.SizeClassConfig{Classes: []pool.Class{{Size: 1 << 20, Slots: 600}}, LargeThreshold: 1 << 20,
		ArenaBytes: 64 << 20, GrowSlots: 8}
	dir = newLogDir(t)
	if got := runServed(t, dir, planned, "pooled_oom", device); got.ExitCode != 0 || got.Stdout != want {
		t.Errorf("all in the plan: exit %d, stdout %q, stderr %q; want %q", got.ExitCode, got.Stdout, got.Stderr, want)
	}
	if _, sum := convertDir(t, dir); sum.Pool == nil || sum.Pool.IdleReleases != 1 || sum.Pool.IdleReleasedBytes != 664<<20 {
		t.Errorf("all in the plan: pool activity %+v, want the plan of 664 MiB given back once", sum.Pool)
	}
	want = "700 MiB while a stream captures: 0\n700 MiB after the capture: 0\n900 MiB more: 2\n"
	if base := runWith(t, "", nil, []string{device}, "pooled_oom"); base.ExitCode != 0 || base.Stdout != want {
		t.Errorf("without the pool: exit %d, stdout %q; want %q", base.ExitCode, base.Stdout, want)
	}
}

// An IPC export (testdata/progs/ipc_export.c): recorded without a pool, the trace's summary names the
// exported block's size (12,345 B); under a pool the handle of a pool block is refused (1); with
// pool.json's pass_through_sizes naming that size, the block is CUDA's (counted as "excluded") and
// its export works as without the pool, while the 4,000-byte block is still served.
func TestServedPassesExportedSizes(t *testing.T) {
	dir := newLogDir(t)
	plain := runWith(t, dir, []string{env(t).Shim}, nil, "ipc_export")
	_, sum := convertDir(t, dir)
	want := "cudaMalloc 4000: 0\ncudaMalloc 12345: 0\ncudaIpcGetMemHandle: 0\ncudaFree: 0 0\n"
	if plain.Stdout != want || !slices.Equal(sum.IPCExportSizes, []uint64{12345}) {
		t.Errorf("recorded: stdout %q, exported sizes %v; want %q, [12345]", plain.Stdout, sum.IPCExportSizes, want)
	}
	cfg := sizeClassPool(t)
	refused := runServed(t, newLogDir(t), cfg, "ipc_export")
	if wantRefused := strings.Replace(want, "cudaIpcGetMemHandle: 0", "cudaIpcGetMemHandle: 1", 1); refused.Stdout != wantRefused {
		t.Errorf("under the pool: %q, want %q", refused.Stdout, wantRefused)
	}
	cfg.PassThroughSizes = []uint64{12345}
	dir = newLogDir(t)
	passed := runServed(t, dir, cfg, "ipc_export")
	events, sum := convertDir(t, dir)
	served := 0
	for i := range events {
		if events[i].Pool {
			served++
		}
	}
	if passed.Stdout != want || passed.Stderr != "" || sum.Pool == nil ||
		!maps.Equal(sum.Pool.PassedBy, map[string]int64{"excluded": 1}) || served != 2 {
		t.Errorf("passing 12,345 B through: stdout %q, stderr %q, pool %+v, %d calls served; want %q, nothing, "+
			"1 excluded, 2 served (the 4,000-byte block's pair)", passed.Stdout, passed.Stderr, sum.Pool, served, want)
	}
}
