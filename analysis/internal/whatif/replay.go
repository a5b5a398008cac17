package whatif

import (
	"errors"
	"fmt"
	"io"
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

func newReplayer(p Policy, capacity uint64, est Durations) *replayer {
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
	if p.Map && !p.Deferred {
		r.mapper = newPeakMapper(p.Config, capacity)
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
		r.mapper.batch(b, r.alloc.PeakStats())
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
			r.out.Map = r.mapper.finish()
		}
		if err := r.alloc.Close(); err != nil && r.out.Err == nil {
			r.out.Err = fmt.Errorf("policy %s: close: %w", r.out.Policy.Name, err)
		}
	}
	return r.out
}

// Run replays the requests of log through every policy (each on its own simulated address space
// holding at most capacity bytes, 0 = unbounded), the policies in parallel, and returns their
// outcomes in the order given. progress, when not nil, is called after each batch with its ops.
func Run(log *requests.Log, policies []Policy, capacity uint64, est Durations, progress func(ops int)) ([]Outcome, error) {
	rs := make([]*replayer, len(policies))
	sites := false
	for i, p := range policies {
		rs[i] = newReplayer(p, capacity, est)
		sites = sites || rs[i].mapper != nil
	}
	err := forEachBatch(log, len(rs), sites, func(i int, b opBatch) { rs[i].batch(b) }, progress)
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
	handles []uint64        // stream index → recorded stream handle (later batches only append)
}

// worker serves one batch of ops.
type worker func(i int, b opBatch)

// forEachBatch reads log to the end and hands every batch of its ops, with their sites when sites
// is set, to workers 0..n-1 at once, each on its own goroutine, waiting for all of them before
// handing out the next batch. While the workers run it reads the next batch.
func forEachBatch(log *requests.Log, n int, sites bool, work worker, progress func(int)) error {
	chans := make([]chan opBatch, n)
	var wg, done sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan opBatch)
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
	r := log.Reader()
	next := func() (opBatch, error) {
		ops, ss, err := r.Next(sites)
		return opBatch{ops: ops, sites: ss, handles: log.Handles()}, err
	}
	b, err := next()
	for err == nil {
		wg.Add(n)
		for _, c := range chans {
			c <- b
		}
		nb, nerr := next() // the reader keeps b valid while it reads this one
		wg.Wait()
		if progress != nil {
			progress(len(b.ops))
		}
		b, err = nb, nerr
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
