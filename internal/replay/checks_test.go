package replay

import (
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
)

// brokenAllocator is a deliberately wrong pool: it reserves one region and hands out every block
// at base+offset, so live blocks overlap; with outside set, it hands out addresses past the end of
// its region.
type brokenAllocator struct {
	rawAllocator
	region, regionSize uint64
	outside            bool
}

func (a *brokenAllocator) Alloc(size, _ uint64) (uint64, error) {
	if a.region == 0 {
		addr, err := a.up.Reserve(1 << 20)
		if err != nil {
			return 0, err
		}
		a.region, a.regionSize = addr, 1<<20
		a.stats.UpstreamReserves++
		a.stats.ReservedBytes, a.stats.PeakReservedBytes = 1<<20, 1<<20
	}
	addr := a.region + 64*a.stats.Allocs // overlaps every block bigger than 64 bytes
	if a.outside {
		addr = a.region + a.regionSize + 4096*a.stats.Allocs
	}
	a.sizes[addr] = size
	a.count(size)
	return addr, nil
}

func (a *brokenAllocator) count(size uint64) {
	s := &a.stats
	s.Allocs++
	s.LiveBytes += size
	s.PeakLiveBytes = max(s.PeakLiveBytes, s.LiveBytes)
	s.BlockBytes, s.PeakBlockBytes = s.LiveBytes, s.PeakLiveBytes
}

func (a *brokenAllocator) Free(addr, _ uint64) error {
	size, ok := a.sizes[addr]
	if !ok {
		return pool.ErrUnknownAddress
	}
	delete(a.sizes, addr)
	a.stats.Frees++
	a.stats.LiveBytes -= size
	a.stats.BlockBytes = a.stats.LiveBytes
	return nil
}

func (a *brokenAllocator) Close() error {
	if a.region != 0 {
		a.stats.UpstreamReleases++
		a.stats.ReservedBytes = 0
		return a.up.Release(a.region, a.regionSize)
	}
	return nil
}

func brokenAllocators(outside bool) func(pool.Config, pool.Upstream) (pool.Allocator, error) {
	return func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error) {
		if cfg.Policy == pool.PolicyRaw {
			return newRawAllocator(cfg, up)
		}
		return &brokenAllocator{rawAllocator: rawAllocator{up: up, sizes: map[uint64]uint64{}}, outside: outside}, nil
	}
}

func checkStatus(rep *Report, name string) string {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c.Status + ": " + c.Detail
		}
	}
	return "missing"
}

func TestVerifyCatchesOverlappingAllocator(t *testing.T) {
	h := host.New(1 << 30)
	defer h.Close()
	opt := Options{Modes: []Mode{ModeRaw, ModePool}, Verify: true, NewAllocator: brokenAllocators(false)}
	rep, err := Run(smallTrace().extract(t), h, pool.Config{Policy: pool.PolicyBestFit}, opt)
	if err != nil {
		t.Fatal(err)
	}
	pl := rep.Mode(ModePool)
	// A at +0 (1000 bytes); B at +64 overlaps A (and is not kept as live); A is freed; C at +128
	// overlaps nothing live; D at +192 overlaps C.
	if pl.Overlaps != 2 || pl.OutsideReserved != 0 || pl.VerifyChecks != 4 || rep.Mode(ModeRaw).Overlaps != 0 {
		t.Errorf("pool overlaps %d, outside %d, checks %d, raw overlaps %d; want 2, 0, 4, 0",
			pl.Overlaps, pl.OutsideReserved, pl.VerifyChecks, rep.Mode(ModeRaw).Overlaps)
	}
	want := "fail: 4 allocations checked, 2 overlaps, 0 outside reserved memory"
	if got := checkStatus(rep, "pool: verify: no overlapping blocks, all inside reserved memory"); got != want {
		t.Errorf("check = %q, want %q", got, want)
	}
	if rep.Passed || !strings.Contains(pl.Errors[0], "overlaps live block") {
		t.Errorf("passed %v, errors %q", rep.Passed, pl.Errors)
	}
}

func TestVerifyCatchesBlocksOutsideReservedMemory(t *testing.T) {
	clock := &vclock{}
	opt := Options{Modes: []Mode{ModePool}, Verify: true, Clock: clock.read, NewAllocator: brokenAllocators(true)}
	rep, err := Run(smallTrace().extract(t), newSimBackend(clock, 1<<30), pool.Config{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	pl := rep.Mode(ModePool)
	if pl.OutsideReserved != 4 || pl.Overlaps != 0 || rep.Passed {
		t.Errorf("outside %d, overlaps %d, passed %v; want 4, 0, false", pl.OutsideReserved, pl.Overlaps, rep.Passed)
	}
	if !strings.HasSuffix(pl.Errors[0], "is not inside memory reserved from the backend") {
		t.Errorf("first error %q", pl.Errors[0])
	}
}

// corruptingBackend is a host backend whose memset leaves the middle byte of every replayed block
// unwritten (the warm-up's blocks are written correctly).
type corruptingBackend struct{ *host.Backend }

func (c corruptingBackend) Touch(addr, size uint64, pattern byte) error {
	if err := c.Backend.Touch(addr, size, pattern); err != nil {
		return err
	}
	if size != warmUpBytes && size != warmUpSmallBytes {
		b, _ := c.Bytes(addr, size)
		b[size/2] = ^pattern
	}
	return c.Check(addr, size, pattern)
}

func TestTouchCatchesCorruptedBlock(t *testing.T) {
	h := corruptingBackend{host.New(1 << 30)}
	defer h.Close()
	rep, err := Run(smallTrace().extract(t), h, pool.Config{}, Options{Modes: []Mode{ModeAsync}, Touch: true})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Mode(ModeAsync)
	// Four blocks fail their read-back after the memset, and again at their free.
	if m.Touched != 4 || m.TouchFailures != 8 || rep.Passed {
		t.Errorf("touched %d, failures %d, passed %v; want 4, 8, false", m.Touched, m.TouchFailures, rep.Passed)
	}
	if !strings.HasPrefix(m.Errors[0], "repetition 1, request 0: touch 1000 bytes at ") ||
		!strings.Contains(m.Errors[0], ": byte 500 of block ") {
		t.Errorf("first error %q", m.Errors[0])
	}
	want := "fail: 4 blocks written, 8 read back wrong"
	if got := checkStatus(rep, "async: touch: every block kept its pattern"); got != want {
		t.Errorf("check = %q, want %q", got, want)
	}
}

// TestTouchCatchesBlockOverwrittenWhileLive lets every other touch pass and corrupts the block
// of the third request while it is live: the check before its free reports it.
func TestTouchCatchesBlockOverwrittenWhileLive(t *testing.T) {
	h := &overwritingBackend{Backend: host.New(1 << 30)}
	defer h.Close()
	rep, err := Run(smallTrace().extract(t), h, pool.Config{}, Options{Modes: []Mode{ModeAsync}, Touch: true})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Mode(ModeAsync)
	if m.Touched != 4 || m.TouchFailures != 1 || rep.Passed {
		t.Errorf("touched %d, failures %d, passed %v; want 4, 1, false", m.Touched, m.TouchFailures, rep.Passed)
	}
	if want := "block at"; len(m.Errors) != 1 || !strings.Contains(m.Errors[0], "changed while live: byte 0 of block") {
		t.Errorf("errors %q, want one containing %q", m.Errors, want)
	}
}

// overwritingBackend zeroes the first byte of the block touched second (B) right after touching
// the third (C), as a wild write from elsewhere would.
type overwritingBackend struct {
	*host.Backend
	touches int
	second  uint64
}

func (o *overwritingBackend) Touch(addr, size uint64, pattern byte) error {
	err := o.Backend.Touch(addr, size, pattern)
	if size == warmUpBytes || size == warmUpSmallBytes {
		return err
	}
	o.touches++
	switch o.touches {
	case 2:
		o.second = addr
	case 3:
		b, _ := o.Bytes(o.second, 1)
		b[0] = 0
	}
	return err
}

// TestLeakCheckCatchesLeakingBackend uses a sim backend whose Release keeps 100 bytes of every
// region it frees.
func TestLeakCheckCatchesLeakingBackend(t *testing.T) {
	clock := &vclock{}
	run := func(tolerance uint64) *Report {
		b := newSimBackend(clock, 1<<30)
		b.leakOnRelease = 100
		opt := Options{Modes: []Mode{ModeRaw}, Clock: clock.read, NewAllocator: testAllocators(clock, 1<<20, 1),
			LeakToleranceBytes: tolerance}
		rep, err := Run(smallTrace().extract(t), b, pool.Config{}, opt)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := run(0)
	// The two warm-up blocks leak before the start is read; the four replayed blocks of the timed
	// pass and the four of the checked pass after.
	if rep.Memory.LeakedBytes != 800 || rep.Passed {
		t.Errorf("leaked %d, passed %v; want 800, false", rep.Memory.LeakedBytes, rep.Passed)
	}
	want := "fail: 1073741624 bytes free at the start, 1073740824 at the end: 800 bytes leaked (tolerance 0)"
	if got := checkStatus(rep, "backend free memory back to its start"); got != want {
		t.Errorf("check = %q\nwant %q", got, want)
	}
	if rep := run(800); !rep.Passed {
		t.Errorf("with a tolerance of 800 bytes: failed %+v", rep.Failed())
	}
}

func TestAllocatorThatKeepsMemoryAfterCloseFails(t *testing.T) {
	clock := &vclock{}
	opt := Options{Modes: []Mode{ModePool}, Clock: clock.read,
		NewAllocator: func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error) {
			return &keepingAllocator{chunkAllocator{rawAllocator: rawAllocator{up: up, sizes: map[uint64]uint64{}},
				chunk: 8192, freeBySize: map[uint64][]uint64{}, clock: clock}}, nil
		}}
	rep, err := Run(smallTrace().extract(t), newSimBackend(clock, 1<<30), pool.Config{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := checkStatus(rep, "pool: allocator gave all memory back"), "fail: 8192 bytes still held after close"; got != want {
		t.Errorf("check = %q, want %q", got, want)
	}
}

// keepingAllocator forgets to release its regions in Close.
type keepingAllocator struct{ chunkAllocator }

func (k *keepingAllocator) Close() error { return nil }

func TestRecordedRatio(t *testing.T) {
	st := ExtractStats{Allocs: 3, Frees: 1, RecordedCalls: 4, RecordedCallNs: 40000}
	per, speedup := recordedRatio(st, &ModeResult{AllocatorTimeNs: 200})
	if per != 10000 || speedup != 200 { // 10 µs recorded vs 50 ns per request
		t.Errorf("recordedRatio = %v, %v; want 10000, 200", per, speedup)
	}
	if per, speedup := recordedRatio(ExtractStats{Allocs: 3}, &ModeResult{AllocatorTimeNs: 200}); per != 0 || speedup != 0 {
		t.Errorf("no durations: %v, %v; want 0, 0", per, speedup)
	}
	if per, speedup := recordedRatio(st, nil); per != 10000 || speedup != 0 {
		t.Errorf("no pool mode: %v, %v; want 10000, 0", per, speedup)
	}
}

func TestMedianIgnoresOneSlowRepetition(t *testing.T) {
	cases := []struct {
		ns   []int64
		want int64
	}{
		{nil, 0},
		{[]int64{7}, 7},
		{[]int64{90, 80, 590}, 90},      // the 590 (a preempted repetition) does not move it
		{[]int64{100, 80, 90, 590}, 95}, // even count: the mean of the two middle values
	}
	for _, c := range cases {
		if got := median(c.ns); got != c.want {
			t.Errorf("median(%v) = %d, want %d", c.ns, got, c.want)
		}
	}
}
