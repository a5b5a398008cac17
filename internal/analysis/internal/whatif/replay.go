package whatif

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// Policy is one allocator configuration to simulate.
type Policy struct {
	Name     string
	Settings string
	Config   pool.Config
	// Deferred simulates the pool as `record --pool` runs it inside the program: synchronous frees
	// wait for a synchronization the pool makes before it would grow (pool.Deferrer).
	Deferred bool
	// Unbounded runs the policy on unbounded memory, whatever the capacity of the others.
	Unbounded bool
	// Map keeps the layout of the policy's memory at its peak of reserved bytes (Outcome.Map),
	// when its allocator is a pool.Layouter; ignored with Deferred.
	Map bool
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
	Map           *PeakMap   // with Policy.Map: the layout at the moment of Peak
	Err           error      // the policy could not be built
}

// synchronizing is a simulated upstream whose device synchronizes at once (pool.Synchronizer).
type synchronizing struct{ pool.Upstream }

func (synchronizing) Synchronize() error { return nil }

type replayer struct {
	alloc  pool.Allocator
	feed   *requests.Feeder
	up     *upstream
	setup  uint64      // page operations at New
	mapper *peakMapper // with Policy.Map
	out    Outcome
}

func newReplayer(p Policy, capacity uint64, est Durations, log *requests.Log) *replayer {
	if p.Unbounded {
		capacity = 0
	}
	r := &replayer{up: newUpstream(capacity, est, p.Config.Policy)}
	r.out.Policy = p
	up := r.up.up
	if p.Deferred {
		up = synchronizing{up}
	}
	a, err := pool.New(p.Config, up, pool.SingleGoroutine())
	if err != nil {
		r.out.Err = fmt.Errorf("policy %s: %w", p.Name, err)
		return r
	}
	r.alloc, r.feed = a, requests.NewFeeder(a)
	if p.Deferred {
		var ok bool
		if r.feed, ok = requests.NewDeferredFeeder(a); !ok {
			r.out.Err = fmt.Errorf("policy %s: the %s policy cannot defer frees", p.Name, p.Config.Policy)
			r.alloc = nil
		}
	}
	r.setup = r.up.meter.Counts().PageOps
	if p.Map && !p.Deferred && log != nil {
		r.mapper = newPeakMapper(p.Config, capacity, log)
	}
	return r
}

func (r *replayer) batch(b opBatch) {
	if r.alloc == nil {
		return
	}
	defer r.contain()
	r.feed.Feed(b.ops, b.handles)
	if r.mapper != nil {
		r.mapper.follow(r.alloc.PeakStats())
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
		c := r.up.meter.Counts()
		r.out.Reserves, r.out.ReservedBytes = c.Reserves-c.Remaps, c.GainedBytes
		r.out.PredictedNs = r.up.predictedNs
		r.out.PageOps = c.PageOps - r.setup
		if r.mapper != nil {
			var err error
			if r.out.Map, err = r.mapper.finish(); err != nil && r.out.Err == nil {
				r.out.Err = fmt.Errorf("policy %s: %w", r.out.Policy.Name, err)
			}
		}
		if err := r.alloc.Close(); err != nil && r.out.Err == nil {
			r.out.Err = fmt.Errorf("policy %s: close: %w", r.out.Policy.Name, err)
		}
	}
	return r.out
}

// Run replays the requests of log through every policy (each on its own simulated address space
// holding at most capacity bytes, 0 = unbounded), the policies in parallel, and returns their
// outcomes in the order given. progress, when not nil, is called with the ops every policy has
// replayed since its last call.
func Run(log *requests.Log, policies []Policy, capacity uint64, est Durations, progress func(ops int)) ([]Outcome, error) {
	rs := make([]*replayer, len(policies))
	for i, p := range policies {
		rs[i] = newReplayer(p, capacity, est, log)
	}
	err := forEachBatch(log, len(rs), nil, func(i int, b opBatch) { rs[i].batch(b) }, progress)
	out := make([]Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.finish()
	}
	return out, err
}

// opBatch is one batch of a trace's requests as a worker gets it.
type opBatch struct {
	ops     []requests.Op
	sites   []requests.Site // the site of each op, when forEachBatch was asked for them; else nil
	handles []uint64        // stream index → recorded stream handle, the log's whole table
}

// worker serves one batch of ops.
type worker func(i int, b opBatch)

// forEachBatch hands every batch of log's ops, in order, to each of the workers 0..n-1, each on its
// own goroutine with its own reader of the log, so that none waits for another; the batches carry
// their sites for the workers sites names (nil: none). progress, when not nil, is called with the
// ops that every worker has served since its last call. It returns the first error reading the log.
func forEachBatch(log *requests.Log, n int, sites func(i int) bool, work worker, progress func(int)) error {
	served := make([]uint64, n) // ops each worker served, guarded by mu
	var mu sync.Mutex
	var reported uint64
	report := func(i, ops int) {
		mu.Lock()
		defer mu.Unlock()
		served[i] += uint64(ops)
		if least := slices.Min(served); least > reported {
			progress(int(least - reported))
			reported = least
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, withSites := log.Reader(), sites != nil && sites(i)
			for {
				ops, ss, err := r.Next(withSites)
				if err != nil {
					if !errors.Is(err, io.EOF) {
						errs[i] = err
					}
					return
				}
				work(i, opBatch{ops: ops, sites: ss, handles: log.Handles()})
				if progress != nil {
					report(i, len(ops))
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
