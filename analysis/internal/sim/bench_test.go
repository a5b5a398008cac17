package sim

import (
	"github.com/allocscope/allocscope/analysis/internal/benchutil"
	"testing"

	"github.com/allocscope/allocscope/analysis/internal/synth"
	"github.com/allocscope/allocscope/pool"
)

// BenchmarkPolicy measures each policy's simulation alone, in events per second.
func BenchmarkPolicy(b *testing.B) {
	const n = 1 << 20
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
	for _, p := range []Policy{{Name: "sizeclass", Config: sizeclass}, {Name: "bestfit", Config: bestfit},
		{Name: "pytorch", Config: torch}, {Name: "pytorch-expandable", Config: expandable},
		{Name: "stream-ordered", Config: cfg(pool.PolicyStreamOrdered)}, {Name: "raw", Config: cfg(pool.PolicyRaw)}} {
		b.Run(p.Name, func(b *testing.B) {
			cpu := benchutil.CPU()
			for b.Loop() {
				outs, err := Run(synth.New(n), Stream{}, []Policy{p}, 0, nil, nil)
				if err != nil || outs[0].Err != nil {
					b.Fatal(err, outs[0].Err)
				}
			}
			benchutil.Report(b, n, benchutil.CPU()-cpu)
		})
	}
}
