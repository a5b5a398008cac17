package whatif

import (
	"testing"

	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// The simulation of record --pool (a Deferred policy) on a device of --capacity gives back idle
// memory as the pool inside the program does: 600 blocks of 1 MiB freed with cudaFree (deferred),
// then 700 MiB on 1 GiB. The request would grow the arena: the pool synchronizes once, the frees
// land, the growth finds the device out of memory, the 73 slabs grown for the small blocks go back
// and the growth succeeds.
func TestDeferredPolicyGivesBackIdleMemory(t *testing.T) {
	const mib = 1 << 20
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		Classes: []pool.Class{{Size: mib, Slots: 16}}, LargeThreshold: mib, ArenaBytes: 64 * mib, GrowSlots: 8},
		BestFit: &pool.BestFitConfig{GrowBytes: 64 * mib}}
	var events []trace.Event
	for i := range uint64(600) {
		events = append(events, ev(trace.OpAlloc, 0x10000000+i*mib, mib))
	}
	for i := range uint64(600) {
		free := ev(trace.OpFree, 0x10000000+i*mib, 0)
		free.Function = "cudaFree"
		events = append(events, free)
	}
	events = append(events, ev(trace.OpAlloc, 0x80000000, 700*mib))
	policies := []Policy{{Name: "record-pool", Config: cfg, Deferred: true}, {Name: "served-at-once", Config: cfg}}
	outs, err := Run(decoded(t, &source{events: events}), policies, 1<<30, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		s := o.Stats
		if o.Err != nil || s.Failures != 0 || s.Allocs != 601 || s.IdleReleases != 73 || s.IdleReleasedBytes != 584*mib ||
			s.UpstreamFailures != 1 || s.ReservedBytes != 780*mib || s.PeakReservedBytes != 780*mib {
			t.Errorf("%s: %v, stats %+v", o.Policy.Name, o.Err, s)
		}
	}
	if s := outs[0].Stats; s.Syncs != 1 {
		t.Errorf("record-pool: %d syncs, want 1", s.Syncs)
	}
}
