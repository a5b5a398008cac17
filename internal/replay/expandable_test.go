package replay

import (
	"errors"
	"fmt"
	"github.com/allocscope/allocscope/internal/requests"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
)

// expandableConfig is PolicyPyTorch with expandable_segments and the given capacity (0 = none).
func expandableConfig(capacity uint64) pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyPyTorch,
		PyTorch: &pool.PyTorchConfig{ExpandableSegments: true, CapacityBytes: capacity}}
}

// expandableTrace has a small block (one 2 MiB page of the small pool) and large blocks of 30 MiB
// (two 20 MiB pages of the large pool), 1 MiB + 1 and 50 MiB on one stream, then a 10 MiB block
// on a second stream (its own segment).
func expandableTrace() *traceBuilder {
	b := &traceBuilder{}
	return b.alloc(0x1000, 1000, 0).
		alloc(0x100000, 30<<20, 0).
		free(0x100000, 0).
		alloc(0x200000, 1<<20+1, 0).
		alloc(0x300000, 50<<20, 0).
		free(0x1000, 0).
		alloc(0x400000, 10<<20, 3).
		free(0x200000, 0).
		free(0x400000, 3)
}

// predict runs cfg's allocator over tr on a simulated address space, as analyze does, and returns
// its Stats and PeakStats: what the replay must reproduce exactly.
func predict(t *testing.T, tr *Trace, cfg pool.Config) (pool.Stats, pool.Stats) {
	t.Helper()
	a, err := pool.New(cfg, poolsim.NewUpstream(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	f := requests.NewFeeder(a)
	f.Feed(tr.Ops, tr.Streams)
	if err := f.FreeLive(tr.Streams[0]); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Failures != 0 {
		t.Fatalf("prediction: %d failed allocations", s.Failures)
	}
	return a.Stats(), a.PeakStats()
}

func TestRunExpandableSegmentsOnHost(t *testing.T) {
	tr := expandableTrace().extract(t)
	cfg := expandableConfig(0)
	stats, _ := predict(t, tr, cfg)
	// Small pool: one 2 MiB page. Large pool, stream 0: 30 MiB maps two 20 MiB pages; the 1 MiB + 1
	// block fits in the freed 30 MiB; 50 MiB takes the 40 - 1 MiB free behind it and one more
	// page (60 MiB). Stream 3: 10 MiB maps one page. Peak 2 + 60 + 20 MiB, four Map calls.
	if stats.PeakReservedBytes != 82<<20 || stats.UpstreamReserves != 4 {
		t.Fatalf("prediction: peak reserved %d, maps %d; want %d, 4", stats.PeakReservedBytes, stats.UpstreamReserves, 82<<20)
	}
	// The engine's own account: 4 maps and, at Close, 3 unmaps (one per mapped run) per pass,
	// a timed and a checked pass per repetition (the checked passes' calls are summed).
	replayOnHostAsPredicted(t, tr, cfg, [...]uint64{82 << 20, 82 << 20, 8, 6, 10, 0, 0, 10, 0, 0})
}

// replayOnHostAsPredicted replays tr with cfg on a host backend (pool and raw modes, two
// repetitions, --verify and --touch) and checks that every check passes, that the pool's counters
// equal analyze's simulation of it exactly, that the pool mode's peak reserved, peak MemGetInfo,
// upstream reserves and releases, verify checks, blocks outside reserved memory, overlaps, blocks
// touched, touch failures and leaked bytes are want, and that the backend holds nothing after.
func replayOnHostAsPredicted(t *testing.T, tr *Trace, cfg pool.Config, want [10]uint64) {
	t.Helper()
	stats, peak := predict(t, tr, cfg)
	cfg.Prediction = &pool.Prediction{PeakReservedBytes: stats.PeakReservedBytes}
	h := host.New(1 << 30)
	defer h.Close()
	rep, err := Run(tr, h, cfg, Options{Modes: []Mode{ModePool, ModeRaw}, Repeat: 2, Verify: true, Touch: true, MaxOverhead: 100})
	if err != nil {
		t.Fatal(err)
	}
	pl := rep.Mode(ModePool)
	if !rep.Passed {
		t.Fatalf("failed checks %+v\nerrors %q", rep.Failed(), pl.Errors)
	}
	if *pl.PoolStats != stats || *pl.PoolPeakStats != peak {
		t.Errorf("pool stats  %+v\nprediction %+v\npeak stats %+v\nprediction %+v", *pl.PoolStats, stats, *pl.PoolPeakStats, peak)
	}
	got := [...]uint64{pl.PeakReservedBytes, pl.PeakMemInfoBytes, pl.UpstreamReserves, pl.UpstreamReleases,
		pl.VerifyChecks, pl.OutsideReserved, pl.Overlaps, pl.Touched, pl.TouchFailures, pl.LeakedBytes}
	if got != want {
		t.Errorf("pool: got %v, want %v", got, want)
	}
	if h.Reservations() != 0 || mapped(h) != 0 || rep.Memory.LeakedBytes != 0 {
		t.Errorf("after the replay: %d reservations, %d bytes mapped, %d bytes leaked", h.Reservations(), mapped(h), rep.Memory.LeakedBytes)
	}
}

// TestRunExpandableSegmentsUnmapsUnderCapacity caps the device at 64 MiB. Stream 0 maps a 2 MiB
// small page and two 20 MiB large pages for 30 MiB, then frees the block; stream 3's 30 MiB would
// take reserved memory to 82 MiB, so PyTorch's release-cached-and-retry unmaps stream 0's free
// 40 MiB first. The replay must follow the prediction exactly: peak 42 MiB, three maps, one unmap
// before Close and two at Close.
func TestRunExpandableSegmentsUnmapsUnderCapacity(t *testing.T) {
	b := &traceBuilder{}
	tr := b.alloc(0x1000, 1000, 0).alloc(0x100000, 30<<20, 0).free(0x100000, 0).
		alloc(0x200000, 30<<20, 3).free(0x200000, 3).free(0x1000, 0).extract(t)
	cfg := expandableConfig(64 << 20)
	stats, peak := predict(t, tr, cfg)
	if stats.PeakReservedBytes != 42<<20 || stats.UpstreamReserves != 3 || stats.UpstreamReleases != 1 || stats.Failures != 0 {
		t.Fatalf("prediction %+v: want peak reserved %d, 3 maps, 1 unmap, no failure", stats, 42<<20)
	}
	cfg.Prediction = &pool.Prediction{PeakReservedBytes: stats.PeakReservedBytes}
	h := host.New(1 << 30)
	defer h.Close()
	rep, err := Run(tr, h, cfg, Options{Modes: []Mode{ModePool}, Verify: true, Touch: true, MaxOverhead: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		t.Fatalf("failed checks %+v\nerrors %q", rep.Failed(), rep.Mode(ModePool).Errors)
	}
	pl := rep.Mode(ModePool)
	if *pl.PoolStats != stats || *pl.PoolPeakStats != peak {
		t.Errorf("pool stats  %+v\nprediction %+v\npeak stats %+v\nprediction %+v", *pl.PoolStats, stats, *pl.PoolPeakStats, peak)
	}
	if got := [...]uint64{pl.PeakReservedBytes, pl.UpstreamReserves, pl.UpstreamReleases, pl.VerifyChecks, pl.OutsideReserved}; got != [...]uint64{42 << 20, 3, 3, 3, 0} {
		t.Errorf("peak reserved, maps, unmaps, verified, outside = %v; want [%d 3 3 3 0]", got, 42<<20)
	}
}

func TestRunExpandableSegmentsNeedsMapper(t *testing.T) {
	clock := &vclock{}
	_, err := Run(expandableTrace().extract(t), newSimBackend(clock, 1<<30), expandableConfig(0),
		Options{Modes: []Mode{ModePool}, Clock: clock.read})
	prefix, want := "mode pool, repetition 1: build pytorch allocator: ", "expandable_segments needs an upstream that maps pages"
	if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q ... %q", err, prefix, want)
	}
}

// TestEngineUpstreamVerify checks the engine's account of mapped pages under --verify: maps merge
// within one reservation, unmaps cut them, and calls on memory not mapped so are reported.
func TestEngineUpstreamVerify(t *testing.T) {
	h := host.New(16 * page)
	defer h.Close()
	e, up := newEngineUpstream(h, true)
	c := e.check
	m := up.(pool.Mapper)
	a, err := m.ReserveAddress(8 * page)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(m.Map(a, 2*page), m.Map(a+2*page, 2*page), m.Unmap(a+page, page)); err != nil {
		t.Fatal(err)
	}
	if n := e.counts(); n.ReservedBytes != 3*page || n.PeakReservedBytes != 4*page || n.Reserves != 2 ||
		n.Releases != 1 || c.releaseError != nil {
		t.Errorf("counts %+v, error %v; want %d reserved, %d peak, 2 maps, 1 unmap, nil", n, c.releaseError, 3*page, 4*page)
	}
	if _, ok := c.regions.Containing(a+2*page, 2*page); !ok {
		t.Errorf("a block across the two Map calls is not inside a mapped region")
	}
	if _, ok := c.regions.Containing(a, 2*page); ok {
		t.Errorf("a block across the unmapped page is inside a mapped region")
	}
	if err := m.ReleaseAddress(a, 8*page); err == nil || c.releaseError == nil ||
		!strings.Contains(c.releaseError.Error(), "still mapped") {
		t.Errorf("ReleaseAddress with pages mapped: err %v, recorded %v", err, c.releaseError)
	}
	c.releaseError = nil
	if err := m.Unmap(a+page, page); err == nil || c.releaseError == nil ||
		c.releaseError.Error() != fmtRange("unmap of [%#x, +%d) that was not mapped", a+page, page) {
		t.Errorf("Unmap of an unmapped page: err %v, recorded %v", err, c.releaseError)
	}
	if err := errors.Join(m.Unmap(a, page), m.Unmap(a+2*page, 2*page), m.ReleaseAddress(a, 8*page)); err != nil {
		t.Fatal(err)
	}
	if n := e.counts(); n.ReservedBytes != 0 || c.regions.Len() != 0 || n.Releases != 3 {
		t.Errorf("at the end: reserved %d, regions %d, unmaps %d; want 0, 0, 3", n.ReservedBytes, c.regions.Len(), n.Releases)
	}
}

func fmtRange(format string, addr, size uint64) string { return fmt.Sprintf(format, addr, size) }
