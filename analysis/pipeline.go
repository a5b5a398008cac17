package analysis

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/allocscope/allocscope/analysis/internal/model"
	"github.com/allocscope/allocscope/analysis/internal/sim"
	"github.com/allocscope/allocscope/analysis/internal/sizeclass"
	"github.com/allocscope/allocscope/analysis/internal/stats"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// maxVerifyPasses bounds the extra simulation passes that grow the recommended arena until the
// recommended config runs without fallbacks.
const maxVerifyPasses = 2

// opener opens one pass over a stream of events.
type opener func() (Source, error)

// pass opens a source, runs f over it and closes it.
func (o opener) pass(warns *[]string, f func(Source) error) error {
	src, err := o()
	if err != nil {
		return err
	}
	err = f(src)
	if cerr := closeSource(src, warns); err == nil {
		err = cerr
	}
	return err
}

// progress returns a per-batch callback for stage, or nil. Stages are named "<stage> <input>".
func progress(opts Options, stage string) func(int) {
	if opts.Progress == nil {
		return nil
	}
	var n uint64
	return func(batch int) {
		n += uint64(batch)
		opts.Progress(stage, n)
	}
}

// collect is the statistics pass.
func collect(src Source, opts Options) (*stats.Collector, error) {
	c := stats.NewCollector(sizeclass.Thresholds)
	report := progress(opts, "statistics "+opts.input)
	for {
		b, err := src.Next()
		c.Add(b)
		if report != nil && len(b) > 0 {
			report(len(b))
		}
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// analyzeStream runs every stage over one stream of events.
func analyzeStream(name string, open opener, opts Options) (*model.TraceReport, []string, error) {
	opts.input = filepath.Base(name)
	var warns []string
	var c *stats.Collector
	var info *model.TraceInfo
	err := open.pass(&warns, func(src Source) (err error) {
		info = traceInfo(src)
		c, err = collect(src, opts)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	st := c.Finish(opts.Top)
	if st.Events == 0 {
		return nil, nil, fmt.Errorf("%s: empty trace: no events", name)
	}
	warns = append(warns, st.Warnings...)
	stream := sim.Stream{Framework: st.RequestLayer == "framework"}
	rec, err := chooseSizeClasses(name, open, st, stream, opts, &warns)
	if err != nil {
		return nil, nil, err
	}
	outs, err := simulate(open, stream, rec, st, opts)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range outs {
		if o.Err != nil {
			warns = append(warns, fmt.Sprintf("%s: %v", name, o.Err))
		}
	}
	tr := assemble(name, st, rec, outs)
	tr.Info = info
	return tr, warns, nil
}

// traceInfo returns the metadata of a source that has some (*trace.Reader does).
func traceInfo(src Source) *model.TraceInfo {
	s, ok := src.(interface{ Info() trace.Info })
	if !ok {
		return nil
	}
	i := s.Info()
	return &model.TraceInfo{Source: i.Source, Command: i.Command, Host: i.Host, Driver: i.DriverVersion,
		GPUs: i.GPUNames}
}

// chooseSizeClasses plans the classes for every candidate threshold, replays the trace through
// them (sizing pass), keeps the best candidate and fits its arena.
func chooseSizeClasses(name string, open opener, st *stats.Result, stream sim.Stream, opts Options,
	warns *[]string) (*recommendation, error) {
	plans := make([]sizeclass.Plan, len(sizeclass.Thresholds))
	cands := make([]sim.Candidate, len(plans))
	perStream := orderedStreams(st) > 1
	for i, th := range sizeclass.Thresholds {
		plans[i] = sizeclass.Choose(sizeTallies(st.Sizes), th, opts.K)
		cands[i] = sim.Candidate{Threshold: th, Classes: plans[i].Classes, LargePeakLiveBytes: st.LargePeakLiveBytes[i],
			PerStream: perStream}
	}
	var sizings []sim.Sizing
	err := open.pass(nil, func(src Source) (err error) {
		sizings, err = sim.Size(src, stream, cands, progress(opts, "sizing "+opts.input))
		return err
	})
	if err != nil {
		return nil, err
	}
	best := bestCandidate(sizings)
	if err := sizings[best].Err; err != nil {
		*warns = append(*warns, fmt.Sprintf("%s: size classes: %v", name, err))
	}
	fit, err := fitArena(open, stream, plans[best].Threshold, &sizings[best], opts)
	if err != nil {
		return nil, err
	}
	rec := recommend(name, st, plans[best], sizings[best], fit, perStream)
	for i, sz := range sizings {
		rec.splits = append(rec.splits, model.Split{Threshold: plans[i].Threshold, K: plans[i].K,
			ClassBytes: sz.ClassBytes(), ArenaBytes: sz.ArenaPeakReservedBytes,
			TotalBytes: sz.ClassBytes() + sz.ArenaPeakReservedBytes})
	}
	return rec, nil
}

// simulate runs every what-if policy (simulation pass), then re-simulates the recommended one
// with a grown arena while it needed growth beyond its plan (verification).
func simulate(open opener, stream sim.Stream, rec *recommendation, st *stats.Result, opts Options) ([]sim.Outcome, error) {
	policies := whatIfPolicies(rec, st, opts.Capacity)
	var outs []sim.Outcome
	err := open.pass(nil, func(src Source) (err error) {
		outs, err = sim.Run(src, stream, policies, opts.Capacity, st.Calls, progress(opts, "simulation "+opts.input))
		return err
	})
	if err != nil {
		return nil, err
	}
	for range maxVerifyPasses {
		grown, ok := rec.growArena(outs[0])
		if !ok {
			break
		}
		var again []sim.Outcome
		err = open.pass(nil, func(src Source) (err error) {
			again, err = sim.Run(src, stream, []sim.Policy{grown}, opts.Capacity, st.Calls, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		outs[0] = again[0]
	}
	return outs, nil
}

func sizeTallies(in []stats.SizeTally) []sizeclass.Size {
	out := make([]sizeclass.Size, len(in))
	for i, s := range in {
		out[i] = sizeclass.Size{Bytes: s.Size, Count: s.Count, AtPeak: s.AtPeak}
	}
	return out
}

// bestCandidate applies sizeclass.ThresholdRule: the least class bytes plus arena bytes, ties to
// the larger threshold (the later candidate); candidates that could not be simulated come last.
func bestCandidate(sizings []sim.Sizing) int {
	best := -1
	var bestBytes uint64
	for i, sz := range sizings {
		b := sz.ClassBytes() + sz.ArenaPeakReservedBytes
		if sz.Err == nil && (best < 0 || b <= bestBytes) {
			best, bestBytes = i, b
		}
	}
	if best < 0 {
		return len(sizings) - 1
	}
	return best
}

// arenaProbes is how many fixed arena sizes fitArena tries per pass and placement strategy;
// arenaRounds is how many passes it makes, each narrowing the range between the largest size
// that failed and the smallest that served everything.
const (
	arenaProbes = 8
	arenaRounds = 3
)

// arenaSearch is fitArena's bisection for one placement strategy: an arena of lo bytes fails,
// one of hi bytes serves every large request once served is true.
type arenaSearch struct {
	fit    pool.Fit
	lo, hi uint64
	served bool
	dead   bool // hi failed too: the strategy needs more than the grown best-fit arena
}

// sizes returns the arena sizes to try next: up to arenaProbes between lo and hi, and hi itself
// while it is not known to serve.
func (a *arenaSearch) sizes() []uint64 {
	var sizes []uint64
	if a.dead {
		return nil
	}
	for j := uint64(1); j <= arenaProbes; j++ {
		s := alignUp(a.lo+(a.hi-a.lo)*j/(arenaProbes+1), 2*mib)
		if s > a.lo && s < a.hi && (len(sizes) == 0 || s > sizes[len(sizes)-1]) {
			sizes = append(sizes, s)
		}
	}
	if !a.served {
		sizes = append(sizes, a.hi)
	}
	return sizes
}

// narrow takes the probes of sizes(), ascending, into account.
func (a *arenaSearch) narrow(probes []sim.ArenaProbe) {
	for _, p := range probes {
		if p.Failures == 0 {
			a.hi, a.served = min(a.hi, p.Bytes), true
			break
		}
		a.lo = p.Bytes
	}
	a.dead = !a.served
}

// fitArena shrinks the chosen candidate's arena to the smallest single region (to 2 MiB) that
// serves every large request without growing (sim.FitArena), when that is smaller than the grown
// best-fit arena's peak, searching every placement strategy (pool.Fits) in the same passes. It
// returns the strategy that needs the least, pool.FitBest on a tie.
func fitArena(open opener, stream sim.Stream, threshold uint64, sz *sim.Sizing, opts Options) (pool.Fit, error) {
	if sz.LargePeakLiveBytes == 0 || sz.Err != nil {
		return pool.FitBest, nil
	}
	searches := make([]arenaSearch, len(pool.Fits))
	for i, f := range pool.Fits {
		searches[i] = arenaSearch{fit: f, lo: alignUp(sz.LargePeakLiveBytes, 2*mib) - 2*mib,
			hi: sz.ArenaPeakReservedBytes, served: f == pool.FitBest}
	}
	for range arenaRounds {
		var probes []sim.ArenaProbe
		counts := make([]int, len(searches))
		for i := range searches {
			for _, b := range searches[i].sizes() {
				probes = append(probes, sim.ArenaProbe{Bytes: b, Fit: searches[i].fit})
				counts[i]++
			}
		}
		if len(probes) == 0 {
			break
		}
		err := open.pass(nil, func(src Source) (err error) {
			probes, err = sim.FitArena(src, stream, threshold, probes, progress(opts, "arena "+opts.input))
			return err
		})
		if err != nil {
			return "", err
		}
		for i := range searches {
			if counts[i] > 0 {
				searches[i].narrow(probes[:counts[i]])
				probes = probes[counts[i]:]
			}
		}
	}
	best := 0
	for i, a := range searches {
		if a.served && a.hi < searches[best].hi {
			best = i
		}
	}
	sz.ArenaPeakReservedBytes = searches[best].hi
	return searches[best].fit, nil
}
