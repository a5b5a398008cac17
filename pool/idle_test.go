package pool

import (
	"errors"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// checkStats compares the counters the tests of give-back read with the expected ones.
func checkStats(t *testing.T, got, want Stats) {
	t.Helper()
	got.PeakLiveBytes, got.PeakBlockBytes, got.BlockBytes = 0, 0, 0
	if got != want {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}
}

// A program frees 600 blocks of 1 MiB, which came from grown slabs, and then asks for 700 MiB on a
// device of 1 GiB: the arena's growth finds the device out of memory, the pool gives back the 73
// idle slabs (584 MiB) and the growth succeeds at the top of what is left.
func TestReleaseIdleServesTheLargeRequestAfterSmallFrees(t *testing.T) {
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{mib, 16}}, LargeThreshold: mib, ArenaBytes: 64 * mib, GrowSlots: 8},
		BestFit: &BestFitConfig{GrowBytes: 64 * mib}}
	up := poolsim.NewUpstream(1<<30, 512)
	a, err := New(cfg, up)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]uint64, 600)
	for i := range addrs {
		if addrs[i], err = a.Alloc(mib, 0); err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
	}
	if want := uint64(poolsim.Base + 80*mib + 583*mib); addrs[599] != want {
		t.Fatalf("the last 1 MiB block at %#x, want %#x", addrs[599], want)
	}
	for _, addr := range addrs {
		if err := a.Free(addr, 0); err != nil {
			t.Fatal(err)
		}
	}
	big, err := a.Alloc(700*mib, 0)
	if err != nil {
		t.Fatalf("alloc 700 MiB: %v", err)
	}
	if want := uint64(poolsim.Base + 656*mib); big != want { // the top, lowered by the last slab given back
		t.Errorf("700 MiB at %#x, want %#x", big, want)
	}
	checkStats(t, a.Stats(), Stats{Allocs: 601, Frees: 600, LiveBytes: 700 * mib, ReservedBytes: 780 * mib,
		PeakReservedBytes: 780 * mib, UpstreamReserves: 75, UpstreamReleases: 73, UpstreamFailures: 1, Fallbacks: 74,
		IdleReleases: 73, IdleReleasedBytes: 584 * mib})
	if st := up.Stats(); st.ReservedBytes != 780*mib || st.Failures != 1 || st.Releases != 73 {
		t.Errorf("upstream %+v", st)
	}
	if regions := a.(Layouter).Layout(); len(regions) != 2 || regions[0].Kind != RegionPlan || regions[1].Base != big {
		t.Errorf("layout %+v", regions)
	}
}

// A class growth that finds the device out of memory succeeds after the idle slab of another class
// is given back; the class whose slab went keeps no slot of it (its next request grows it again),
// and a slab holding a deferred block is not idle until the device synchronized.
func TestReleaseIdleLetsAClassGrow(t *testing.T) {
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{mib, 1}, {2 * mib, 1}}, LargeThreshold: 2 * mib, GrowSlots: 4}}
	const b = poolsim.Base
	up := poolsim.NewUpstream(14*mib, 512)
	a, err := New(cfg, up)
	if err != nil {
		t.Fatal(err)
	}
	d := a.(Deferrer)
	steps := []struct {
		op   byte // a alloc, f free, d deferred free, s synced
		size uint64
		addr uint64 // alloc: expected address (0: fails); free: the block
	}{
		{'a', mib, b}, // the plan's 1 MiB slot
		// slab A1
		{'a', mib, b + 3*mib}, {'a', mib, b + 4*mib}, {'a', mib, b + 5*mib}, {'a', mib, b + 6*mib},
		{'f', 0, b + 3*mib}, {'f', 0, b + 5*mib}, {'f', 0, b + 4*mib}, {'f', 0, b + 6*mib},
		{'a', 2 * mib, b + mib},   // the plan's 2 MiB slot
		{'a', 2 * mib, b + 3*mib}, // 7+8 MiB > 14: A1 goes back, the 8 MiB slab takes its place
		{'d', 0, b + 3*mib},       // deferred: the slab is in use still
		{'a', mib, 0},             // class 1 MiB has no slot left and nothing is idle: 11+4 MiB > 14
		{'s', 0, 0},
		{'a', mib, b + 3*mib}, // the 8 MiB slab goes back, a new 1 MiB slab in its place
	}
	for i, s := range steps {
		var err error
		var addr uint64
		switch s.op {
		case 'a':
			addr, err = a.Alloc(s.size, 0)
			if s.addr == 0 {
				if !errors.Is(err, ErrOutOfMemory) {
					t.Fatalf("step %d: alloc %d: %#x, %v; want out of memory", i, s.size, addr, err)
				}
				continue
			}
		case 'f':
			err = a.Free(s.addr, 0)
		case 'd':
			err = d.FreeDeferred(s.addr, 0)
		case 's':
			d.Synced()
		}
		if err != nil || addr != s.addr && s.op == 'a' {
			t.Fatalf("step %d (%c %d): %#x, %v; want %#x", i, s.op, s.size, addr, err, s.addr)
		}
	}
	checkStats(t, a.Stats(), Stats{Allocs: 8, Frees: 5, Failures: 1, LiveBytes: 4 * mib, ReservedBytes: 7 * mib,
		PeakReservedBytes: 11 * mib, UpstreamReserves: 4, UpstreamReleases: 2, UpstreamFailures: 3, Fallbacks: 3,
		IdleReleases: 2, IdleReleasedBytes: 12 * mib})
}

// An arena growth that finds the device out of memory gives back the arena's entirely free
// segment, not the one with a live block, and takes the freed room.
func TestReleaseIdleGivesBackAnArenaSegment(t *testing.T) {
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{4096, 1}}, LargeThreshold: 4096}}
	const b = poolsim.Base
	up := poolsim.NewUpstream(10*mib, 512)
	a := runSteps(t, cfg, up, []step{
		alloc(2*mib, 0, b+4096),
		alloc(6*mib, 0, b+4096+2*mib),
		free(b+4096+2*mib, 0),
		alloc(7*mib, 0, b+4096+2*mib), // 2+6+7 MiB > 10: the free 6 MiB segment goes back
	})
	checkStats(t, a.Stats(), Stats{Allocs: 3, Frees: 1, LiveBytes: 9 * mib, ReservedBytes: 4096 + 9*mib,
		PeakReservedBytes: 4096 + 9*mib, UpstreamReserves: 4, UpstreamReleases: 1, UpstreamFailures: 1, Fallbacks: 3,
		IdleReleases: 1, IdleReleasedBytes: 6 * mib})
	regions := a.(Layouter).Layout()
	if len(regions) != 3 || regions[1].Size != 2*mib || regions[2].Base != b+4096+2*mib || regions[2].Size != 7*mib {
		t.Errorf("layout %+v", regions)
	}
	// a block too large even for the whole device fails after one give-back round that found nothing
	if _, err := a.Alloc(9*mib, 0); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("alloc 9 MiB: %v, want out of memory", err)
	}
	if s := a.Stats(); s.UpstreamFailures != 2 || s.IdleReleases != 1 || s.Failures != 1 {
		t.Errorf("after the failure: %+v", s)
	}
}

// ReleaseIdle gives back only what grew beyond the plan: the plan stays while a block in it is
// live, and also once nothing is live; a second call finds nothing.
func TestReleaseIdleKeepsThePlan(t *testing.T) {
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{4096, 1}}, LargeThreshold: 4096, ArenaBytes: 8192, GrowSlots: 2},
		BestFit: &BestFitConfig{GrowBytes: mib}}
	const b = poolsim.Base
	a := runSteps(t, cfg, poolsim.NewUpstream(0, 512), []step{
		alloc(4096, 0, b), alloc(4096, 0, b+12288), // the plan's slot, then a slab of 2
		alloc(10000, 0, b+12288+8192), // the arena grows by 1 MiB
		free(b+12288, 0), free(b+12288+8192, 0),
	})
	r := a.(IdleReleaser)
	if got := r.ReleaseIdle(); got != 8192+mib {
		t.Errorf("ReleaseIdle = %d, want %d", got, 8192+mib)
	}
	if got := r.ReleaseIdle(); got != 0 {
		t.Errorf("ReleaseIdle again = %d, want 0", got)
	}
	if err := a.Free(b, 0); err != nil {
		t.Fatal(err)
	}
	if got := r.ReleaseIdle(); got != 0 {
		t.Errorf("ReleaseIdle with nothing live = %d, want 0 (the plan stays)", got)
	}
	checkStats(t, a.Stats(), Stats{Allocs: 3, Frees: 3, ReservedBytes: 12288, PeakReservedBytes: 12288 + 8192 + mib,
		UpstreamReserves: 3, UpstreamReleases: 2, Fallbacks: 2, IdleReleases: 2, IdleReleasedBytes: 8192 + mib})
	if regions := a.(Layouter).Layout(); len(regions) != 1 || regions[0].Kind != RegionPlan {
		t.Errorf("layout %+v", regions)
	}
	// the plan's arena space serves still
	if addr, err := a.Alloc(8000, 0); err != nil || addr != b+4096 {
		t.Errorf("alloc 8000 from the plan's arena: %#x, %v", addr, err)
	}
	if err := a.Close(); err != nil || r.ReleaseIdle() != 0 {
		t.Errorf("close: %v", err)
	}
}
