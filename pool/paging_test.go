package pool

import (
	"errors"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

func pagedConfig(arena, budget uint64) Config {
	return Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{ArenaBytes: arena,
		ArenaPaging: &ArenaPaging{PageBytes: 2 * mib, BudgetBytes: budget}}}
}

// TestPagedArenaExactSequence: the budget's pages are mapped at New, others when a block first
// needs them; the end of a span needing fewer new pages is used, and idle pages are unmapped
// (highest first) only when mapping more would pass the budget.
func TestPagedArenaExactSequence(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 512)
	a := runSteps(t, pagedConfig(8*mib, 6*mib), up, []step{ // pages 0-2 mapped at New
		alloc(3*mib, 0, b),       // the low end needs no new page, the high end page 3
		alloc(mib, 0, b+3*mib),   // low end, on page 1
		free(b, 0),               // page 0 idle
		alloc(4*mib, 0, b+4*mib), // pages 2-3: page 3 would pass the budget: idle page 0 unmapped first
		free(b+3*mib, 0),
		free(b+4*mib, 0),         // pages 1-3 idle, mapped
		alloc(2*mib, 0, b+6*mib), // the whole arena is free: its high end is mapped, its low end is not
	})
	want := Stats{Allocs: 4, Frees: 3, LiveBytes: 2 * mib, PeakLiveBytes: 5 * mib, BlockBytes: 2 * mib,
		PeakBlockBytes: 5 * mib, ReservedBytes: 6 * mib, PeakReservedBytes: 6 * mib, UpstreamReserves: 2, UpstreamReleases: 1}
	wantStats(t, "Stats", a.Stats(), want)
	// poolsim.Upstream is a Remapper: idle page 0 is moved to page 3 rather than unmapped and a page mapped.
	if u := up.Stats(); u.Maps != 1 || u.Unmaps != 0 || u.Remaps != 1 || u.ReservedBytes != 6*mib || u.AddressBytes != 8*mib {
		t.Fatalf("upstream %+v", u)
	}
	closeEmpty(t, a, up)
}

// TestPagedArenaOverBudget: when no idle page is left the budget is exceeded, not the request
// refused; with budget 0 pages are never unmapped.
func TestPagedArenaOverBudget(t *testing.T) {
	const b = poolsim.Base
	for _, budget := range []uint64{2 * mib, 0} {
		up := poolsim.NewUpstream(0, 512)
		a := runSteps(t, pagedConfig(8*mib, budget), up, []step{
			alloc(2*mib, 0, b),
			alloc(2*mib, 0, b+2*mib), // over a 2 MiB budget with nothing idle: mapped anyway
			free(b, 0),
			alloc(4*mib, 0, b+4*mib),
		})
		s := a.Stats()
		wantUnmaps := map[uint64]uint64{2 * mib: 1, 0: 0}[budget]
		if s.PeakReservedBytes != 8*mib-wantUnmaps*2*mib || s.UpstreamReleases != wantUnmaps || s.Failures != 0 {
			t.Fatalf("budget %d: Stats %+v", budget, s)
		}
		closeEmpty(t, a, up)
	}
}

// TestPagedArenaMapFails: when the upstream refuses a map, idle pages are unmapped and the map
// tried once more; when that fails too the request fails and the arena is as it was.
func TestPagedArenaMapFails(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(4*mib, 512)
	a := runSteps(t, pagedConfig(16*mib, 0), up, []step{
		alloc(2*mib, 0, b),
		alloc(mib, 0, b+2*mib),   // 4 MiB mapped: the capacity
		free(b, 0),               // page 0 idle
		alloc(3*mib, 0, b+3*mib), // page 2 needed: refused, idle page 0 unmapped, mapped on the retry
		allocFails(4*mib, 0),     // pages 3-4 needed, nothing idle
		free(b+2*mib, 0),
		alloc(mib, 0, b+2*mib), // the failed request left the arena as it was: the mapped end of [0, 3 MiB)
	})
	want := Stats{Allocs: 4, Frees: 2, Failures: 1, LiveBytes: 4 * mib, PeakLiveBytes: 4 * mib, BlockBytes: 4 * mib,
		PeakBlockBytes: 4 * mib, ReservedBytes: 4 * mib, PeakReservedBytes: 4 * mib,
		UpstreamReserves: 3, UpstreamReleases: 1, UpstreamFailures: 2}
	wantStats(t, "Stats", a.Stats(), want)
	closeEmpty(t, a, up)
}

func TestPagedArenaNeedsMapper(t *testing.T) {
	_, err := New(pagedConfig(8*mib, 0), plainUpstream{poolsim.NewUpstream(0, 512)})
	if err == nil || !strings.Contains(err.Error(), "arena_paging needs an upstream that maps pages") {
		t.Fatalf("New over a plain Upstream = %v", err)
	}
	if err := pagedConfig(3*mib, 0).Validate(); err == nil || !strings.Contains(err.Error(), "size_class.arena_paging.arena_bytes") {
		t.Fatalf("Validate of a 3 MiB paged arena = %v", err)
	}
}

// plainUpstream hides a poolsim.Upstream's Mapper methods.
type plainUpstream struct{ u *poolsim.Upstream }

func (p plainUpstream) Reserve(size uint64) (uint64, error) { return p.u.Reserve(size) }
func (p plainUpstream) Release(addr, size uint64) error     { return p.u.Release(addr, size) }

// TestPagedArenaPremapFails: New fails when the budget cannot be mapped, holding nothing.
func TestPagedArenaPremapFails(t *testing.T) {
	up := poolsim.NewUpstream(4*mib, 512)
	if _, err := New(pagedConfig(8*mib, 6*mib), up); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("New with a 6 MiB budget on 4 MiB = %v, want ErrOutOfMemory", err)
	}
	if u := up.Stats(); u.ReservedBytes != 0 || u.AddressBytes != 0 {
		t.Fatalf("after the failed New the upstream holds %+v", u)
	}
}

// mapperOnly hides a poolsim.Upstream's Remap: the paged arena then unmaps idle pages and maps others.
type mapperOnly struct{ *poolsim.Upstream }

func (m mapperOnly) Remap() {} // shadows poolsim.Upstream.Remap with another signature: not a Remapper

// TestPagedArenaWithoutRemap: TestPagedArenaExactSequence over a Mapper that cannot remap: page 0
// is unmapped and page 3 mapped, with the same counts at the pool.
func TestPagedArenaWithoutRemap(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 512)
	var m Mapper = mapperOnly{up}
	if _, ok := m.(Remapper); ok {
		t.Fatal("mapperOnly is a Remapper")
	}
	a := runSteps(t, pagedConfig(8*mib, 6*mib), m, []step{
		alloc(3*mib, 0, b), alloc(mib, 0, b+3*mib), free(b, 0), alloc(4*mib, 0, b+4*mib),
		free(b+3*mib, 0), free(b+4*mib, 0), alloc(2*mib, 0, b+6*mib),
	})
	if s := a.Stats(); s.UpstreamReserves != 2 || s.UpstreamReleases != 1 || s.PeakReservedBytes != 6*mib {
		t.Fatalf("Stats %+v", s)
	}
	if u := up.Stats(); u.Maps != 2 || u.Unmaps != 1 || u.Remaps != 0 {
		t.Fatalf("upstream %+v", u)
	}
	closeEmpty(t, a, up)
}
