package whatif

import (
	"github.com/allocscope/allocscope/internal/requests"
	"io"
	"testing"

	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

type source struct {
	events []trace.Event
	done   bool
}

func (s *source) Next() ([]trace.Event, error) {
	if s.done {
		return nil, io.EOF
	}
	s.done = true
	return s.events, nil
}

func ev(op trace.Op, addr, size uint64) trace.Event {
	return trace.Event{Op: op, Address: addr, Size: size, PID: 1, Function: "cudaMalloc"}
}

// small: 1000 B, 3 MiB, free the 1000 B block, 600 B, free 3 MiB, 5000 B.
func small() []trace.Event {
	return []trace.Event{ev(trace.OpAlloc, 0x1000, 1000), ev(trace.OpAlloc, 0x2000, 3<<20),
		ev(trace.OpFree, 0x1000, 0), ev(trace.OpAlloc, 0x3000, 600), ev(trace.OpFree, 0x2000, 0),
		ev(trace.OpAlloc, 0x4000, 5000)}
}

type fixedDurations struct{}

func (fixedDurations) Alloc(size uint64) float64 { return 1000 }
func (fixedDurations) Free(size uint64) float64  { return 500 }

func TestRunRaw(t *testing.T) {
	raw := Policy{Name: "raw", Config: pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyRaw}}
	outs, err := Run(decoded(t, &source{events: small()}), []Policy{raw}, 0, fixedDurations{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := outs[0]
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	// Blocks are aligned to 512 B: 1024 + 3 MiB live together at most.
	if o.Stats.PeakReservedBytes != 1024+3<<20 || o.Stats.PeakLiveBytes != 1000+3<<20 ||
		o.Stats.UpstreamReserves != 4 || o.Stats.UpstreamReleases != 2 || o.Reserves != 4 {
		t.Errorf("raw stats = %+v reserves %d", o.Stats, o.Reserves)
	}
	if o.PredictedNs != 4*1000+2*500 {
		t.Errorf("predicted %v ns, want 5000", o.PredictedNs)
	}
}

func TestRunCapacityFailures(t *testing.T) {
	raw := Policy{Name: "raw", Config: pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyRaw}}
	outs, err := Run(decoded(t, &source{events: small()}), []Policy{raw}, 2<<20, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The 3 MiB request does not fit in 2 MiB; its free is then ignored. At most 600 B and
	// 5000 B are live together.
	if s := outs[0].Stats; s.Failures != 1 || s.Allocs != 3 || s.PeakReservedBytes != 1024+5120 {
		t.Errorf("stats under capacity = %+v", s)
	}
}

func TestSizeSlotsAndArena(t *testing.T) {
	events := append(small(), ev(trace.OpAlloc, 0x5000, 900), ev(trace.OpAlloc, 0x6000, 100))
	cands := []Candidate{{Threshold: 4096, Classes: []uint64{1024}, LargePeakLiveBytes: 3 << 20},
		{Threshold: 1 << 20, Classes: []uint64{1024, 5120}, LargePeakLiveBytes: 3 << 20}}
	sz, err := Size(decoded(t, &source{events: events}), cands, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Class 1 KiB: 1000 B, then 600 B, then 600 + 900 + 100 live at once: 3 slots.
	if got := sz[0].Slots; len(got) != 1 || got[0] != 3 {
		t.Errorf("slots = %v, want [3]", got)
	}
	// Above 4 KiB: 3 MiB, then 5000 B alone: the arena's first region (3 MiB) serves both.
	if sz[0].LargePeakLiveBytes != 3<<20 || sz[0].ArenaPeakReservedBytes != 3<<20 {
		t.Errorf("arena: large peak %d reserved %d", sz[0].LargePeakLiveBytes, sz[0].ArenaPeakReservedBytes)
	}
	if got := sz[1].Slots; len(got) != 2 || got[0] != 3 || got[1] != 1 || sz[1].ClassBytes() != 3*1024+5120 {
		t.Errorf("second candidate slots = %v", got)
	}
}

// TestArenaServes: 4 MiB A and B, free A, then 6 MiB C. With FitBest C does not fit the 4 MiB hole
// A left, so a single region needs 4 + 4 + 6 = 14 MiB although at most 10 MiB are live; with
// FitBestAged B goes to the region's top, A's hole merges with the gap and 10 MiB serve.
func TestArenaServes(t *testing.T) {
	events := []trace.Event{ev(trace.OpAlloc, 0x1000, 4<<20), ev(trace.OpAlloc, 0x2000, 4<<20),
		ev(trace.OpFree, 0x1000, 0), ev(trace.OpAlloc, 0x3000, 6<<20), ev(trace.OpAlloc, 0x4000, 1000)}
	log := decoded(t, &source{events: events})
	large, err := ExtractLarge(log, 4096, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer large.Close()
	want := []bool{false, false, false, true, true, false, true, true, true, true}
	i := 0
	for _, f := range []pool.Fit{pool.FitBest, pool.FitBestAged} {
		for _, mb := range []uint64{8, 10, 12, 14, 16} {
			p := ArenaProbe{Threshold: 4096, Bytes: mb << 20, Fit: f}
			if got, err := large.Serves(p, nil); got != want[i] || err != nil {
				t.Errorf("%s arena of %d MiB serves: %v, %v; want %v", f, mb, got, err, want[i])
			}
			i++
		}
	}
	sz, err := Size(log, []Candidate{{Threshold: 4096, Classes: []uint64{1024},
		LargePeakLiveBytes: 10 << 20}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Growing on demand: the first region (10 MiB) plus a 6 MiB region for C.
	if sz[0].LargePeakLiveBytes != 10<<20 || sz[0].ArenaPeakReservedBytes != 16<<20 {
		t.Errorf("grown arena: large peak %d, reserved %d", sz[0].LargePeakLiveBytes, sz[0].ArenaPeakReservedBytes)
	}
}

type panicky struct{}

func (panicky) Alloc(size, stream uint64) (uint64, error) { panic("boom") }
func (panicky) Free(addr, stream uint64) error            { return nil }
func (panicky) Stats() pool.Stats                         { return pool.Stats{} }
func (panicky) PeakStats() pool.Stats                     { return pool.Stats{} }
func (panicky) Close() error                              { return nil }

// TestPolicyPanicBecomesError: a policy that panics yields an error outcome, not a crash.
func TestPolicyPanicBecomesError(t *testing.T) {
	r := &replayer{alloc: panicky{}, feed: requests.NewFeeder(panicky{}), up: newUpstream(0, nil, pool.PolicyRaw)}
	r.out.Policy.Name = "broken"
	x := requests.NewExtractor(requests.Device)
	r.batch(opBatch{ops: x.Append(small(), nil), handles: x.Handles()})
	r.batch(opBatch{ops: x.Append(small(), nil), handles: x.Handles()})
	o := r.finish()
	if o.Err == nil || o.Err.Error() != "policy broken: internal error: boom" {
		t.Fatalf("outcome error = %v", o.Err)
	}
}
