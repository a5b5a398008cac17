package replay

import (
	"math/rand/v2"
	"testing"

	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// randomTrace returns n random requests on three streams: mostly small blocks, some up to 256 KiB, a
// few up to 2 MiB; a mix of synchronous and stream-ordered calls; a few frees of unknown addresses.
func randomTrace(rng *rand.Rand, n int) *traceBuilder {
	b := &traceBuilder{}
	var live []uint64
	next := uint64(1 << 40)
	for range n {
		stream := uint64(rng.IntN(3)) * 0x100
		async := rng.IntN(2) == 0
		switch r := rng.IntN(100); {
		case r < 2:
			b.add(trace.Event{Op: trace.OpFree, Address: 0x42, PID: 1, Function: "cudaFree"})
		case r < 55 || len(live) == 0:
			size := 1 + rng.Uint64N(8192)
			if r%20 == 0 {
				size = 1 + rng.Uint64N(256<<10)
			} else if r%31 == 0 {
				size = 1 + rng.Uint64N(2<<20)
			}
			fn := "cudaMalloc"
			if async {
				fn = "cudaMallocAsync"
			}
			b.add(trace.Event{Op: trace.OpAlloc, Address: next, Size: size, Stream: stream, PID: 1, Function: fn})
			live = append(live, next)
			next += size + 512
		default:
			i := rng.IntN(len(live))
			fn := "cudaFree"
			if async {
				fn = "cudaFreeAsync"
			}
			b.add(trace.Event{Op: trace.OpFree, Address: live[i], Stream: stream, PID: 1, Function: fn})
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	return b
}

// propertyConfigs are pool.json files of every policy the host backend can serve.
func propertyConfigs() map[string]pool.Config {
	sc := func(perStream bool) pool.Config {
		return pool.Config{Version: 1, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
			Classes:        []pool.Class{{Size: 512, Slots: 16}, {Size: 1024, Slots: 8}, {Size: 4096, Slots: 8}, {Size: 8192, Slots: 4}},
			LargeThreshold: 8192, ArenaBytes: 4 << 20, PerStream: perStream}}
	}
	return map[string]pool.Config{
		"sizeclass":            sc(false),
		"sizeclass-per-stream": sc(true),
		"bestfit":              {Version: 1, Policy: pool.PolicyBestFit, BestFit: &pool.BestFitConfig{InitialBytes: 2 << 20, GrowBytes: 2 << 20}},
		"pytorch":              {Version: 1, Policy: pool.PolicyPyTorch},
		"pytorch-expandable":   expandableConfig(0),
		"stream-ordered":       {Version: 1, Policy: pool.PolicyStreamOrdered},
	}
}

// TestPropertyRandomTracesOnHost replays random traces on the host backend in every mode with
// --verify and --touch: no block overlaps another or lies outside reserved memory, every block keeps
// its pattern, the allocator's stats match the engine's count exactly, and nothing leaks.
func TestPropertyRandomTracesOnHost(t *testing.T) {
	for name, cfg := range propertyConfigs() {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 7))
			tr := randomTrace(rng, 300).extract(t)
			h := host.New(1 << 32)
			rep, err := Run(tr, h, cfg, Options{Verify: true, Touch: true, MaxOverhead: 1e9})
			if err != nil {
				t.Fatalf("%s seed %d: %v", name, seed, err)
			}
			if !rep.Passed {
				t.Errorf("%s seed %d: failed %+v\nerrors %v", name, seed, rep.Failed(), rep.Modes[1].Errors)
			}
			for _, m := range rep.Modes {
				if m.Allocs != tr.Stats.Allocs || m.Frees+m.FinalFrees != tr.Stats.Allocs ||
					m.PeakLiveBytes != tr.Stats.PeakLiveBytes || m.VerifyChecks != m.Allocs || m.Touched != m.Allocs {
					t.Errorf("%s seed %d %s: allocs %d, frees %d+%d, peak live %d, verified %d, touched %d; trace allocs %d, peak live %d",
						name, seed, m.Mode, m.Allocs, m.Frees, m.FinalFrees, m.PeakLiveBytes, m.VerifyChecks, m.Touched,
						tr.Stats.Allocs, tr.Stats.PeakLiveBytes)
				}
			}
			if p := rep.Mode(ModePool); cfg.Policy == pool.PolicyStreamOrdered && p.Syncs == 0 {
				t.Errorf("%s seed %d: no Sync calls", name, seed)
			}
			if mapped(h) != 0 || rep.Memory.LeakedBytes != 0 {
				t.Errorf("%s seed %d: %d bytes still mapped, %d bytes leaked", name, seed, mapped(h), rep.Memory.LeakedBytes)
			}
			h.Close()
		}
	}
}
