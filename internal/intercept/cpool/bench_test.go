package cpool_test

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// threadFaults returns the page faults the calling OS thread has taken.
func threadFaults() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return ru.Minflt + ru.Majflt
}

// BenchmarkRun serves each trace of replay's tests with the C pool in one Run on the host backend,
// a fresh pool each time as replay builds one per pass: fresh-ns/request is the loop's time per
// request and fresh-faults the page faults the run took (the pool's own bookkeeping grows by mmap;
// each first touch is a fault). warm-ns/request and warm-faults are the same trace run again on the
// same pool, its blocks of the first run freed first: the pool's time once its memory is touched.
// go-ns/request is package pool's on the same ops (a fresh pool, the same loop in Go).
//
//	go test ./internal/intercept/cpool -run '^$' -bench Run -benchtime 20x
func BenchmarkRun(b *testing.B) {
	needCgo(b)
	h := host.New(1 << 44)
	defer h.Close()
	for _, name := range traces {
		tr, cfg := loadTrace(b, name)
		ops, err := cpool.NewOps(tr.Ops, tr.Streams)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var fresh, warm, goNs [2]float64 // ns, faults
			for b.Loop() {
				p, err := cpool.New(cfg, h)
				if err != nil {
					b.Fatal(err)
				}
				for _, into := range []*[2]float64{&fresh, &warm} {
					f0 := threadFaults()
					res, err := p.Run(ops, false)
					if err != nil {
						b.Fatal(err)
					}
					into[0] += float64(res.ElapsedNs) / float64(ops.Len())
					into[1] += float64(threadFaults() - f0)
					freeLive(b, p, res, tr.Ops)
				}
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
				goNs[0] += goLoop(b, cfg, h, tr)
			}
			n := float64(b.N)
			b.ReportMetric(fresh[0]/n, "fresh-ns/request")
			b.ReportMetric(fresh[1]/n, "fresh-faults")
			b.ReportMetric(warm[0]/n, "warm-ns/request")
			b.ReportMetric(warm[1]/n, "warm-faults")
			b.ReportMetric(goNs[0]/n, "go-ns/request")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// freeLive frees the blocks a run left live.
func freeLive(b *testing.B, p *cpool.Pool, res *cpool.Result, ops []requests.Op) {
	live := map[uint32]uint64{}
	for i, o := range ops {
		switch {
		case o.IsAlloc() && res.Addrs[i] != 0:
			live[o.Slot] = res.Addrs[i]
		case o.IsFree():
			delete(live, o.Slot)
		}
	}
	for _, addr := range live {
		if err := p.Free(addr, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// goLoop serves tr with a fresh package pool and returns its time per request.
func goLoop(b *testing.B, cfg pool.Config, up pool.Upstream, tr *requests.Trace) float64 {
	a, err := pool.New(cfg, up)
	if err != nil {
		b.Fatal(err)
	}
	addrs := make([]uint64, tr.Slots)
	start := time.Now()
	for _, o := range tr.Ops {
		switch {
		case o.IsAlloc():
			addrs[o.Slot], _ = a.Alloc(o.Size, tr.Streams[o.StreamIndex()])
		case o.IsFree() && addrs[o.Slot] != 0:
			_ = a.Free(addrs[o.Slot], tr.Streams[o.StreamIndex()])
			addrs[o.Slot] = 0
		}
	}
	ns := float64(time.Since(start).Nanoseconds()) / float64(len(tr.Ops))
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}
	return ns
}
