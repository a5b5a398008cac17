// Package replay drives the allocation requests of a recorded trace through live allocators and
// measures them side by side: the pooled allocator that pool.json describes (package pool), raw
// allocation per request (cudaMalloc/cudaFree, or mmap on the host), and CUDA's stream-ordered
// allocator with a retaining pool.
//
// Extract turns a trace into a compact request stream; Run replays it on a Backend, mode by mode and
// repetition by repetition, and returns a Report with latencies, allocator time, memory peaks and
// pass/fail checks.
//
// The backends are packages of their own, registered by import: internal/replay/backend holds the Backend
// interface, its Options and the registry (OpenBackend, Backends and DefaultBackend here are thin
// wrappers of it); internal/replay/backend/host is the host backend (mmap, runs everywhere, measures host
// memory); internal/replay/backend/cuda is the CUDA backend, built only with the build tag `cuda`. A program
// imports the ones it offers, e.g. `import _ "github.com/allocscope/allocscope/internal/replay/backend/host"`.
// internal/replay/internal/addrset is the ordered set of address ranges that --verify and both backends use.
package replay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/pool"
)

// Mode is one way of serving the requests.
type Mode string

// The replay modes.
const (
	ModeRaw  Mode = "raw"  // the backend's direct allocation per request (pool.PolicyRaw over the backend)
	ModePool Mode = "pool" // the allocator pool.json describes, over the backend
	// ModeCPool is the shim's C pool, the one record --pool deploys, for the same pool.json over the
	// backend (package internal/intercept/cpool): the whole trace in one call into C. Size-class configs
	// without a paged arena only, and a build with cgo.
	ModeCPool Mode = "cpool"
	ModeAsync Mode = "async" // the backend's stream-ordered allocator with a retaining pool
)

// AllModes are the modes ParseModes accepts.
var AllModes = []Mode{ModeRaw, ModePool, ModeCPool, ModeAsync}

// DefaultModes are the modes Run runs when Options.Modes is nil, in the order they run within a
// repetition. ModeCPool is not among them: it runs only size-class configs, and only when asked.
var DefaultModes = []Mode{ModeRaw, ModePool, ModeAsync}

// ParseModes parses a comma-separated list of modes, e.g. "raw,pool".
func ParseModes(list string) ([]Mode, error) {
	var modes []Mode
	for _, name := range strings.Split(list, ",") {
		m := Mode(strings.TrimSpace(name))
		if !slices.Contains(AllModes, m) {
			return nil, fmt.Errorf("unknown mode %q (modes: raw, pool, cpool, async)", name)
		}
		if slices.Contains(modes, m) {
			return nil, fmt.Errorf("mode %q given twice", name)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// Options configure Run. The zero value replays every mode once, without verify or touch.
type Options struct {
	Modes  []Mode // modes to run, in this order within each repetition; nil = DefaultModes
	Repeat int    // repetitions, interleaved mode by mode; 0 = 1
	Verify bool   // after each allocation: no overlap with a live block, inside reserved memory
	Touch  bool   // write each block with a pattern and read it back, again before its free
	// PeakTolerance is the largest relative difference between the pool's measured peak reserved
	// memory and the prediction in pool.json (default 0.01).
	PeakTolerance float64
	// MaxOverhead is the largest ratio of the pool's peak reserved memory to the trace's peak live
	// memory (default 1.05).
	MaxOverhead float64
	// LeakToleranceBytes is how far the backend's free memory may end below where it started.
	LeakToleranceBytes uint64
	// NewAllocator builds the allocators of the raw and pool modes; nil = pool.New. (The cpool
	// mode's is always the C pool.)
	NewAllocator func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error)
	// Clock returns a monotonic time in nanoseconds; nil = the monotonic clock of time.Now.
	Clock func() int64
	// Progress, when set, is called with the number of requests replayed since its last call.
	Progress func(ops int64)
}

func (o *Options) setDefaults() {
	if o.Modes == nil {
		o.Modes = DefaultModes
	}
	o.Repeat = max(o.Repeat, 1)
	if o.PeakTolerance == 0 {
		o.PeakTolerance = 0.01
	}
	if o.MaxOverhead == 0 {
		o.MaxOverhead = 1.05
	}
	if o.NewAllocator == nil {
		// The allocator that a program would use: safe for concurrent use, locking included.
		o.NewAllocator = func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error) { return pool.New(cfg, up) }
	}
	if o.Clock == nil {
		start := time.Now()
		o.Clock = func() int64 { return int64(time.Since(start)) }
	}
	if o.Progress == nil {
		o.Progress = func(int64) {}
	}
}

// Run replays t on b in each mode of opt, opt.Repeat times, interleaved (raw, pool, async, raw,
// pool, async, ...) so that machine noise hits every mode alike. Each repetition makes two passes
// per mode, each with a fresh allocator: first a timed pass of every mode, which calls the
// allocator with no clock reading per call and gives the allocator time (and so the speedups),
// then a checked pass of every mode, which reads the clock around every call (the latencies) and
// does the checks of Verify and Touch. The cpool mode's passes each serve the whole trace in one
// call into C instead, which times every request itself in its checked pass (no Touch there).
// cfg is pool.json: the pool and cpool modes' allocator and the prediction the report compares
// with. Problems of the replay (failed allocations, overlaps, leaks) are in the report and its
// checks; an error means the replay could not run (a cpool mode for a config the C pool does not
// implement, or in a build without cgo, among them).
func Run(t *Trace, b Backend, cfg pool.Config, opt Options) (*Report, error) {
	opt.setDefaults()
	if err := CheckConfig(cfg, opt.Modes); err != nil {
		return nil, err
	}
	r := newRunner(t, b, cfg, opt)
	if err := r.warmUp(); err != nil {
		return nil, fmt.Errorf("warm up backend %s: %w", b.Name(), err)
	}
	startFree, total, err := b.MemGetInfo()
	if err != nil {
		return nil, fmt.Errorf("backend %s: memory info: %w", b.Name(), err)
	}
	accs := make([]*modeAcc, len(opt.Modes))
	for i, m := range opt.Modes {
		accs[i] = newModeAcc(m)
	}
	for rep := range opt.Repeat {
		for _, timed := range []bool{true, false} {
			for _, acc := range accs {
				if err := r.pass(acc, rep, timed); err != nil {
					return nil, fmt.Errorf("mode %s, repetition %d: %w", acc.Mode, rep+1, err)
				}
			}
		}
	}
	endFree, _, err := b.MemGetInfo()
	if err != nil {
		return nil, fmt.Errorf("backend %s: memory info: %w", b.Name(), err)
	}
	rep := r.report(accs)
	rep.Memory = MemoryCheck{TotalBytes: total, StartFreeBytes: startFree, EndFreeBytes: endFree,
		LeakedBytes: int64(startFree) - int64(endFree), ToleranceBytes: opt.LeakToleranceBytes}
	rep.Checks = checks(rep, accs, opt)
	rep.Passed = len(rep.Failed()) == 0
	return rep, nil
}

// CheckConfig returns the error Run returns, before it replays anything, when modes cannot run
// cfg: a cpool mode for a config the C pool does not implement, or in a build without cgo
// (cpool.Check), as "mode cpool: " and cpool.Check's one line. A command checks with it before it
// reads the trace.
func CheckConfig(cfg pool.Config, modes []Mode) error {
	if slices.Contains(modes, ModeCPool) {
		if err := cpool.Check(cfg); err != nil {
			return fmt.Errorf("mode %s: %w", ModeCPool, err)
		}
	}
	return nil
}

// runner holds what every pass shares.
type runner struct {
	t        *Trace
	b        Backend
	cfg      pool.Config
	opt      Options
	addrs    []uint64   // slot → new address; 0 = not live
	sizes    []uint64   // slot → requested size
	patterns []byte     // slot → touch pattern
	cops     *cpool.Ops // the ops in the C pool's form, made at the first cpool pass
}

func newRunner(t *Trace, b Backend, cfg pool.Config, opt Options) *runner {
	r := &runner{t: t, b: b, cfg: cfg, opt: opt,
		addrs: make([]uint64, t.Slots), sizes: make([]uint64, t.Slots)}
	if opt.Touch {
		r.patterns = make([]byte, t.Slots)
	}
	return r
}

// warmUpBytes is the size of the block each used path of the backend serves once before the
// replay, so that one-time costs (context set-up, kernels for memset) are not counted as a leak.
// The raw path also serves a block of warmUpSmallBytes: CUDA sub-allocates small cuMemAlloc
// requests from a heap it keeps once created.
const (
	warmUpBytes      = 2 << 20
	warmUpSmallBytes = 512
)

func (r *runner) warmUp() error {
	if slices.ContainsFunc(r.opt.Modes, func(m Mode) bool { return m != ModeAsync }) {
		for _, size := range []uint64{warmUpSmallBytes, warmUpBytes} {
			if err := r.warmReserve(size); err != nil {
				return err
			}
		}
	}
	if slices.Contains(r.opt.Modes, ModeAsync) {
		return r.warmUpAsync()
	}
	return nil
}

func (r *runner) warmReserve(size uint64) error {
	addr, err := r.b.Reserve(size)
	if err != nil {
		return err
	}
	return errors.Join(r.warmTouch(addr, size), r.b.Release(addr, size))
}

// warmUpAsync serves a small and a large block on as many streams as the trace uses: CUDA keeps
// some memory the first time its pool serves several streams.
func (r *runner) warmUpAsync() error {
	b := r.b
	var streams []Stream
	var err error
	for range max(r.t.Stats.Streams, 1) {
		s, cerr := b.CreateStream()
		if cerr != nil {
			err = cerr
			break
		}
		streams = append(streams, s)
		for _, size := range []uint64{warmUpSmallBytes, warmUpBytes} {
			addr, aerr := b.AllocAsync(size, s)
			if aerr != nil {
				err = aerr
				break
			}
			err = errors.Join(err, r.warmTouch(addr, size), b.FreeAsync(addr, s))
		}
		if err != nil {
			break
		}
	}
	err = errors.Join(err, b.Synchronize())
	for _, s := range streams {
		err = errors.Join(err, b.DestroyStream(s))
	}
	return errors.Join(err, b.ResetAsyncPool())
}

func (r *runner) warmTouch(addr, size uint64) error {
	if !r.opt.Touch {
		return nil
	}
	return r.b.Touch(addr, size, 0x5a)
}

// clockOverhead returns the median of many differences between two back-to-back clock readings.
func clockOverhead(clock func() int64) int64 {
	var d [301]int64
	for i := range d {
		a := clock()
		d[i] = clock() - a
	}
	slices.Sort(d[:])
	return d[len(d)/2]
}
