package replay

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/pool"
)

// simRun replays smallTrace twice in every mode on a simBackend with a virtual clock: raw costs
// 1000 ns per Reserve and 800 per Release, the chunk pool 10 ns per call (plus a Reserve of 6144
// bytes at its first allocation), async 100 ns per alloc and 50 per free.
func simRun(t *testing.T, opt Options) (*Report, *simBackend) {
	t.Helper()
	clock := &vclock{}
	b := newSimBackend(clock, 1<<30)
	opt.Repeat = 2
	opt.Clock = clock.read
	opt.NewAllocator = testAllocators(clock, 6144, 10)
	cfg := pool.Config{Version: 1, Policy: pool.PolicyBestFit, Prediction: &pool.Prediction{PeakReservedBytes: 6144}}
	rep, err := Run(smallTrace().extract(t), b, cfg, opt)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep, b
}

func TestRunExactFiguresOnSimBackend(t *testing.T) {
	rep, b := simRun(t, Options{Verify: true, Touch: true})
	raw, pl, async := rep.Mode(ModeRaw), rep.Mode(ModePool), rep.Mode(ModeAsync)
	if raw == nil || pl == nil || async == nil {
		t.Fatalf("modes = %v", rep.Modes)
	}
	type figures struct {
		Allocs, Frees, FinalFrees, PeakLive, PeakReserved, PeakMemInfo, Touched, VerifyChecks uint64
		TimeNs                                                                                int64
		Alloc, Free                                                                           Latency
	}
	get := func(m *ModeResult) figures {
		return figures{m.Allocs, m.Frees, m.FinalFrees, m.PeakLiveBytes, m.PeakReservedBytes, m.PeakMemInfoBytes,
			m.Touched, m.VerifyChecks, m.AllocatorTimeNs, m.Alloc, m.Free}
	}
	for _, c := range []struct {
		m    *ModeResult
		want figures
	}{
		{raw, figures{8, 6, 2, 6000, 6000, 6000, 8, 8, 4*1000 + 3*800,
			Latency{8, 1000, 1000, 1000, 1000}, Latency{6, 800, 800, 800, 800}}},
		{pl, figures{8, 6, 2, 6000, 6144, 6144, 8, 8, 1010 + 3*10 + 3*10,
			Latency{8, 260, 10, 1010, 1010}, Latency{6, 10, 10, 10, 10}}},
		{async, figures{8, 6, 2, 6000, 6000, 6000, 8, 8, 4*100 + 3*50,
			Latency{8, 100, 100, 100, 100}, Latency{6, 50, 50, 50, 50}}},
	} {
		if got := get(c.m); got != c.want {
			t.Errorf("%s: got  %+v\nwant %+v", c.m.Mode, got, c.want)
		}
		if !reflect.DeepEqual(c.m.AllocatorTimeNsByRepetition, []int64{c.want.TimeNs, c.want.TimeNs}) {
			t.Errorf("%s: time by repetition = %v", c.m.Mode, c.m.AllocatorTimeNsByRepetition)
		}
	}
	if rep.SpeedupRawOverPool != 6400.0/1070 || rep.SpeedupAsyncOverPool != 550.0/1070 {
		t.Errorf("speedups = %v, %v; want %v, %v", rep.SpeedupRawOverPool, rep.SpeedupAsyncOverPool, 6400.0/1070, 550.0/1070)
	}
	wantStats := pool.Stats{Allocs: 4, Frees: 4, LiveBytes: 0, PeakLiveBytes: 6000, BlockBytes: 0, PeakBlockBytes: 6000,
		ReservedBytes: 6144, PeakReservedBytes: 6144, UpstreamReserves: 1}
	if *pl.PoolStats != wantStats {
		t.Errorf("pool stats = %+v\nwant %+v", *pl.PoolStats, wantStats)
	}
	if pl.UpstreamReserves != 2 || pl.UpstreamReleases != 2 || raw.UpstreamReserves != 8 || raw.UpstreamReleases != 8 {
		t.Errorf("upstream calls: pool %d/%d, raw %d/%d; want 2/2, 8/8",
			pl.UpstreamReserves, pl.UpstreamReleases, raw.UpstreamReserves, raw.UpstreamReleases)
	}
	if !rep.Passed || len(rep.Failed()) != 0 {
		t.Errorf("passed = %v, failed checks %+v", rep.Passed, rep.Failed())
	}
	if rep.Memory.LeakedBytes != 0 || rep.Memory.StartFreeBytes != 1<<30 || b.liveStreams != 0 || len(b.regions) != 0 {
		t.Errorf("memory %+v, live streams %d, regions %d; want no leak", rep.Memory, b.liveStreams, len(b.regions))
	}
}

func TestRunChecksListed(t *testing.T) {
	rep, _ := simRun(t, Options{Verify: true, Touch: true})
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Status+" "+c.Name)
	}
	want := []string{
		"pass raw: every allocation succeeded",
		"pass raw: every free succeeded",
		"pass raw: allocator gave all memory back",
		"pass raw: allocator's stats match the engine's account",
		"pass raw: verify: no overlapping blocks, all inside reserved memory",
		"pass raw: touch: every block kept its pattern",
		"pass pool: every allocation succeeded",
		"pass pool: every free succeeded",
		"pass pool: allocator gave all memory back",
		"pass pool: allocator's stats match the engine's account",
		"pass pool: verify: no overlapping blocks, all inside reserved memory",
		"pass pool: touch: every block kept its pattern",
		"pass async: every allocation succeeded",
		"pass async: every free succeeded",
		"pass async: allocator gave all memory back",
		"pass async: verify: no overlapping blocks, all inside reserved memory",
		"pass async: touch: every block kept its pattern",
		"pass backend free memory back to its start",
		"pass pool: peak reserved within 1% of the prediction",
		"pass pool: peak reserved <= 1.05 x peak live",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("checks =\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}

func TestRunInterleavesModes(t *testing.T) {
	var order []string
	clock := &vclock{}
	b := newSimBackend(clock, 1<<30)
	opt := Options{Repeat: 3, Modes: []Mode{ModePool, ModeRaw}, Clock: clock.read,
		NewAllocator: func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error) {
			order = append(order, string(cfg.Policy))
			return testAllocators(clock, 1<<20, 1)(cfg, up)
		}}
	if _, err := Run(smallTrace().extract(t), b, pool.Config{Policy: pool.PolicySizeClass}, opt); err != nil {
		t.Fatal(err)
	}
	// Each repetition: a timed pass of each mode, then a checked pass of each mode.
	want := []string{"sizeclass", "raw", "sizeclass", "raw", "sizeclass", "raw", "sizeclass", "raw", "sizeclass", "raw", "sizeclass", "raw"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("allocators built in order %v, want %v", order, want)
	}
}

func TestUnknownFreeIsCountedNotFatal(t *testing.T) {
	b := smallTrace()
	b.free(0x7777, 0).free(0x1000, 0).free(0x1000, 0) // unknown; frees C; C again (unknown)
	clock := &vclock{}
	opt := Options{Modes: []Mode{ModeRaw, ModeAsync}, Clock: clock.read, NewAllocator: testAllocators(clock, 1<<20, 1)}
	rep, err := Run(b.extract(t), newSimBackend(clock, 1<<30), pool.Config{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Trace.UnknownFrees != 2 || rep.Trace.Frees != 4 || rep.Mode(ModeRaw).Frees != 4 || rep.Mode(ModeRaw).FinalFrees != 0 {
		t.Errorf("unknown frees %d, frees %d, raw frees %d, final %d; want 2, 4, 4, 0",
			rep.Trace.UnknownFrees, rep.Trace.Frees, rep.Mode(ModeRaw).Frees, rep.Mode(ModeRaw).FinalFrees)
	}
	if !rep.Passed || rep.Warnings[0] != "2 frees of addresses that were not live: reported, not replayed" {
		t.Errorf("passed %v, warnings %q", rep.Passed, rep.Warnings)
	}
}

func TestFailedAllocationsAreCountedAndTheirFreesSkipped(t *testing.T) {
	clock := &vclock{}
	b := newSimBackend(clock, 2<<20) // room for the 2 MiB warm-up block
	tb := &traceBuilder{}
	tb.alloc(0x1000, 1<<20, 0).alloc(0x2000000, 3<<19, 0).free(0x2000000, 0).free(0x1000, 0) // the 1.5 MiB block fails
	opt := Options{Modes: []Mode{ModeRaw}, Clock: clock.read, NewAllocator: testAllocators(clock, 1, 1)}
	rep, err := Run(tb.extract(t), b, pool.Config{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	raw := rep.Mode(ModeRaw)
	if raw.Failures != 1 || raw.OOMs != 1 || raw.SkippedFrees != 1 || raw.Allocs != 1 || raw.Frees != 1 {
		t.Errorf("failures %d, OOMs %d, skipped frees %d, allocs %d, frees %d; want 1, 1, 1, 1, 1",
			raw.Failures, raw.OOMs, raw.SkippedFrees, raw.Allocs, raw.Frees)
	}
	if rep.Passed || rep.Failed()[0].Name != "raw: every allocation succeeded" {
		t.Errorf("passed %v, failed %+v", rep.Passed, rep.Failed())
	}
}

// clockSpy is an allocator that notes how many clock readings came before each of its calls.
type clockSpy struct {
	pool.Allocator
	reads *int
	at    []int
}

func (s *clockSpy) Alloc(size, stream uint64) (uint64, error) {
	s.at = append(s.at, *s.reads)
	return s.Allocator.Alloc(size, stream)
}

func (s *clockSpy) Free(addr, stream uint64) error {
	s.at = append(s.at, *s.reads)
	return s.Allocator.Free(addr, stream)
}

// TestTimedPassReadsTheClockPerChunk checks that the timed pass reads the clock only between
// chunks of 4096 requests while the checked pass reads it before and after every call.
func TestTimedPassReadsTheClockPerChunk(t *testing.T) {
	tr := randomTrace(rand.New(rand.NewPCG(1, 2)), 10000).extract(t)
	clock, reads := &vclock{}, 0
	var spies []*clockSpy
	opt := Options{Modes: []Mode{ModePool}, MaxOverhead: 100, Clock: func() int64 { reads++; return clock.read() },
		NewAllocator: func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error) {
			a, err := testAllocators(clock, 1<<30, 1)(cfg, up)
			spies = append(spies, &clockSpy{Allocator: a, reads: &reads})
			return spies[len(spies)-1], err
		}}
	rep, err := Run(tr, newSimBackend(clock, 1<<40), pool.Config{Policy: pool.PolicyBestFit}, opt)
	if err != nil || !rep.Passed {
		t.Fatalf("err %v, failed %+v", err, rep.Failed())
	}
	if len(spies) != 2 || len(tr.Ops) <= 2*progressEvery || len(tr.Ops) > 3*progressEvery {
		t.Fatalf("%d allocators, %d requests; want 2 allocators, 8193..12288 requests", len(spies), len(tr.Ops))
	}
	timed, checked := spies[0], spies[1]
	calls := len(checked.at) - int(rep.Mode(ModePool).FinalFrees) // the final frees are not timed
	if got := timed.at[calls-1] - timed.at[0]; got != 4 {
		t.Errorf("timed pass: %d clock readings between its first and last call; want 4 (two chunk boundaries)", got)
	}
	if got := checked.at[calls-1] - checked.at[0]; got != 2*(calls-1) {
		t.Errorf("checked pass: %d clock readings between its first and last call; want %d", got, 2*(calls-1))
	}
	// 1 ns per call plus the one 1000-ns Reserve of the chunk allocator's only chunk.
	if m, want := rep.Mode(ModePool), int64(calls+1000); m.AllocatorTimeNs != want || m.ClockedTimeNs != want {
		t.Errorf("allocator time %d, clocked %d; want both %d", m.AllocatorTimeNs, m.ClockedTimeNs, want)
	}
}

// TestRunAsyncSynchronizesAtSyncPoints replays smallTrace, whose seven cudaMalloc/cudaFree calls
// all synchronize, in async mode on the simulated backend, where Synchronize costs 5000 ns: the
// backend synchronizes at each of them in both passes, the time is reported apart and stays out of
// the allocator time and the latencies (100 ns per alloc, 50 per free).
func TestRunAsyncSynchronizesAtSyncPoints(t *testing.T) {
	clock := &vclock{}
	b := newSimBackend(clock, 1<<30)
	opt := Options{Modes: []Mode{ModeAsync, ModeRaw}, Repeat: 2, Clock: clock.read, NewAllocator: testAllocators(clock, 1<<20, 1),
		MaxOverhead: 100}
	rep, err := Run(smallTrace().extract(t), b, pool.Config{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	async, raw := rep.Mode(ModeAsync), rep.Mode(ModeRaw)
	type figures struct {
		Syncs       uint64
		SyncTimeNs  int64
		TimeNs      int64
		Alloc, Free Latency
	}
	got := figures{async.Syncs, async.SyncTimeNs, async.AllocatorTimeNs, async.Alloc, async.Free}
	want := figures{14, 7 * 5000, 4*100 + 3*50, Latency{8, 100, 100, 100, 100}, Latency{6, 50, 50, 50, 50}}
	if got != want || async.ClockedTimeNs != 550 {
		t.Errorf("async: got  %+v, clocked %d\nwant %+v, clocked 550", got, async.ClockedTimeNs, want)
	}
	if raw.Syncs != 0 || raw.SyncTimeNs != 0 {
		t.Errorf("raw: syncs %d, sync time %d; want 0, 0", raw.Syncs, raw.SyncTimeNs)
	}
	// The warm-up's Synchronize, then per async pass (2 timed, 2 checked) 7 at the sync points
	// and 1 before the pool is read.
	if b.syncs != 1+4*(7+1) || !rep.Passed {
		t.Errorf("Synchronize calls %d, passed %v; want %d, true (failed %+v)", b.syncs, rep.Passed, 1+4*8, rep.Failed())
	}
}

// TestRunAsyncWithoutSyncPoints replays stream-ordered calls, which do not synchronize: async mode
// never synchronizes inside the trace.
func TestRunAsyncWithoutSyncPoints(t *testing.T) {
	clock := &vclock{}
	b := newSimBackend(clock, 1<<30)
	tb := &traceBuilder{}
	for _, e := range smallTrace().events {
		e.Function += "Async"
		tb.add(e)
	}
	rep, err := Run(tb.extract(t), b, pool.Config{}, Options{Modes: []Mode{ModeAsync}, Clock: clock.read})
	if err != nil {
		t.Fatal(err)
	}
	if m := rep.Mode(ModeAsync); m.Syncs != 0 || m.SyncTimeNs != 0 || m.AllocatorTimeNs != 550 || b.syncs != 1+2 {
		t.Errorf("syncs %d, sync time %d, allocator time %d, Synchronize calls %d; want 0, 0, 550, 3",
			m.Syncs, m.SyncTimeNs, m.AllocatorTimeNs, b.syncs)
	}
}
