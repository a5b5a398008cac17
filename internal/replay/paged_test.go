package replay

import (
	"testing"

	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
)

// pagedConfig is a size-class pool without classes whose arena is 8 MiB of address space in
// 2 MiB pages, at most 6 MiB mapped.
func pagedConfig() pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		ArenaBytes: 8 << 20, ArenaPaging: &pool.ArenaPaging{PageBytes: 2 << 20, BudgetBytes: 6 << 20}}}
}

// pagedTrace is pool.TestPagedArenaExactSequence as a trace: pages 0-2 mapped at New (the
// budget), the 3 MiB and 1 MiB blocks on them, the 4 MiB block needing page 3, onto which idle
// page 0 is moved, the last 2 MiB block on the mapped high end of the emptied arena.
func pagedTrace() *traceBuilder {
	b := &traceBuilder{}
	return b.alloc(0x1000, 3<<20, 0).alloc(0x2000, 1<<20, 0).free(0x1000, 0).alloc(0x3000, 4<<20, 0).
		free(0x2000, 0).free(0x3000, 0).alloc(0x4000, 2<<20, 0).free(0x4000, 0)
}

func TestRunPagedArenaOnHost(t *testing.T) {
	tr := pagedTrace().extract(t)
	cfg := pagedConfig()
	stats, _ := predict(t, tr, cfg)
	if stats.PeakReservedBytes != 6<<20 || stats.UpstreamReserves != 2 || stats.UpstreamReleases != 1 {
		t.Fatalf("prediction %+v: want peak reserved %d, 2 reserves (the budget, a move), 1 release (the move)", stats, 6<<20)
	}
	// Per checked pass: the budget mapped at New, one page moved, pages 1-3 unmapped at Close.
	replayOnHostAsPredicted(t, tr, cfg, [...]uint64{6 << 20, 6 << 20, 4, 4, 8, 0, 0, 8, 0, 0})
}

// TestEngineWrapperRemaps: the engine's counting wrapper of a backend that can move pages is a
// pool.Remapper too, so the paged arena moves idle pages in replay as in simulation: one move
// where pool.TestPagedArenaExactSequence needs one, counted as a reserve and a release.
func TestEngineWrapperRemaps(t *testing.T) {
	h := host.New(1 << 30)
	defer h.Close()
	e, up := newEngineUpstream(h, true)
	if _, ok := up.(pool.Remapper); !ok {
		t.Fatalf("wrapper %T is not a pool.Remapper", up)
	}
	a, err := pool.New(pagedConfig(), up)
	if err != nil {
		t.Fatal(err)
	}
	first, err := a.Alloc(3<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(1<<20, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(first, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(4<<20, 0); err != nil { // page 3 needed beyond the budget: idle page 0 moved there
		t.Fatal(err)
	}
	if c := e.counts(); c.Remaps != 1 || c.Reserves != 2 || c.Releases != 1 || c.ReservedBytes != 6<<20 || e.releaseError() != nil {
		t.Errorf("counts %+v, error %v; want 1 remap, 2 reserves, 1 release, %d reserved, nil", c, e.releaseError(), 6<<20)
	}
	if err := a.Close(); err != nil || e.counts().ReservedBytes != 0 || e.releaseError() != nil {
		t.Errorf("Close: %v, %d bytes still counted, %v", err, e.counts().ReservedBytes, e.releaseError())
	}
}
