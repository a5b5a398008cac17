package whatif

import (
	"errors"
	"github.com/allocscope/allocscope/internal/requests"
	"io"
	"sync"
	"testing"

	"github.com/allocscope/allocscope/analysis/internal/benchutil"
	"github.com/allocscope/allocscope/analysis/internal/synth"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// benchEvents is the number of events of one benchmark iteration.
const benchEvents = 1 << 20

// benchPolicies returns the policies the benchmarks replay.
func benchPolicies() []Policy {
	cfg := func(p pool.Policy) pool.Config { return pool.Config{Version: pool.ConfigVersion, Policy: p} }
	sizeclass := cfg(pool.PolicySizeClass)
	sizeclass.SizeClass = &pool.SizeClassConfig{LargeThreshold: 1 << 20, ArenaBytes: 4 << 30,
		Classes: []pool.Class{{Size: 512, Slots: 64}, {Size: 1024, Slots: 64}, {Size: 2048, Slots: 64},
			{Size: 4096, Slots: 64}, {Size: 8192, Slots: 64}, {Size: 12288, Slots: 64}, {Size: 65536, Slots: 64},
			{Size: 100352, Slots: 64}, {Size: 262144, Slots: 64}, {Size: 524288, Slots: 64}, {Size: 1 << 20, Slots: 64}}}
	bestfit := cfg(pool.PolicyBestFit)
	bestfit.BestFit = &pool.BestFitConfig{InitialBytes: 4 << 30}
	torch := cfg(pool.PolicyPyTorch)
	torch.PyTorch = &pool.PyTorchConfig{}
	expandable := cfg(pool.PolicyPyTorch)
	expandable.PyTorch = &pool.PyTorchConfig{ExpandableSegments: true}
	return []Policy{{Name: "sizeclass", Config: sizeclass}, {Name: "bestfit", Config: bestfit},
		{Name: "pytorch", Config: torch}, {Name: "pytorch-expandable", Config: expandable},
		{Name: "stream-ordered", Config: cfg(pool.PolicyStreamOrdered)}, {Name: "raw", Config: cfg(pool.PolicyRaw)}}
}

// benchRun replays the source each iteration makes through each policy alone, in events per second.
func benchRun(b *testing.B, source func() requests.Source) {
	for _, p := range benchPolicies() {
		b.Run(p.Name, func(b *testing.B) {
			cpu := benchutil.CPU()
			for b.Loop() {
				outs, err := Run(source(), requests.Device, []Policy{p}, 0, nil, nil)
				if err != nil || outs[0].Err != nil {
					b.Fatal(err, outs[0].Err)
				}
			}
			benchutil.Report(b, benchEvents, benchutil.CPU()-cpu)
		})
	}
}

// BenchmarkPolicy measures each policy's simulation of a synthetic trace generated on the fly, in
// events per second (the generator's time included).
func BenchmarkPolicy(b *testing.B) {
	benchRun(b, func() requests.Source { return synth.New(benchEvents) })
}

// BenchmarkPolicyInMemory is BenchmarkPolicy on the same events generated beforehand and held in
// memory, so that the policy's own cost (plus Run's batch copy) is what is measured.
func BenchmarkPolicyInMemory(b *testing.B) {
	events := memEvents(b)
	benchRun(b, func() requests.Source { return &memSource{events: events} })
}

var (
	memOnce   sync.Once
	memAll    []trace.Event
	memGenErr error
)

// memEvents returns the synthetic trace of BenchmarkPolicy, generated once.
func memEvents(b *testing.B) []trace.Event {
	memOnce.Do(func() {
		src := synth.New(benchEvents)
		for {
			batch, err := src.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					memGenErr = err
				}
				return
			}
			memAll = append(memAll, batch...)
		}
	})
	if memGenErr != nil {
		b.Fatal(memGenErr)
	}
	return memAll
}

// memSource yields events held in memory in batches like synth's.
type memSource struct {
	events []trace.Event
	at     int
}

func (s *memSource) Next() ([]trace.Event, error) {
	if s.at == len(s.events) {
		return nil, io.EOF
	}
	n := min(8192, len(s.events)-s.at)
	s.at += n
	return s.events[s.at-n : s.at], nil
}

// BenchmarkPolicyReplay measures one policy's own work as analyze runs it: the synthetic trace is
// read and classified once, outside the timing (analyze does that once for all policies, on its
// own goroutine), and each iteration replays the requests, in the reader's batches, through a
// fresh replayer of the policy. Mevents/s counts the trace's events.
func BenchmarkPolicyReplay(b *testing.B) {
	batches, handles := classifiedBatches(b)
	for _, p := range benchPolicies() {
		b.Run(p.Name, func(b *testing.B) {
			cpu := benchutil.CPU()
			for b.Loop() {
				r := newReplayer(p, 0, nil)
				for _, batch := range batches {
					r.batch(opBatch{ops: batch, handles: handles})
				}
				if out := r.finish(); out.Err != nil || out.Stats.Allocs == 0 {
					b.Fatal(out.Err, out.Stats)
				}
			}
			benchutil.Report(b, benchEvents, benchutil.CPU()-cpu)
		})
	}
}

// classifiedBatches returns the ops of BenchmarkPolicy's synthetic trace, batch by batch, and the
// stream handles.
func classifiedBatches(b *testing.B) ([][]requests.Op, []uint64) {
	src, x := synth.New(benchEvents), requests.NewExtractor(requests.Device)
	var batches [][]requests.Op
	for {
		batch, err := src.Next()
		if errors.Is(err, io.EOF) {
			return batches, x.Handles()
		}
		if err != nil {
			b.Fatal(err)
		}
		batches = append(batches, x.Append(batch, nil))
	}
}
