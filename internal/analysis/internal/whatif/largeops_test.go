package whatif

import (
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/synth"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// failures replays every request of log above p.Threshold through p's arena to the end and
// returns the requests it failed: what Serves answers without its early stop.
func failures(t *testing.T, log *requests.Log, p ArenaProbe) uint64 {
	t.Helper()
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit: &pool.BestFitConfig{InitialBytes: p.Bytes, MaximumBytes: p.Bytes, Fit: p.Fit}}
	r, f := newReplayer(Policy{Name: "arena", Config: cfg}, 0, nil, nil), &largeFilter{threshold: p.Threshold}
	if err := forEachBatch(log, 1, nil, func(_ int, b opBatch) {
		r.batch(opBatch{ops: f.filter(b.ops), handles: b.handles})
	}, nil); err != nil {
		t.Fatal(err)
	}
	o := r.finish()
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	return o.Stats.Failures
}

// TestServesMatchesAFullReplay: the large ops of the synthetic trace above 4096 B, held in memory
// or spilled to disk whole, serve a probe of any higher threshold, size and strategy exactly when
// the probe's arena fails nothing over the whole trace; the sizes around the grown arena's peak
// give both answers.
func TestServesMatchesAFullReplay(t *testing.T) {
	const events = 40_000
	log := decoded(t, synth.New(events))
	thresholds := []uint64{4096, 65536, 1 << 20}
	var cands []Candidate
	for _, th := range thresholds {
		cands = append(cands, Candidate{Threshold: th})
	}
	sz, err := Size(log, cands, nil)
	if err != nil {
		t.Fatal(err)
	}
	inMemory, err := ExtractLarge(log, thresholds[0], nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inMemory.Close()
	spilled, err := ExtractLarge(log, thresholds[0], requests.NewBudget(0), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer spilled.Close()
	if inMemory.Len() != spilled.Len() || inMemory.Len() < events/2 || spilled.log.SpilledBytes() == 0 {
		t.Fatalf("%d ops in memory, %d spilled (%d bytes)", inMemory.Len(), spilled.Len(), spilled.log.SpilledBytes())
	}
	served := 0
	for i, th := range thresholds {
		for _, f := range pool.Fits {
			for pct := uint64(96); pct <= 120; pct += 3 {
				p := ArenaProbe{Threshold: th, Bytes: pool.AlignUp(sz[i].LargePeakLiveBytes*pct/100, 2<<20), Fit: f}
				want := failures(t, log, p) == 0
				for _, large := range []*LargeOps{inMemory, spilled} {
					if got, err := large.Serves(p, nil); got != want || err != nil {
						t.Errorf("%+v: Serves = %v, %v; a full replay serves: %v", p, got, err, want)
					}
				}
				if want {
					served++
					if got, err := inMemory.Serves(p, func() bool { return true }); got || err != nil {
						t.Errorf("%+v: stopped at once, Serves = %v, %v; want false", p, got, err)
					}
				}
			}
		}
	}
	if served == 0 || served == 3*len(pool.Fits)*9 {
		t.Errorf("%d probes served: want both answers", served)
	}
}
