package stats

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/benchutil"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/synth"
	"github.com/allocscope/allocscope/trace"
)

// bruteForce replays the synthetic trace (every event a request) with a map of live blocks.
func bruteForce(events []trace.Event) []schema.DetailEvent {
	type block struct {
		i    int
		time int64
	}
	live := map[uint64]block{}
	var bytes uint64
	out := make([]schema.DetailEvent, len(events))
	for i, e := range events {
		o := schema.DetailEvent{Request: uint64(i + 1), Seq: e.Seq, TimeNs: e.TimeNs, PID: e.PID, Device: e.Device,
			Stream: e.Stream, LifetimeNs: -1}
		if e.Op == trace.OpFree {
			b := live[e.Address]
			delete(live, e.Address)
			a := &out[b.i]
			bytes -= a.SizeBytes
			a.LifetimeNs = e.TimeNs - b.time
			o.Free, o.SizeBytes, o.Callsite, o.LifetimeNs = true, a.SizeBytes, a.Callsite, a.LifetimeNs
		} else {
			live[e.Address] = block{i, e.TimeNs}
			bytes += e.Size
			o.SizeBytes, o.Callsite = e.Size, fmt.Sprintf("%#x", e.Callsite)
		}
		o.LiveBytes = bytes
		out[i] = o
	}
	return out
}

// wantPoints returns the requests a bucket of requests [lo, hi) keeps: the first with the least
// live bytes and the first with the most, in order.
func wantPoints(all []schema.DetailEvent, lo, hi int) []uint64 {
	mn, mx := lo, lo
	for i := lo; i < hi; i++ {
		if all[i].LiveBytes < all[mn].LiveBytes {
			mn = i
		}
		if all[i].LiveBytes > all[mx].LiveBytes {
			mx = i
		}
	}
	if mn == mx {
		return []uint64{uint64(mn + 1)}
	}
	return []uint64{uint64(min(mn, mx) + 1), uint64(max(mn, mx) + 1)}
}

// TestDetailTimeline checks every level of the detail against a replay of the trace: each bucket's
// points are its lowest and highest request, and each point's event (size, callsite, lifetime) is
// right, also when the buckets were merged and the lifetime table pruned on the way.
func TestDetailTimeline(t *testing.T) {
	for _, c := range []struct {
		events  uint64
		maxLive int // synth's bound on live blocks: long lifetimes make the lifetime table prune
		limit   int
		levels  int
	}{{3000, 0, 4096, 5}, {200_000, 0, 4096, 5}, {300_000, 100_000, 4, 1}} {
		t.Run(fmt.Sprintf("%d events, %d buckets", c.events, c.limit), func(t *testing.T) {
			var events []trace.Event
			src := &synth.Source{Events: c.events, MaxLive: c.maxLive}
			for b, err := src.Next(); err == nil; b, err = src.Next() {
				events = append(events, b...)
			}
			coll := NewCollector(nil)
			coll.KeepDetail()
			coll.native.detail.limit = c.limit
			coll.Add(events)
			res := coll.Finish(10)
			checkDetail(t, res, bruteForce(events), c.levels)
		})
	}
}

func checkDetail(t *testing.T, res *Result, all []schema.DetailEvent, levels int) {
	t.Helper()
	d := res.Detail
	if d == nil || len(d.Levels) != levels {
		t.Fatalf("detail with %d levels, want %d", len(d.Levels), levels)
	}
	for _, e := range d.Events {
		if want := all[e.Request-1]; e != want {
			t.Fatalf("event %+v, want %+v", e, want)
		}
	}
	for l, lv := range d.Levels {
		w := int(lv.BucketEvents)
		var got, want []uint64
		for _, p := range lv.Points {
			got = append(got, d.Events[p].Request)
		}
		for lo := 0; lo < len(all); lo += w {
			want = append(want, wantPoints(all, lo, min(lo+w, len(all)))...)
		}
		if !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("level %d (%d requests a bucket): %d points, want %d; from point %d: requests %v, want %v",
				l, w, len(got), len(want), i, got[i:min(i+4, len(got))], want[i:min(i+4, len(want))])
		}
		top := slices.MaxFunc(lv.Points, func(a, b int32) int { return int(d.Events[a].LiveBytes) - int(d.Events[b].LiveBytes) })
		if p := d.Events[top]; p.LiveBytes != res.Requests.PeakLiveBytes || p.Seq != res.Requests.PeakSeq {
			t.Errorf("level %d tops at %d bytes (seq %d), want the peak, %d (seq %d)", l, p.LiveBytes, p.Seq,
				res.Requests.PeakLiveBytes, res.Requests.PeakSeq)
		}
	}
}

// BenchmarkDetail measures the statistics pass with and without the HTML report's detail, as
// BenchmarkStatistics of package analysis does: 256K synthetic events generated beforehand, fed 16
// times per iteration.
func BenchmarkDetail(b *testing.B) {
	const n, repeat = 1 << 18, 16
	events := make([]trace.Event, 0, n)
	src := synth.New(n)
	for batch, err := src.Next(); err == nil; batch, err = src.Next() {
		events = append(events, batch...)
	}
	runtime.GC()
	for _, detail := range []bool{false, true} {
		b.Run(fmt.Sprintf("detail=%v", detail), func(b *testing.B) {
			cpu := benchutil.CPU()
			for b.Loop() {
				c := NewCollector([]uint64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20})
				if detail {
					c.KeepDetail()
				}
				for range repeat {
					for i := 0; i < n; i += 8192 {
						c.Add(events[i:min(i+8192, n)])
					}
				}
				c.Finish(10)
			}
			benchutil.Report(b, n*repeat, benchutil.CPU()-cpu)
		})
	}
}
