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
