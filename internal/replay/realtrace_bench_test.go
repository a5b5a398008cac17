package replay

import (
	"github.com/allocscope/allocscope/internal/requests"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// realTraces are traces recorded on the H200 with the pool.json analyze wrote for each
// (`analyze TRACE --emit-config X.pool.json`, kept as fixtures next to the traces).
var realTraces = []struct{ name, trace, config string }{
	{"pytorch-train", "../../internal/cli/analyze/bundled/pytorch-train.arrow", "../../testdata/h200/pytorch-train.pool.json"},
	{"a_static", "../../testdata/h200/a_static.arrow", "../../testdata/h200/a_static.pool.json"},
	{"g_torch_nocache_cnn", "../../testdata/h200/g_torch_nocache_cnn.arrow", "../../testdata/h200/g_torch_nocache_cnn.pool.json"},
	{"h_torch_nocache_kvcache", "../../testdata/h200/h_torch_nocache_kvcache.arrow", "../../testdata/h200/h_torch_nocache_kvcache.pool.json"},
	{"e_cupy", "../../testdata/h200/e_cupy.arrow", "../../testdata/h200/e_cupy.pool.json"},
}

func loadRealTrace(b testing.TB, tracePath, configPath string) (*Trace, pool.Config) {
	b.Helper()
	r, err := trace.Open(tracePath)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := Extract(r)
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pool.LoadConfig(configPath)
	if err != nil {
		b.Fatal(err)
	}
	return tr, cfg
}

// threadCPUTime returns the CPU time the calling OS thread has used, to the nanosecond
// (CLOCK_THREAD_CPUTIME_ID; getrusage's figure moves only at scheduler ticks).
func threadCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// BenchmarkRealTracePool replays each real trace through pool.New(its pool.json) over a
// poolsim.Upstream, a fresh allocator per pass as replay builds one per repetition (New and Close
// untimed). ns/op is per request (alloc or free) of wall time with no clock reading inside the
// loop, cpu-ns/op the same in thread CPU time (the figure to trust on a busy machine).
// alloc-ns/op and free-ns/op split the time by kind, from separate passes that read the clock
// only where the trace switches between a run of allocations and a run of frees: each run's
// duration is the median over up to 21 passes (robust to preemption) less one clock reading.
func BenchmarkRealTracePool(b *testing.B) {
	for _, rt := range realTraces {
		b.Run(rt.name, func(b *testing.B) {
			tr, cfg := loadRealTrace(b, rt.trace, rt.config)
			addrs := make([]uint64, tr.Slots)
			runs := opRuns(tr)
			var durs [][]int64
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			var wall, cpu time.Duration
			for b.Loop() {
				a := newBenchPool(b, cfg)
				start, startCPU := time.Now(), threadCPUTime()
				replayPoolOps(b, a, tr, addrs)
				wall += time.Since(start)
				cpu += threadCPUTime() - startCPU
				closeBenchPool(b, a, addrs)
				if len(durs) < 21 {
					a = newBenchPool(b, cfg)
					durs = append(durs, replayPoolOpsSplit(b, a, tr, addrs, len(runs)))
					closeBenchPool(b, a, addrs)
				}
			}
			ops := float64(b.N) * float64(len(tr.Ops))
			b.ReportMetric(float64(wall.Nanoseconds())/ops, "ns/op")
			b.ReportMetric(float64(cpu.Nanoseconds())/ops, "cpu-ns/op")
			reportSplit(b, runs, durs)
		})
	}
}

// opRun is a run of consecutive requests of one kind.
type opRun struct {
	alloc bool
	ops   int
}

func opRuns(tr *Trace) []opRun {
	var runs []opRun
	for _, o := range tr.Ops {
		if n := len(runs); n > 0 && runs[n-1].alloc == o.IsAlloc() {
			runs[n-1].ops++
		} else {
			runs = append(runs, opRun{alloc: o.IsAlloc(), ops: 1})
		}
	}
	return runs
}

// reportSplit reports alloc-ns/op and free-ns/op from the runs' median durations.
func reportSplit(b *testing.B, runs []opRun, durs [][]int64) {
	clockNs := clockOverhead(func() int64 { return time.Now().UnixNano() })
	var ns, ops [2]float64
	col := make([]int64, len(durs))
	for i, r := range runs {
		for k := range durs {
			col[k] = durs[k][i]
		}
		slices.Sort(col)
		k := 1
		if r.alloc {
			k = 0
		}
		ns[k] += float64(col[len(col)/2] - clockNs)
		ops[k] += float64(r.ops)
	}
	b.ReportMetric(ns[0]/ops[0], "alloc-ns/op")
	b.ReportMetric(ns[1]/ops[1], "free-ns/op")
	b.ReportMetric(float64(len(runs))/(ops[0]+ops[1]), "runs/op")
}

func newBenchPool(b *testing.B, cfg pool.Config) pool.Allocator {
	a, err := pool.New(cfg, poolsim.NewUpstream(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// closeBenchPool frees what the trace left live and closes a.
func closeBenchPool(b *testing.B, a pool.Allocator, addrs []uint64) {
	for i, addr := range addrs {
		if addr != 0 {
			if err := a.Free(addr, 0); err != nil {
				b.Fatal(err)
			}
			addrs[i] = 0
		}
	}
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}
}

func replayPoolOps(b *testing.B, a pool.Allocator, tr *Trace, addrs []uint64) {
	for _, o := range tr.Ops {
		replayPoolOp(b, a, tr, addrs, o)
	}
}

func replayPoolOp(b *testing.B, a pool.Allocator, tr *Trace, addrs []uint64, o requests.Op) {
	stream := tr.Streams[o.StreamIndex()]
	if o.IsAlloc() {
		addr, err := a.Alloc(o.Size, stream)
		if err != nil {
			b.Fatal(err)
		}
		addrs[o.Slot] = addr
	} else if err := a.Free(addrs[o.Slot], stream); err != nil {
		b.Fatal(err)
	} else {
		addrs[o.Slot] = 0
	}
}

// replayPoolOpsSplit replays tr reading the clock at each switch between a run of allocations and
// a run of frees, and returns each run's duration.
func replayPoolOpsSplit(b *testing.B, a pool.Allocator, tr *Trace, addrs []uint64, runs int) []int64 {
	durs := make([]int64, 0, runs)
	t0 := time.Now().UnixNano()
	for i, o := range tr.Ops {
		if i > 0 && o.IsAlloc() != tr.Ops[i-1].IsAlloc() {
			t := time.Now().UnixNano()
			durs = append(durs, t-t0)
			t0 = t
		}
		replayPoolOp(b, a, tr, addrs, o)
	}
	return append(durs, time.Now().UnixNano()-t0)
}

// BenchmarkRealTraceReplay runs replay.Run in pool mode on the host backend, once per iteration,
// for each real trace; it reports the engine's own figures: allocator-ns/op (the report's
// allocator time per repetition over the requests) and the alloc and free mean latencies (each
// includes one clock reading, clock-ns).
func BenchmarkRealTraceReplay(b *testing.B) {
	for _, rt := range realTraces {
		b.Run(rt.name, func(b *testing.B) {
			tr, cfg := loadRealTrace(b, rt.trace, rt.config)
			hb := host.New(0)
			defer hb.Close()
			var alloc, free float64
			var allocator, clock int64
			for b.Loop() {
				rep, err := Run(tr, hb, cfg, Options{Modes: []Mode{ModePool}})
				if err != nil {
					b.Fatal(err)
				}
				m := rep.Mode(ModePool)
				if m.Failures != 0 || m.FreeErrors != 0 {
					b.Fatalf("failures %d, free errors %d: %v", m.Failures, m.FreeErrors, m.Errors)
				}
				allocator += m.AllocatorTimeNs
				alloc += m.Alloc.MeanNs
				free += m.Free.MeanNs
				clock += rep.ClockOverheadNs
			}
			n := float64(b.N)
			b.ReportMetric(float64(allocator)/n/float64(len(tr.Ops)), "allocator-ns/op")
			b.ReportMetric(alloc/n, "alloc-mean-ns")
			b.ReportMetric(free/n, "free-mean-ns")
			b.ReportMetric(float64(clock)/n, "clock-ns")
		})
	}
}
