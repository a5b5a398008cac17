package pool

import (
	"reflect"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

func torchConfig(pc PyTorchConfig) Config {
	return Config{Version: 1, Policy: PolicyPyTorch, PyTorch: &pc}
}

func TestPyTorchSegmentsAndSplitting(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{}), up, []step{
		alloc(1000, 0, b),           // 1024 B block in a new 2 MiB small segment
		alloc(15*mib, 0, b+2*mib),   // ≥ 10 MiB: a 16 MiB segment, rest 1 MiB is not > 1 MiB: unsplit 16 MiB block
		alloc(5*mib, 0, b+18*mib),   // < 10 MiB: a 20 MiB segment, split: 5 MiB block, 15 MiB free
		alloc(6*mib, 0, b+23*mib),   // best fit in the 15 MiB rest, split again
		alloc(600000, 0, b+1024),    // 600064 B (512-rounded) from the small segment's rest
		alloc(1000, 5, b+38*mib),    // stream 5 never takes stream 0's blocks: its own segment
		free(b+18*mib, 0),           //
		alloc(4*mib, 0, b+18*mib),   // best fit: the 5 MiB block, rest 1 MiB too small to split
		freeFails(b + 18*mib + 512), //
	})
	want := Stats{Allocs: 7, Frees: 1, LiveBytes: 1000 + 15*mib + 6*mib + 600000 + 1000 + 4*mib,
		BlockBytes: 1024 + 16*mib + 6*mib + 600064 + 1024 + 5*mib, ReservedBytes: 40 * mib, PeakReservedBytes: 40 * mib,
		UpstreamReserves: 4}
	want.PeakLiveBytes = want.LiveBytes + mib
	want.PeakBlockBytes = want.BlockBytes
	wantStats(t, "Stats", a.Stats(), want)
	closeEmpty(t, a, up)
}

func TestPyTorchMaxSplitSize(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{MaxSplitSizeMB: 32}), up, []step{
		alloc(40*mib, 0, b),
		free(b, 0),                 // a cached oversize (≥ 32 MiB) block
		alloc(10*mib, 0, b+40*mib), // below max_split_size: never takes an oversize block
		alloc(24*mib, 0, b+50*mib), // likewise: a new 24 MiB segment
		alloc(32*mib, 0, b),        // at max_split_size: takes the 40 MiB block whole (< 32+20 MiB)
		free(b, 0),
		alloc(64*mib, 0, b+74*mib),
		free(b+74*mib, 0),
		alloc(44*mib, 0, b+138*mib), // 40 MiB too small, 64 MiB ≥ 44+20 MiB too large: a new segment
	})
	s := a.Stats()
	if s.ReservedBytes != 182*mib || s.UpstreamReserves != 5 || s.BlockBytes != 78*mib {
		t.Fatalf("Stats = %+v", s)
	}
	closeEmpty(t, a, up)
}

func TestPyTorchFreeCachedAndRetry(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{CapacityBytes: 64 * mib}), up, []step{
		alloc(30*mib, 0, b),
		free(b, 0),
		alloc(40*mib, 0, b),   // 30+40 > 64: cudaMalloc fails, the cached segment is released, retry succeeds
		allocFails(30*mib, 0), // nothing cached to release: fails twice, then out of memory
	})
	want := Stats{Allocs: 2, Frees: 1, Failures: 1, LiveBytes: 40 * mib, PeakLiveBytes: 40 * mib, BlockBytes: 40 * mib,
		PeakBlockBytes: 40 * mib, ReservedBytes: 40 * mib, PeakReservedBytes: 40 * mib,
		UpstreamReserves: 2, UpstreamReleases: 1, UpstreamFailures: 3}
	wantStats(t, "Stats", a.Stats(), want)
	closeEmpty(t, a, up)
}

func TestPyTorchReleaseAvailableOversize(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{MaxSplitSizeMB: 32, CapacityBytes: 100 * mib}), up, []step{
		alloc(40*mib, 0, b),
		alloc(50*mib, 0, b+40*mib),
		free(b, 0),
		free(b+40*mib, 0),
		alloc(20*mib, 0, b+90*mib), // 90+20 > 100: the smallest oversize block that covers 32 MiB (40) is released
		allocFails(100*mib, 0),     // the 50 MiB one is released too, still not enough: out of memory
	})
	s := a.Stats()
	if s.ReservedBytes != 20*mib || s.UpstreamReleases != 2 || s.UpstreamFailures != 3 || s.Failures != 1 {
		t.Fatalf("Stats = %+v", s)
	}
	closeEmpty(t, a, up)
}

func TestPyTorchRoundupPower2Divisions(t *testing.T) {
	for _, c := range [][3]uint64{{1200, 4, 1280}, {4097, 4, 5120}, {8192, 4, 8192}, {9000, 4, 10240},
		{1153434, 4, 1310720}, {5, 8, 8}, {3000, 2, 3072}} {
		if got := roundupPower2Division(c[0], c[1]); got != c[2] {
			t.Errorf("roundupPower2Division(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{RoundupPower2Divisions: 4}), up, []step{
		alloc(4097, 0, b),          // 5120 B (512-rounding alone would give 4608)
		alloc(1000, 0, b+5120),     // not above 512×4: plain 512-rounding, 1024 B
		alloc(9000, 0, b+6144),     // 10240 B
		alloc(1153434, 0, b+2*mib), // 1.25 MiB: large pool, 20 MiB segment, split
	})
	if s := a.Stats(); s.BlockBytes != 5120+1024+10240+1310720 || s.ReservedBytes != 22*mib {
		t.Fatalf("Stats = %+v", s)
	}
	closeEmpty(t, a, up)
}

func TestPyTorchExpandableSegments(t *testing.T) {
	va := AlignUp(torchAddressSpace, torchLargeBuffer)
	v1, v2 := uint64(poolsim.Base), poolsim.Base+va // the small pool's segment, the large pool's
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{ExpandableSegments: true}), up, []step{
		alloc(1000, 0, v1),          // one 2 MiB page mapped
		alloc(5*mib, 0, v2),         // one 20 MiB page mapped
		alloc(30*mib, 0, v2+5*mib),  // the free 15 MiB end grows by one more page: 35 MiB, split
		alloc(6*mib, 0, v2+35*mib),  // and again: one more page
		free(v2+5*mib, 0),           // a 30 MiB free block that cannot grow
		alloc(19*mib, 0, v2+5*mib),  // prefers it to the 19 MiB end block that can grow
		alloc(19*mib, 0, v2+41*mib), // now the end block is the only fit: no new page
	})
	want := Stats{Allocs: 6, Frees: 1, LiveBytes: 1000 + 5*mib + 6*mib + 38*mib, BlockBytes: 1024 + 5*mib + 6*mib + 38*mib,
		ReservedBytes: 62 * mib, PeakReservedBytes: 62 * mib, UpstreamReserves: 4}
	want.PeakLiveBytes = want.LiveBytes
	want.PeakBlockBytes = want.BlockBytes
	wantStats(t, "Stats", a.Stats(), want)
	if u := up.Stats(); u.Maps != 4 || u.AddressBytes != 2*va {
		t.Fatalf("upstream = %+v", u)
	}
	closeEmpty(t, a, up)
}

func TestPyTorchExpandableUnmapsOnRetry(t *testing.T) {
	const b = poolsim.Base
	va := uint64(80 * mib) // 64 MiB + 1/8, rounded up to 20 MiB
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{ExpandableSegments: true, CapacityBytes: 64 * mib}), up, []step{
		alloc(1000, 0, b),
		alloc(5*mib, 0, b+va),
		alloc(30*mib, 0, b+va+5*mib), // 42 MiB mapped
		free(b+va, 0),
		free(b+va+5*mib, 0),             // 40 MiB mapped and free on stream 0
		alloc(2*mib, 5, b+2*va),         // stream 5's own segment: 62 MiB mapped
		alloc(10*mib, 5, b+2*va+2*mib),  //
		alloc(30*mib, 5, b+2*va+12*mib), // needs 40 MiB more: over capacity, stream 0's free pages are unmapped, retry
	})
	// Stream 0's large segment was left with no page mapped: its address space went back too.
	if u := up.Stats(); u.AddressBytes != 2*va || u.ReservedBytes != 62*mib {
		t.Fatalf("upstream = %+v", u)
	}
	want := Stats{Allocs: 6, Frees: 2, LiveBytes: 1000 + 42*mib, PeakLiveBytes: 1000 + 42*mib, BlockBytes: 1024 + 42*mib,
		PeakBlockBytes: 1024 + 42*mib, ReservedBytes: 62 * mib, PeakReservedBytes: 62 * mib,
		UpstreamReserves: 5, UpstreamReleases: 1, UpstreamFailures: 1}
	wantStats(t, "Stats", a.Stats(), want)
	closeEmpty(t, a, up)
}

func TestPyTorchExpandableNeedsMapper(t *testing.T) {
	_, err := New(torchConfig(PyTorchConfig{ExpandableSegments: true}), struct{ Upstream }{poolsim.NewUpstream(0, 0)})
	want := "new pytorch pool: expandable_segments needs an upstream that maps pages (a pool.Mapper); struct { pool.Upstream } is not one"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// garbage_collection_threshold:0.5 within 100 MiB: before a segment is allocated with more than
// 50 MiB reserved, the wholly free large segments at least as old as their average age (in
// large-pool searches since they became free) are released, round after round, until what is
// reserved above 50 MiB is released; a round does not stop at the target.
func TestPyTorchGarbageCollection(t *testing.T) {
	const b = poolsim.Base
	run := func(gc float64, capacity, d uint64, steps ...step) Stats {
		t.Helper()
		up := poolsim.NewUpstream(0, 2*mib)
		cfg := torchConfig(PyTorchConfig{GarbageCollectionThreshold: gc, CapacityBytes: capacity})
		a := runSteps(t, cfg, up, append([]step{
			alloc(12*mib, 0, b),        // A; large-pool searches: 1
			alloc(14*mib, 0, b+12*mib), // B; 2
			alloc(16*mib, 0, b+26*mib), // C; 3
			free(b, 0),                 // A wholly free at 3
			alloc(d, 0, b+42*mib),      // D; 4: 42 MiB reserved, not above 50: no collection
			free(b+12*mib, 0),          // B and C wholly free at 4
			free(b+26*mib, 0),
		}, steps...))
		s := a.Stats()
		closeEmpty(t, a, up)
		return s
	}
	// D 18 MiB: 60 MiB reserved, 10 above the limit. Ages A 2, B 1, C 1 (average 4/3): A alone
	// goes (12 MiB, enough); B is found again by the next search.
	s := run(0.5, 100*mib, 18*mib, alloc(20*mib, 0, b+60*mib), alloc(14*mib, 0, b+12*mib))
	if s.ReservedBytes != 68*mib || s.UpstreamReleases != 1 || s.UpstreamReserves != 5 {
		t.Errorf("one round: %+v", s)
	}
	// D 30 MiB: 72 MiB reserved, 22 above. A (12 MiB) is not enough; the next round's average is
	// 1: B and C go, 42 MiB in all.
	if s := run(0.5, 100*mib, 30*mib, alloc(20*mib, 0, b+72*mib)); s.ReservedBytes != 50*mib || s.UpstreamReleases != 3 {
		t.Errorf("two rounds: %+v", s)
	}
	// Off, or without a capacity (PyTorch: without a per-process memory fraction): nothing released.
	for _, c := range [][2]float64{{0, 100 * mib}, {0.5, 0}} {
		if s := run(c[0], uint64(c[1]), 18*mib, alloc(20*mib, 0, b+60*mib)); s.ReservedBytes != 80*mib || s.UpstreamReleases != 0 {
			t.Errorf("threshold %g, capacity %g: %+v", c[0], c[1], s)
		}
	}
}

// The range form of roundup_power2_divisions rounds each request with its size bucket's divisions.
func TestPyTorchRoundupRanges(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	// below 4 MiB: 4 divisions; from 4 MiB on: 16
	cfg := torchConfig(PyTorchConfig{RoundupPower2Ranges: []RoundupRange{{2, 4}, {0, 16}}})
	a := runSteps(t, cfg, up, []step{
		alloc(1153434, 0, b),                   // 1.1 MiB, bucket 0, step 256 KiB: 1.25 MiB
		alloc(3*mib+1, 0, b+1310720),           // bucket 1, step 512 KiB: 3.5 MiB
		alloc(5*mib+1, 0, b+1310720+3584*1024), // bucket 2, step 256 KiB: 5.25 MiB
	})
	if s := a.Stats(); s.BlockBytes != 1310720+3584*1024+5376*1024 || s.ReservedBytes != 20*mib {
		t.Fatalf("Stats = %+v", s)
	}
	closeEmpty(t, a, up)
}

// A PolicyPyTorch layout lists the segments and their blocks as a snapshot would (the small pool
// as RegionSmall, a segment's stream); an expandable segment is listed by its mapped runs.
func TestPyTorchLayoutListing(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{}), up, []step{
		alloc(1000, 0, b), alloc(5*mib, 7, b+2*mib), alloc(3*mib, 7, b+7*mib), free(b+2*mib, 7),
	})
	regions := a.(Layouter).Layout()
	want := []Region{
		{Base: b, Size: 2 * mib, Kind: RegionSmall, Blocks: []Block{{Offset: 0, Size: 1024, Live: true, Requested: 1000},
			{Offset: 1024, Size: 2*mib - 1024}}},
		{Base: b + 2*mib, Size: 20 * mib, Kind: RegionLarge, Stream: 7, Blocks: []Block{{Offset: 0, Size: 5 * mib},
			{Offset: 5 * mib, Size: 3 * mib, Live: true, Requested: 3 * mib}, {Offset: 8 * mib, Size: 12 * mib}}},
	}
	if !reflect.DeepEqual(regions, want) {
		t.Errorf("layout %+v, want %+v", regions, want)
	}
	closeEmpty(t, a, up)

	up = poolsim.NewUpstream(0, 2*mib)
	a = runSteps(t, torchConfig(PyTorchConfig{ExpandableSegments: true}), up, []step{alloc(5*mib, 0, b)})
	regions = a.(Layouter).Layout()
	if len(regions) != 1 || regions[0].Size != 20*mib || !regions[0].Expandable || len(regions[0].Blocks) != 2 {
		t.Errorf("expandable: %+v", regions)
	}
	closeEmpty(t, a, up)
}
