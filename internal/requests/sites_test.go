package requests

import (
	"slices"
	"testing"
)

// AppendSites makes the ops Append makes, with the site of each op's event beside it: an
// allocation's site is that of the event that asked for its size, and sites follow the events'
// order.
func TestAppendSites(t *testing.T) {
	events := mixedEvents(20000, 7)
	for i := range events {
		events[i].Callsite = 1<<40 + uint64(i)
	}
	var ops, got []Op
	var sites []Site
	plain, x := NewExtractor(Device), NewExtractor(Device)
	for b := range slices.Chunk(events, 333) {
		ops = plain.Append(b, ops)
		got, sites = x.AppendSites(b, got, sites)
	}
	if !slices.Equal(ops, got) || len(sites) != len(ops) || len(ops) < 1000 {
		t.Fatalf("%d ops and %d sites, Append made %d ops (equal: %v)", len(got), len(sites), len(ops), slices.Equal(ops, got))
	}
	for i, o := range got {
		e := events[sites[i].Callsite-1<<40]
		if sites[i].PID != e.PID || (o.IsAlloc() && o.Size != e.Size) ||
			(i > 0 && sites[i].Callsite < sites[i-1].Callsite) {
			t.Fatalf("op %d (%+v): site %+v, event %+v", i, o, sites[i], e)
		}
	}
}
