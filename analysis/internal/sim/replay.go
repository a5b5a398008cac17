package sim

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/allocscope/allocscope/analysis/internal/stats"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// Source yields a trace's events in batches, io.EOF at the end.
type Source interface {
	Next() ([]trace.Event, error)
}

// Stream says which events of a trace are the requests a pool would serve.
type Stream struct {
	Framework bool // requests are the framework-layer events; otherwise the native ones
}

// request classifies e: +1 an allocation to serve, -1 a free, 0 neither.
func (s Stream) request(e *trace.Event) int {
	if (e.Layer == trace.LayerFramework) != s.Framework || !e.OK() || e.Address == 0 {
		return 0
	}
	switch e.Request() {
	case trace.RequestAlloc:
		if e.Size == 0 || e.Size > stats.MaxSize {
			return 0
		}
		return 1
	case trace.RequestFree:
		return -1
	}
	return 0
}

// syncCalls remembers which functions synchronize with the device: cudaMalloc/cudaFree-like
// calls that are not stream-ordered (no "Async" in the name).
type syncCalls struct {
	names [2]string // the last two function names seen (allocs and frees alternate)
	oks   [2]bool
	next  int
}

// synchronizes reports whether e is a native allocation or free that synchronizes with the device.
func (c *syncCalls) synchronizes(e *trace.Event) bool {
	if e.Layer == trace.LayerFramework || (e.Op != trace.OpAlloc && e.Op != trace.OpFree) ||
		e.Memory != trace.MemoryDevice {
		return false
	}
	for i := range c.names {
		if c.names[i] == e.Function && c.names[i] != "" {
			return c.oks[i]
		}
	}
	ok := !strings.Contains(e.Function, "Async")
	c.names[c.next], c.oks[c.next] = strings.Clone(e.Function), ok
	c.next ^= 1
	return ok
}

// Policy is one allocator configuration to simulate.
type Policy struct {
	Name     string
	Settings string
	Config   pool.Config
}

// Outcome is what one policy did on the trace.
type Outcome struct {
	Policy        Policy
	Stats         pool.Stats // at the end, before Close
	Peak          pool.Stats // at peak reserved
	Reserves      uint64     // successful upstream reserves and maps
	ReservedBytes uint64     // bytes of those
	PredictedNs   float64    // estimated time of the upstream calls the policy made
	PageOps       uint64     // pages mapped, unmapped or moved while serving the trace (not at New)
	Err           error      // the policy could not be built
}

type replayer struct {
	stream Stream
	alloc  pool.Allocator
	syncer pool.Syncer
	up     *counting
	setup  uint64                 // page operations at New
	addrs  []uint64               // by slot: the block's simulated address, 0 when it has none
	only   func(size uint64) bool // when set, serve only the allocations it accepts
	out    Outcome
}

func newReplayer(p Policy, s Stream, capacity uint64, est Durations) *replayer {
	r := &replayer{stream: s, up: newCounting(capacity, est)}
	r.out.Policy = p
	a, err := pool.New(p.Config, r.up, pool.SingleGoroutine())
	if err != nil {
		r.out.Err = fmt.Errorf("policy %s: %w", p.Name, err)
		return r
	}
	r.alloc = a
	r.setup = r.up.pageOps
	r.syncer, _ = a.(pool.Syncer)
	return r
}

func (r *replayer) batch(reqs []request) {
	if r.alloc == nil {
		return
	}
	defer r.contain()
	for i := range reqs {
		q := &reqs[i]
		switch q.kind {
		case 1:
			if r.only != nil && !r.only(q.size) {
				continue
			}
			r.addrs = atSlot(r.addrs, q.slot)
			if old := r.addrs[q.slot]; old != 0 { // free never recorded
				_ = r.alloc.Free(old, q.stream)
			}
			r.addrs[q.slot] = 0
			if a, err := r.alloc.Alloc(q.size, q.stream); err == nil {
				r.addrs[q.slot] = a
			}
		case -1:
			if q.slot != noSlot && int(q.slot) < len(r.addrs) {
				if a := r.addrs[q.slot]; a != 0 {
					r.addrs[q.slot] = 0
					_ = r.alloc.Free(a, q.stream)
				}
			}
		}
		if q.sync && r.syncer != nil {
			_ = r.syncer.Sync()
		}
	}
}

// contain turns a panic inside the policy into the outcome's error, so that one broken policy
// cannot end the analysis; the policy is not used again.
func (r *replayer) contain() {
	if p := recover(); p != nil {
		r.out.Err = fmt.Errorf("policy %s: internal error: %v", r.out.Policy.Name, p)
		r.alloc = nil
	}
}

func (r *replayer) finish() Outcome {
	if r.alloc != nil {
		r.out.Stats = r.alloc.Stats()
		r.out.Peak = r.alloc.PeakStats()
		r.out.Reserves, r.out.ReservedBytes = r.up.reserves, r.up.reservedBytes
		r.out.PredictedNs = r.up.predictedNs
		r.out.PageOps = r.up.pageOps - r.setup
		if err := r.alloc.Close(); err != nil && r.out.Err == nil {
			r.out.Err = fmt.Errorf("policy %s: close: %w", r.out.Policy.Name, err)
		}
	}
	return r.out
}

// Run replays the requests of src through every policy (each on its own simulated address space
// holding at most capacity bytes, 0 = unbounded), the policies in parallel, and returns their
// outcomes in the order given. progress, when not nil, is called after each batch.
func Run(src Source, s Stream, policies []Policy, capacity uint64, est Durations,
	progress func(events int)) ([]Outcome, error) {
	rs := make([]*replayer, len(policies))
	for i, p := range policies {
		rs[i] = newReplayer(p, s, capacity, est)
	}
	err := forEachBatch(src, s, len(rs), func(i int, b []request) { rs[i].batch(b) }, progress)
	out := make([]Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.finish()
	}
	return out, err
}

// forEachBatch reads src to the end and hands the requests of every batch (classified for s) to
// workers 0..n-1 at once, each on its own goroutine, waiting for all of them before handing out the
// next batch. While the workers run it reads and classifies the next batch into the other of two
// buffers.
func forEachBatch(src Source, s Stream, n int, work func(i int, b []request), progress func(int)) error {
	chans := make([]chan []request, n)
	var wg, done sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan []request)
		done.Add(1)
		go func() {
			defer done.Done()
			for b := range chans[i] {
				work(i, b)
				wg.Done()
			}
		}()
	}
	defer func() {
		for _, c := range chans {
			close(c)
		}
		done.Wait()
	}()
	cl := &classifier{stream: s}
	var bufs [2][]request
	b, err := src.Next()
	for cur := 0; ; cur ^= 1 {
		if len(b) > 0 {
			bufs[cur] = cl.convert(b, bufs[cur][:0])
			wg.Add(n)
			for _, c := range chans {
				c <- bufs[cur]
			}
		}
		var next []trace.Event
		var nextErr error
		if err == nil {
			next, nextErr = src.Next()
		}
		if len(b) > 0 {
			wg.Wait()
			if progress != nil {
				progress(len(b))
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b, err = next, nextErr
	}
}
