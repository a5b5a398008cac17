package pool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// step is one call of a hand-made sequence and its exact expected outcome.
type step struct {
	op     byte   // 'a' alloc, 'f' free, 's' sync
	size   uint64 // alloc: bytes requested
	stream uint64
	addr   uint64 // alloc: expected address; free: address to free
	err    error  // expected error (errors.Is), nil for success
}

// mib is a mebibyte.
const mib = 1 << 20

func alloc(size, stream, want uint64) step {
	return step{op: 'a', size: size, stream: stream, addr: want}
}
func allocFails(size, stream uint64) step {
	return step{op: 'a', size: size, stream: stream, err: ErrOutOfMemory}
}
func free(addr, stream uint64) step { return step{op: 'f', addr: addr, stream: stream} }
func freeFails(addr uint64) step    { return step{op: 'f', addr: addr, err: ErrUnknownAddress} }
func syncPoint() step               { return step{op: 's'} }

// runSteps builds cfg on up and runs the steps, failing at the first unexpected outcome.
func runSteps(t *testing.T, cfg Config, up Upstream, steps []step) Allocator {
	t.Helper()
	a, err := New(cfg, up)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for i, s := range steps {
		var addr uint64
		switch s.op {
		case 'a':
			addr, err = a.Alloc(s.size, s.stream)
		case 'f':
			err = a.Free(s.addr, s.stream)
		case 's':
			err = a.(Syncer).Sync()
		}
		if s.err != nil {
			if !errors.Is(err, s.err) {
				t.Fatalf("step %d (%c %d): err = %v, want %v", i, s.op, s.size, err, s.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d (%c %d): %v", i, s.op, s.size, err)
		}
		if s.op == 'a' && addr != s.addr {
			t.Fatalf("step %d: Alloc(%d, %d) = %#x, want %#x (offset %d, want %d)", i, s.size, s.stream, addr, s.addr, addr-poolsim.Base, s.addr-poolsim.Base)
		}
	}
	return a
}

func wantStats(t *testing.T, what string, got, want Stats) {
	t.Helper()
	if got != want {
		t.Fatalf("%s =\n %+v\nwant\n %+v", what, got, want)
	}
}

func closeEmpty(t *testing.T, a Allocator, up *poolsim.Upstream) {
	t.Helper()
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if u := up.Stats(); u.ReservedBytes != 0 || u.AddressBytes != 0 {
		t.Fatalf("after Close the upstream holds %d bytes and %d of address space", u.ReservedBytes, u.AddressBytes)
	}
}

func TestSizeClassExactSequence(t *testing.T) {
	const b = poolsim.Base
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{512, 4}, {4096, 2}}, LargeThreshold: 4096, ArenaBytes: 1 * mib}}
	// One planned region: 4×512 B slab at b, 2×4096 B slab at b+2048, arena at b+10240.
	const plan = 4*512 + 2*4096 + mib
	grown := uint64(b + plan) // the class's further slab: 2 MiB / 4096 B = 512 slots
	arena2 := grown + 2*mib   // the arena's growth region
	up := poolsim.NewUpstream(0, 512)
	a := runSteps(t, cfg, up, []step{
		alloc(100, 0, b),             // class 512, lowest slot first
		alloc(512, 0, b+512),         // class 512
		alloc(513, 0, b+2048),        // class 4096
		free(b, 0),                   //
		alloc(1, 0, b),               // LIFO: the block freed last comes back first
		alloc(5000, 0, b+10240),      // above the threshold: arena, 5120 B block
		alloc(0, 0, b+1024),          // a 0-byte request takes the smallest class
		alloc(4096, 0, b+6144),       // class 4096's second and last planned slot
		alloc(4000, 0, grown),        // class 4096 exhausted: a further slab (Fallback 1)
		alloc(2*mib, 0, arena2),      // arena too small: grows by the request (Fallback 2)
		freeFails(b + 100),           // not a block start
		free(arena2, 0),              //
		alloc(1*mib+1, 0, arena2),    // best fit: the 2 MiB free region beats the 1 MiB − 5 KiB left in the plan
		freeFails(b + 4*mib + 12345), // nowhere
	})
	want := Stats{Allocs: 10, Frees: 2, LiveBytes: 100 + 512 + 513 + 1 + 5000 + 0 + 4096 + 4000 + mib + 1 - 100,
		BlockBytes: 512*3 + 4096*3 + 5120 + 1049088, ReservedBytes: plan + 4*mib, UpstreamReserves: 3, Fallbacks: 2}
	want.PeakLiveBytes = want.LiveBytes - mib - 1 + 2*mib
	want.PeakBlockBytes = want.BlockBytes - 1049088 + 2*mib
	want.PeakReservedBytes = want.ReservedBytes
	wantStats(t, "Stats", a.Stats(), want)
	peak := want
	peak.Allocs, peak.Frees, peak.LiveBytes, peak.BlockBytes = 9, 1, want.PeakLiveBytes, want.PeakBlockBytes
	wantStats(t, "PeakStats", a.PeakStats(), peak)
	if got := peak.ExternalFragmentation(); got != plan+4*mib-(512*3+4096*3+5120+2*mib) {
		t.Fatalf("ExternalFragmentation = %d", got)
	}
	closeEmpty(t, a, up)
	if s := a.Stats(); s.UpstreamReleases != 3 || s.ReservedBytes != 0 {
		t.Fatalf("after Close: %d releases, %d reserved", s.UpstreamReleases, s.ReservedBytes)
	}
}

func TestSizeClassPerStream(t *testing.T) {
	const b = poolsim.Base
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{512, 2}}, PerStream: true, ArenaBytes: 4096}}
	up := poolsim.NewUpstream(0, 512)
	grown := uint64(b + 1024 + 4096)
	a := runSteps(t, cfg, up, []step{
		alloc(512, 1, b),
		free(b, 1),               // onto stream 1's list
		alloc(512, 2, b+512),     // stream 2 does not take stream 1's block: the never-used slot
		alloc(512, 2, grown),     // nothing for stream 2: a further slab (4096 slots of 512 B)
		alloc(512, 1, b),         // stream 1 gets its own block back
		alloc(512, 2, grown+512), // the grown slab's next slot
		alloc(600, 1, b+1024),    // above every class: the arena
		free(b+1024, 1),          // onto stream 1's arena list
		alloc(600, 2, b+1024+1024),
		alloc(600, 1, b+1024),
	})
	s := a.Stats()
	if s.Fallbacks != 1 || s.ReservedBytes != 1024+4096+2*mib || s.LiveBlocks() != 6 {
		t.Fatalf("Stats = %+v", s)
	}
	closeEmpty(t, a, up)
}

func TestBestFitExactSequence(t *testing.T) {
	const b = poolsim.Base
	cfg := Config{Version: 1, Policy: PolicyBestFit, BestFit: &BestFitConfig{
		InitialBytes: 1 * mib, GrowBytes: 4 * mib, MaximumBytes: 8 * mib}}
	up := poolsim.NewUpstream(0, 512)
	a := runSteps(t, cfg, up, []step{
		alloc(1000, 0, b),      // 1024 B block
		alloc(3000, 0, b+1024), // 3072 B block
		alloc(1000, 0, b+4096),
		free(b+1024, 0),          // a 3 KiB hole between two live blocks
		alloc(2000, 0, b+1024),   // best fit: the hole, split; 1 KiB left at b+3072
		free(b, 0),               // a 1 KiB hole at b: two equal holes now
		alloc(1024, 0, b),        // equal fits: the lowest address
		free(b+4096, 0),          // merges with the hole before it and the free tail after it
		alloc(3072, 0, b+3072),   // so a 3 KiB block fits where two 1 KiB holes were
		alloc(2*mib, 0, b+mib),   // no fit: grow by GrowBytes (4 MiB), Fallback 1
		allocFails(4*mib, 0),     // 2 MiB free there, and growing 4 MiB would pass the 8 MiB maximum
		alloc(3*mib, 0, b+5*mib), // grows by the 3 MiB still allowed, Fallback 2
		free(b+mib, 0),           // its region is free again but does not merge with the first region
		allocFails(4*mib+512, 0), // merged across regions it would fit: it must not
	})
	want := Stats{Allocs: 8, Frees: 4, Failures: 2, LiveBytes: 2000 + 1024 + 3072 + 3*mib, BlockBytes: 2048 + 1024 + 3072 + 3*mib,
		ReservedBytes: 8 * mib, PeakReservedBytes: 8 * mib, UpstreamReserves: 3, Fallbacks: 2}
	want.PeakLiveBytes = want.LiveBytes + 2*mib
	want.PeakBlockBytes = want.BlockBytes + 2*mib
	wantStats(t, "Stats", a.Stats(), want)
	closeEmpty(t, a, up)
}

// TestBestAgedGrowingBlock: a block that grows by reallocation (allocate the next size, then free
// the old one), live blocks 1024, 1536, ... B, in an 8 KiB arena that may not grow. FitBestAged
// puts each new block at the end of the free span away from its younger neighbour, so the old
// block's space merges with the rest of the span and the 3584 B step still fits; FitBest leaves a
// 2560 B hole at each end of a live 3072 B block and fails it.
func TestBestAgedGrowingBlock(t *testing.T) {
	const b = poolsim.Base
	cfg := func(f Fit) Config {
		return Config{Version: 1, Policy: PolicyBestFit, BestFit: &BestFitConfig{InitialBytes: 8192, MaximumBytes: 8192, Fit: f}}
	}
	up := poolsim.NewUpstream(0, 512)
	a := runSteps(t, cfg(FitBestAged), up, []step{
		alloc(1024, 0, b),      // both neighbours of the whole region are ends: the low end
		alloc(1536, 0, b+6656), // the span's low neighbour is younger than its high end: the high end
		free(b, 0),
		alloc(2048, 0, b), // the high neighbour (born 2) is younger than the region's start
		free(b+6656, 0),
		alloc(2560, 0, b+5632),
		free(b, 0),
		alloc(3072, 0, b),
		free(b+5632, 0),
		alloc(3584, 0, b+4608),
	})
	if s := a.Stats(); s.Failures != 0 || s.Fallbacks != 0 || s.LiveBytes != 3072+3584 || s.PeakReservedBytes != 8192 {
		t.Fatalf("best-aged Stats = %+v", s)
	}
	closeEmpty(t, a, up)
	up = poolsim.NewUpstream(0, 512)
	a = runSteps(t, cfg(FitBest), up, []step{
		alloc(1024, 0, b),
		alloc(1536, 0, b+1024),
		free(b, 0),
		alloc(2048, 0, b+2560), // the 1 KiB hole at b is too small
		free(b+1024, 0),
		alloc(2560, 0, b), // exactly the 2560 B hole at b
		free(b+2560, 0),
		alloc(3072, 0, b+2560),
		free(b, 0),
		allocFails(3584, 0), // 2560 B free at each end of the 3072 B block
	})
	if s := a.Stats(); s.Failures != 1 || s.LiveBytes != 3072 {
		t.Fatalf("best Stats = %+v", s)
	}
	if err := a.Free(b+2560, 0); err != nil {
		t.Fatal(err)
	}
	closeEmpty(t, a, up)
}

func TestRawExactSequence(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, Config{Version: 1, Policy: PolicyRaw}, up, []step{
		alloc(1000, 0, b),       // 1024 B reserved; the upstream rounds to 2 MiB
		alloc(3000, 0, b+2*mib), // 3072 B
		free(b, 0),
		alloc(1, 0, b), // the upstream reuses the freed range
		freeFails(b + 512),
	})
	want := Stats{Allocs: 3, Frees: 1, LiveBytes: 3001, PeakLiveBytes: 4000, BlockBytes: 3584, PeakBlockBytes: 4096,
		ReservedBytes: 3584, PeakReservedBytes: 4096, UpstreamReserves: 3, UpstreamReleases: 1}
	wantStats(t, "Stats", a.Stats(), want)
	if u := up.Stats(); u.ReservedBytes != 4*mib {
		t.Fatalf("upstream holds %d", u.ReservedBytes)
	}
	closeEmpty(t, a, up)
}

// TestStreamOrderedMatchesTheH200 runs the sequences of bench/mempool_layout.cu: every
// address (as an offset from the first block) and the reserved bytes after each case are what a
// CUDA memory pool did on the H200 (CUDA 13.0, driver 580.159.04, 2026-12-03).
func TestStreamOrderedMatchesTheH200(t *testing.T) {
	const b, k = poolsim.Base, uint64(1024)
	type layoutCase struct {
		name           string
		steps          []step
		reserved, peak uint64
	}
	cases := []layoutCase{
		{"alignment", []step{alloc(512, 1, b), alloc(512, 1, b+512), alloc(512, 1, b+1024), alloc(512, 1, b+1536),
			alloc(100*k+7, 1, b+2048), alloc(100*k+7, 1, b+2048+102912)}, 32 * mib, 32 * mib},
		{"span", []step{alloc(30*mib, 1, b), alloc(4*mib, 1, b+30*mib), alloc(mib, 1, b+34*mib),
			alloc(40*mib, 1, b+35*mib)}, 96 * mib, 96 * mib},
		{"hole", []step{alloc(10*mib, 1, b), alloc(10*mib, 1, b+10*mib), alloc(10*mib, 1, b+20*mib), free(b+10*mib, 1),
			syncPoint(), alloc(4*mib, 1, b+10*mib), alloc(4*mib, 1, b+14*mib), alloc(4*mib, 1, b+30*mib),
			alloc(mib, 1, b+18*mib)}, 64 * mib, 64 * mib},
		{"bestfit", []step{alloc(8*mib, 1, b), alloc(2*mib, 1, b+8*mib), alloc(3*mib, 1, b+10*mib), alloc(2*mib, 1, b+13*mib),
			alloc(8*mib, 1, b+15*mib), free(b, 1), free(b+10*mib, 1), syncPoint(), alloc(3*mib, 1, b+10*mib),
			alloc(5*mib, 1, b)}, 32 * mib, 32 * mib},
		{"tail", []step{alloc(20*mib, 1, b), alloc(10*mib, 1, b+20*mib), free(b+20*mib, 1), syncPoint(),
			alloc(20*mib, 1, b+20*mib)}, 64 * mib, 64 * mib},
		{"stream", []step{alloc(4*mib, 1, b), free(b, 1), alloc(4*mib, 2, b), alloc(4*mib, 1, b+4*mib), syncPoint(),
			alloc(4*mib, 2, b+8*mib)}, 32 * mib, 32 * mib},
		{"trim", []step{alloc(40*mib, 1, b), alloc(40*mib, 1, b+40*mib), alloc(40*mib, 1, b+80*mib), free(b+80*mib, 1),
			syncPoint(), free(b, 1), syncPoint(), alloc(10*mib, 1, b)}, 96 * mib, 128 * mib},
		{"big", []step{alloc(mib, 1, b), alloc(300*mib, 1, b+mib), alloc(mib, 1, b+301*mib), alloc(2*k, 1, b+302*mib)},
			320 * mib, 320 * mib},
		{"coalesce", []step{alloc(6*mib, 1, b), alloc(6*mib, 1, b+6*mib), alloc(6*mib, 1, b+12*mib), alloc(6*mib, 1, b+18*mib),
			free(b+6*mib, 1), free(b+12*mib, 1), syncPoint(), alloc(12*mib, 1, b+6*mib)}, 32 * mib, 32 * mib},
	}
	cases = append(cases, layoutCase{"nosync", []step{alloc(4*mib, 1, b), free(b, 1), alloc(4*mib, 1, b), free(b, 1), alloc(2*mib, 1, b)}, 32 * mib, 32 * mib})
	for _, n := range []uint64{1, 2} { // "many 1.5M", "many 3M": 40 blocks end to end
		var steps []step
		for i := range uint64(40) {
			steps = append(steps, alloc(n*1536*k, 1, b+i*n*1536*k))
		}
		cases = append(cases, layoutCase{fmt.Sprintf("many %d KiB", n*1536), steps, 64 * mib * n, 64 * mib * n})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := poolsim.NewUpstream(0, 512)
			a := runSteps(t, Config{Version: 1, Policy: PolicyStreamOrdered}, up, c.steps)
			if s := a.Stats(); s.ReservedBytes != c.reserved || s.PeakReservedBytes != c.peak {
				t.Errorf("reserved %d, peak %d; the H200's pool %d, %d", s.ReservedBytes, s.PeakReservedBytes, c.reserved, c.peak)
			}
			freeAll(t, a, c.steps)
			closeEmpty(t, a, up)
		})
	}
}

// freeAll frees the blocks the steps left live.
func freeAll(t *testing.T, a Allocator, steps []step) {
	t.Helper()
	live := map[uint64]bool{}
	for _, s := range steps {
		switch {
		case s.op == 'a' && s.err == nil:
			live[s.addr] = true
		case s.op == 'f':
			delete(live, s.addr)
		}
	}
	for addr := range live {
		if err := a.Free(addr, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamOrderedThreshold: a sync unmaps idle steps, highest first, only while more than the
// release threshold is mapped; out of memory, every idle step is unmapped before the retry.
func TestStreamOrderedThreshold(t *testing.T) {
	const b = poolsim.Base
	cfg := Config{Version: 1, Policy: PolicyStreamOrdered, StreamOrdered: &StreamOrderedConfig{ReleaseThresholdBytes: 64 * mib}}
	up := poolsim.NewUpstream(160*mib, 512)
	a := runSteps(t, cfg, up, []step{
		alloc(32*mib, 1, b), alloc(32*mib, 1, b+32*mib), alloc(32*mib, 1, b+64*mib), alloc(32*mib, 1, b+96*mib),
		free(b, 1), free(b+64*mib, 1), free(b+96*mib, 1),
		syncPoint(),                 // 128 MiB mapped: the top step goes, then the third; the idle first stays
		alloc(64*mib, 2, b+64*mib),  // best fit: the first step's 32 MiB is too small; 128 MiB mapped
		alloc(64*mib, 1, b+128*mib), // 192 MiB would pass 160: the idle first step is unmapped, then it fits
		allocFails(64*mib, 1),       // nothing idle is left
	})
	want := Stats{Allocs: 6, Frees: 3, Failures: 1, LiveBytes: 160 * mib, PeakLiveBytes: 160 * mib, BlockBytes: 160 * mib,
		PeakBlockBytes: 160 * mib, ReservedBytes: 160 * mib, PeakReservedBytes: 160 * mib,
		UpstreamReserves: 6, UpstreamReleases: 3, UpstreamFailures: 3}
	wantStats(t, "Stats", a.Stats(), want)
	freeAll(t, a, []step{alloc(0, 0, b+32*mib), alloc(0, 0, b+64*mib), alloc(0, 0, b+128*mib)})
	closeEmpty(t, a, up)
}

// failingUnmap is a poolsim.Upstream whose Unmap of one address fails once.
type failingUnmap struct {
	*poolsim.Upstream
	addr uint64
}

var errUnmapRefused = errors.New("unmap refused")

func (u *failingUnmap) Unmap(addr, size uint64) error {
	if addr == u.addr {
		u.addr = 0
		return errUnmapRefused
	}
	return u.Upstream.Unmap(addr, size)
}

// TestStreamOrderedUnmapFails: when a trim's unmap fails, Sync returns the error, the step stays
// mapped and usable, and the next sync unmaps it.
func TestStreamOrderedUnmapFails(t *testing.T) {
	const b = poolsim.Base
	sim := poolsim.NewUpstream(0, 512)
	up := &failingUnmap{sim, b + 32*mib}
	a := runSteps(t, Config{Version: 1, Policy: PolicyStreamOrdered}, up, []step{
		alloc(32*mib, 0, b), alloc(32*mib, 0, b+32*mib), free(b+32*mib, 0),
	})
	if err := a.(*streamOrderedPool).Sync(); !errors.Is(err, errUnmapRefused) {
		t.Fatalf("Sync = %v, want the unmap error", err)
	}
	if s := a.Stats(); s.ReservedBytes != 64*mib || s.UpstreamReleases != 0 {
		t.Fatalf("after the failed trim: %+v", s)
	}
	if err := a.(*streamOrderedPool).Sync(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.ReservedBytes != 32*mib || s.UpstreamReleases != 1 {
		t.Fatalf("after the second trim: %+v", s)
	}
	freeAll(t, a, []step{alloc(0, 0, b)})
	closeEmpty(t, a, sim)
}
