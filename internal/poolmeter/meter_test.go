package poolmeter

import (
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/upstreams"
	"github.com/allocscope/allocscope/pool"
)

// A Meter over each kind of Upstream: it is a Mapper/Remapper exactly when the wrapped one is, and
// counts as Stats does (a Map a reserve, an Unmap a release, a Remap both); Cost hears every call,
// Map/Unmap/Remap as pages.
func TestMeterCounts(t *testing.T) {
	type call struct {
		c       Call
		size, n uint64
	}
	var calls []call
	sim := poolsim.NewUpstream(0, pool.DefaultAlignment)
	me, up := New(sim, Options{PageBytes: 2 << 20, Cost: func(c Call, size, n uint64) {
		calls = append(calls, call{c, size, n})
	}})
	r, ok := up.(pool.Remapper)
	if !ok {
		t.Fatalf("metered poolsim upstream is %T, not a Remapper", up)
	}
	a, _ := r.Reserve(4096)
	base, _ := r.ReserveAddress(16 << 20)
	if err := r.Map(base, 6<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.Remap(base, base+8<<20, 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.Unmap(base+2<<20, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(a, 4096); err != nil {
		t.Fatal(err)
	}
	want := upstreams.Counts{Reserves: 3, Releases: 3, Remaps: 1, ReservedBytes: 2 << 20,
		PeakReservedBytes: 4096 + 6<<20, GainedBytes: 4096 + 6<<20, PageOps: 3 + 1 + 2}
	if got := me.Counts(); got != want {
		t.Errorf("counts %+v\nwant   %+v", got, want)
	}
	wantCalls := []call{{CallReserve, 4096, 1}, {CallReserve, 2 << 20, 3}, {CallRemap, 2 << 20, 1},
		{CallRelease, 2 << 20, 2}, {CallRelease, 4096, 1}}
	if len(calls) != len(wantCalls) {
		t.Fatalf("cost calls %v, want %v", calls, wantCalls)
	}
	for i := range calls {
		if calls[i] != wantCalls[i] {
			t.Errorf("cost call %d: %v, want %v", i, calls[i], wantCalls[i])
		}
	}
	// A plain Upstream stays plain; a failed call counts nothing.
	pm, plain := New(struct{ pool.Upstream }{poolsim.NewUpstream(1024, pool.DefaultAlignment)}, Options{})
	if _, ok := plain.(pool.Mapper); ok {
		t.Errorf("metered plain Upstream is a Mapper")
	}
	if _, err := plain.Reserve(1 << 20); err == nil || pm.Counts() != (upstreams.Counts{}) {
		t.Errorf("reserve beyond capacity: %v, counts %+v; want an error and nothing counted", err, pm.Counts())
	}
}
