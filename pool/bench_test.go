package pool

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// benchConfigs are the configs the benchmarks compare, one per policy.
func benchConfigs() []struct {
	name string
	cfg  Config
} {
	classes := []Class{{512, 4096}, {1024, 2048}, {4096, 1024}, {16384, 512}, {65536, 256}, {262144, 64}, {1 << 20, 32}}
	return []struct {
		name string
		cfg  Config
	}{
		{"sizeclass", Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
			Classes: classes, LargeThreshold: 1 << 20, ArenaBytes: 1 << 30}}},
		{"bestfit", Config{Version: 1, Policy: PolicyBestFit, BestFit: &BestFitConfig{InitialBytes: 1 << 30}}},
		{"pytorch", Config{Version: 1, Policy: PolicyPyTorch}},
		{"stream-ordered", Config{Version: 1, Policy: PolicyStreamOrdered}},
		{"raw", Config{Version: 1, Policy: PolicyRaw}},
	}
}

// BenchmarkSizeClassHit measures one Alloc+Free pair served by a size class (ns/op).
func BenchmarkSizeClassHit(b *testing.B) {
	a, err := New(benchConfigs()[0].cfg, poolsim.NewUpstream(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	sizes := [4]uint64{1000, 3000, 40000, 700}
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		addr, err := a.Alloc(sizes[i&3], 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(addr, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocFreePair measures one Alloc+Free pair per policy with 64 other blocks live,
// for a small (4 KiB) and a large (6 MiB) request.
func BenchmarkAllocFreePair(b *testing.B) {
	for _, bc := range benchConfigs() {
		for _, size := range []uint64{4096, 6 << 20} {
			b.Run(bc.name+"/"+sizeName(size), func(b *testing.B) {
				a, err := New(bc.cfg, poolsim.NewUpstream(0, 0))
				if err != nil {
					b.Fatal(err)
				}
				for i := range 64 { // some live neighbours, so the pair is not alone in its pool
					if _, err := a.Alloc(uint64(512*(i+1)), 0); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					addr, err := a.Alloc(size, 0)
					if err != nil {
						b.Fatal(err)
					}
					if err := a.Free(addr, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// reportCPU locks the benchmark to its thread and returns a function that reports cpu-ns/op,
// the thread's CPU time per operation (what the code costs on a busy machine, apart from waiting
// for a core). Use it as defer reportCPU(b)().
func reportCPU(b *testing.B) func() {
	runtime.LockOSThread()
	start := threadCPUTime()
	return func() {
		if used := threadCPUTime() - start; used > 0 && b.N > 0 {
			b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
		runtime.UnlockOSThread()
	}
}

func sizeName(n uint64) string {
	if n >= 1<<20 {
		return string(rune('0'+n>>20)) + "MiB"
	}
	return string(rune('0'+n>>10)) + "KiB"
}

// traceEvent is one event of a synthetic trace: an allocation (size > 0) of block id, or its free.
type traceEvent struct {
	id   int32
	size uint64 // 0 for a free
}

// syntheticTrace builds a training-like trace: steps that allocate activations of recurring
// sizes (a few KiB to tens of MiB), free most of them in reverse order, keep a few for the next
// step, on two streams.
func syntheticTrace(events int) []traceEvent {
	rng := rand.New(rand.NewPCG(7, 7))
	sizes := make([]uint64, 48)
	for i := range sizes {
		sizes[i] = 1 + rng.Uint64N(1<<(10+rng.IntN(16)))
	}
	var out []traceEvent
	var live []int32
	next := int32(0)
	for len(out) < events {
		n := 20 + rng.IntN(40)
		for range n {
			out = append(out, traceEvent{id: next, size: sizes[rng.IntN(len(sizes))]})
			live = append(live, next)
			next++
		}
		keep := rng.IntN(4)
		for len(live) > keep {
			k := len(live) - 1
			if rng.IntN(8) == 0 {
				k = rng.IntN(len(live))
			}
			out = append(out, traceEvent{id: live[k]})
			live = append(live[:k], live[k+1:]...)
		}
	}
	for _, id := range live {
		out = append(out, traceEvent{id: id})
	}
	return out
}

// BenchmarkTraceThroughput replays a synthetic 1M-event trace per policy on a poolsim.Upstream, as
// analyze's what-if simulation does, and reports events/s of wall time and cpu-events/s of the
// replaying thread's CPU time (the figure that holds on a busy machine).
func BenchmarkTraceThroughput(b *testing.B) {
	trace := syntheticTrace(1_000_000)
	maxID := int32(0)
	for _, e := range trace {
		maxID = max(maxID, e.id)
	}
	addrs := make([]uint64, maxID+1)
	for _, bc := range benchConfigs() {
		b.Run(bc.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var wall, cpu time.Duration
			for b.Loop() {
				start, startCPU := time.Now(), threadCPUTime()
				replayTrace(b, bc.cfg, trace, addrs)
				wall += time.Since(start)
				cpu += threadCPUTime() - startCPU
			}
			events := float64(len(trace)) * float64(b.N)
			b.ReportMetric(events/wall.Seconds(), "events/s")
			if cpu > 0 {
				b.ReportMetric(events/cpu.Seconds(), "cpu-events/s")
			}
		})
	}
}

func replayTrace(b testing.TB, cfg Config, trace []traceEvent, addrs []uint64) {
	up := poolsim.NewUpstream(0, 2<<20)
	a, err := New(cfg, up)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range trace {
		stream := uint64(e.id & 1)
		if e.size > 0 {
			addrs[e.id], err = a.Alloc(e.size, stream)
		} else {
			err = a.Free(addrs[e.id], stream)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}
}
