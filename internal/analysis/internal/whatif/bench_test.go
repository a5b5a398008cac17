package whatif

import (
	"errors"
	"io"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/benchutil"
	"github.com/allocscope/allocscope/internal/analysis/internal/synth"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
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

// BenchmarkPolicy measures each policy's simulation of a synthetic trace as analyze runs it, alone:
// the trace is decoded into its request log once, outside the timing, and each iteration replays
// the log through the policy. Mevents/s counts the trace's events.
func BenchmarkPolicy(b *testing.B) {
	log := decoded(b, synth.New(benchEvents))
	for _, p := range benchPolicies() {
		b.Run(p.Name, func(b *testing.B) {
			cpu := benchutil.CPU()
			for b.Loop() {
				outs, err := Run(log, []Policy{p}, 0, nil, nil)
				if err != nil || outs[0].Err != nil {
					b.Fatal(err, outs[0].Err)
				}
			}
			benchutil.Report(b, benchEvents, benchutil.CPU()-cpu)
		})
	}
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
				r := newReplayer(p, 0, nil, nil)
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
