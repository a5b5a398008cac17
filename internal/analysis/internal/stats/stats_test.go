package stats

import (
	"math/rand/v2"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

func TestTimelineKeepsPeakInBound(t *testing.T) {
	var tl Timeline
	const n = 1_000_003
	for i := range n {
		v := uint64(i % 1000)
		if i == 777_777 {
			v = 5000 // the peak
		}
		tl.Add(int64(i), v)
	}
	pts := tl.Points()
	if len(pts) > 2000 {
		t.Fatalf("%d points, want at most 2000", len(pts))
	}
	peak := false
	for i, p := range pts {
		if p[0] == 777_777 && p[1] == 5000 {
			peak = true
		}
		if i > 0 && p[0] < pts[i-1][0] {
			t.Fatalf("points out of time order at %d", i)
		}
	}
	if !peak {
		t.Fatal("peak point lost")
	}
}

func TestSketchExactThenSampled(t *testing.T) {
	s := NewSketch(1000)
	for i := 1; i <= 1000; i++ {
		s.Add(float64(i))
	}
	if !s.Exact() || s.Quantile(0.5) != 500 || s.Quantile(0.9) != 900 || s.Quantile(1) != 1000 {
		t.Fatalf("exact quantiles: exact %v p50 %v p90 %v max %v", s.Exact(), s.Quantile(0.5), s.Quantile(0.9), s.Quantile(1))
	}
	for i := 1001; i <= 100_000; i++ {
		s.Add(float64(i))
	}
	if s.Exact() || s.Count() != 100_000 || len(s.samples) != 1000 {
		t.Fatalf("sampled: exact %v count %d kept %d", s.Exact(), s.Count(), len(s.samples))
	}
	if p := s.Quantile(0.5); p < 45_000 || p > 55_000 {
		t.Errorf("sampled median %v, want about 50000", p)
	}
	if s.Quantile(0) != 1 || s.Quantile(1) != 100_000 {
		t.Errorf("min %v max %v, want exact 1 and 100000", s.Quantile(0), s.Quantile(1))
	}
}

// TestPeakSnapshotMatchesBruteForce checks the journaled snapshot of live counts per size at the
// peak against a full copy taken at every new peak.
func TestPeakSnapshotMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCollector(nil)
	var events []trace.Event
	live := map[uint64]uint64{}
	var addrs []uint64
	var total, peak uint64
	var brute map[uint64]int
	for seq := uint64(1); seq <= 20000; seq++ {
		e := trace.Event{Seq: seq, TimeNs: int64(seq), PID: 1}
		if len(addrs) > 0 && rng.IntN(100) < 48 {
			i := rng.IntN(len(addrs))
			a := addrs[i]
			addrs[i] = addrs[len(addrs)-1]
			addrs = addrs[:len(addrs)-1]
			e.Op, e.Address = trace.OpFree, a
			total -= live[a]
			delete(live, a)
		} else {
			e.Op, e.Address, e.Size = trace.OpAlloc, seq*4096, uint64(512*(1+rng.IntN(300)))
			addrs = append(addrs, e.Address)
			live[e.Address] = e.Size
			total += e.Size
			if total > peak {
				peak = total
				brute = map[uint64]int{}
				for _, s := range live {
					brute[s]++
				}
			}
		}
		events = append(events, e)
	}
	c.Add(events)
	r := c.Finish(10)
	if r.Requests.PeakLiveBytes != peak {
		t.Fatalf("peak %d, want %d", r.Requests.PeakLiveBytes, peak)
	}
	for _, s := range r.Sizes {
		if int(s.AtPeak) != brute[s.Size] {
			t.Fatalf("size %d: %d live at peak, want %d", s.Size, s.AtPeak, brute[s.Size])
		}
	}
}

// TestTimelineMatchesCountBuckets checks the incremental bucket bookkeeping against the rule it
// implements: update n (from 0) goes to bucket n / width, width doubling whenever 1000 buckets fill.
func TestTimelineMatchesCountBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var tl Timeline
	var ref []timelineBucket
	width := uint64(1)
	for n := range uint64(300_000) {
		p := timelinePoint{int64(n), rng.Uint64N(1 << 20)}
		tl.Add(p.time, p.value)
		if n/width >= maxTimelineBuckets {
			for i := range len(ref) / 2 {
				a, b := ref[2*i], ref[2*i+1]
				if b.min.value < a.min.value {
					a.min = b.min
				}
				if b.max.value > a.max.value {
					a.max = b.max
				}
				ref[i] = a
			}
			ref, width = ref[:len(ref)/2], 2*width
		}
		if idx := n / width; int(idx) == len(ref) {
			ref = append(ref, timelineBucket{min: p, max: p, set: true})
		} else if b := &ref[idx]; p.value < b.min.value {
			b.min = p
		} else if p.value > b.max.value {
			b.max = p
		}
	}
	if len(tl.buckets) != len(ref) || tl.width != width {
		t.Fatalf("%d buckets of width %d, want %d of %d", len(tl.buckets), tl.width, len(ref), width)
	}
	for i := range ref {
		if tl.buckets[i] != ref[i] {
			t.Fatalf("bucket %d = %+v, want %+v", i, tl.buckets[i], ref[i])
		}
	}
}
