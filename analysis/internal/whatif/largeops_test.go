package whatif

import (
	"errors"
	"testing"

	"github.com/allocscope/allocscope/analysis/internal/synth"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// TestServesMatchesFitArena: the large ops of the synthetic trace above 4096 B, held in memory,
// serve a probe of any higher threshold, size and strategy exactly when FitArena finds it fails
// nothing reading the whole trace; the sizes around the grown arena's peak give both answers.
func TestServesMatchesFitArena(t *testing.T) {
	const events = 40_000
	thresholds := []uint64{4096, 65536, 1 << 20}
	var cands []Candidate
	for _, th := range thresholds {
		cands = append(cands, Candidate{Threshold: th})
	}
	sz, err := Size(synth.New(events), requests.Device, cands, nil)
	if err != nil {
		t.Fatal(err)
	}
	var probes []ArenaProbe
	for i, th := range thresholds {
		for _, f := range pool.Fits {
			for pct := uint64(96); pct <= 120; pct += 3 {
				b := pool.AlignUp(sz[i].LargePeakLiveBytes*pct/100, 2<<20)
				probes = append(probes, ArenaProbe{Threshold: th, Bytes: b, Fit: f})
			}
		}
	}
	want, err := FitArena(synth.New(events), requests.Device, probes, nil)
	if err != nil {
		t.Fatal(err)
	}
	large, err := ExtractLarge(synth.New(events), requests.Device, thresholds[0], 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for i, p := range probes {
		got := large.Serves(p)
		if got != (want[i].Failures == 0) {
			t.Errorf("%+v: Serves = %v, FitArena's failures %d", p, got, want[i].Failures)
		}
		if got {
			served++
		}
	}
	if served == 0 || served == len(probes) {
		t.Errorf("%d of %d probes served: want both answers", served, len(probes))
	}
}

// TestExtractLargeBudget: ops beyond the budget are not kept.
func TestExtractLargeBudget(t *testing.T) {
	l, err := ExtractLarge(synth.New(20_000), requests.Device, 4096, 1024, nil)
	if !errors.Is(err, ErrLargeOpsBudget) || l != nil {
		t.Errorf("ExtractLarge within 1 KiB = %v, %v; want ErrLargeOpsBudget", l, err)
	}
}
