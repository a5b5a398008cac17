package analysis

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// forEachInput runs f for every input index, at most GOMAXPROCS at once, and returns the first
// error by index.
func forEachInput(n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// analyzeRanks compares the inputs (their request logs, in order) and builds the pool for every rank from the combined analysis'
// classes: each class gets the most slots any rank needs, the arena the largest peak of large
// requests any rank has (whatif.Size on each rank); then the pool is simulated on each rank, and
// its arena grown by what the ranks still had to add (fragmentation), until none has to.
func analyzeRanks(inputs []Input, logs []*requests.Log, perFile []*schema.TraceReport, combined *schema.TraceReport, opts Options) (*schema.Ranks, error) {
	rk := &schema.Ranks{}
	for i, tr := range perFile {
		row := schema.RankRow{Name: inputs[i].Name, Events: tr.Events, PeakLiveBytes: tr.Requests.PeakLiveBytes}
		if len(tr.Simulations) > 0 {
			s := tr.Simulations[0]
			row.OwnReservedBytes, row.OwnFallbacks, row.MeasuredCallNs = s.PeakReservedBytes, s.Fallbacks, s.MeasuredCallNs
		}
		rk.Rows = append(rk.Rows, row)
	}
	rk.HighestPeak, rk.MostFallbacks, rk.MostCallTime = outliers(rk.Rows)
	if combined.Config == nil || combined.Config.SizeClass == nil {
		return rk, nil
	}
	cfg, err := sharedConfig(inputs, logs, combined.Config)
	if err != nil {
		return nil, err
	}
	for range 2 {
		extra, err := verifyShared(inputs, logs, cfg, rk, opts)
		if err != nil || extra == 0 {
			rk.Config = cfg
			rk.Fits = err == nil && allServed(rk.Rows)
			return rk, err
		}
		sc := *cfg.SizeClass
		sc.ArenaBytes = pool.AlignUp(sc.ArenaBytes+extra, pool.DefaultAlignment)
		cfg.SizeClass = &sc
	}
	rk.Config, rk.Fits = cfg, allServed(rk.Rows)
	return rk, nil
}

// sharedConfig sizes the combined analysis' classes and arena for every rank.
func sharedConfig(inputs []Input, logs []*requests.Log, base *pool.Config) (*pool.Config, error) {
	sc := *base.SizeClass
	sizes := make([]uint64, len(sc.Classes))
	for i, c := range sc.Classes {
		sizes[i] = c.Size
	}
	sizings := make([]whatif.Sizing, len(inputs))
	err := forEachInput(len(inputs), func(i int) error {
		cand := whatif.Candidate{Threshold: sc.LargeThreshold, Classes: sizes, PerStream: sc.PerStream}
		out, err := whatif.Size(logs[i], []whatif.Candidate{cand}, nil)
		if err == nil && out[0].Err != nil {
			err = fmt.Errorf("%s: %w", inputs[i].Name, out[0].Err)
		}
		if err == nil {
			sizings[i] = out[0]
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sc.Classes = make([]pool.Class, len(sizes))
	sc.ArenaBytes, sc.ArenaPaging = 0, nil
	for i, size := range sizes {
		sc.Classes[i] = pool.Class{Size: size}
		for _, sz := range sizings {
			sc.Classes[i].Slots = max(sc.Classes[i].Slots, sz.Slots[i])
		}
	}
	for _, sz := range sizings { // the arena's fragmentation, if any, is added by verifyShared
		sc.ArenaBytes = max(sc.ArenaBytes, pool.AlignUp(sz.LargePeakLiveBytes, pool.DefaultAlignment))
	}
	cfg := *base
	cfg.SizeClass, cfg.Prediction, cfg.Equivalents = &sc, nil, nil
	return &cfg, nil
}

// verifyShared simulates cfg on every rank into the rows, and returns the most bytes a rank
// reserved beyond the plan (0 when none grew).
func verifyShared(inputs []Input, logs []*requests.Log, cfg *pool.Config, rk *schema.Ranks, opts Options) (uint64, error) {
	plan := cfg.PlanBytes()
	extra := make([]uint64, len(inputs))
	p := whatif.Policy{Name: "every rank", Config: *cfg}
	err := forEachInput(len(inputs), func(i int) error {
		outs, err := whatif.Run(logs[i], []whatif.Policy{p}, opts.Capacity, nil, nil)
		if err != nil {
			return err
		}
		o, row := outs[0], &rk.Rows[i]
		row.SharedReserved, row.SharedFallbacks, row.SharedFailures = o.Stats.PeakReservedBytes, o.Stats.Fallbacks, o.Stats.Failures
		if errors.Is(o.Err, pool.ErrOutOfMemory) { // its plan is larger than the capacity: it fits nowhere
			row.SharedError = o.Err.Error()
			return nil
		}
		if o.Err != nil {
			return fmt.Errorf("%s: the pool for every rank: %w", inputs[i].Name, o.Err)
		}
		if o.Stats.Fallbacks > 0 && o.Stats.PeakReservedBytes > plan {
			extra[i] = o.Stats.PeakReservedBytes - plan
		}
		return nil
	})
	return slices.Max(extra), err
}

func allServed(rows []schema.RankRow) bool {
	for _, r := range rows {
		if r.SharedFallbacks > 0 || r.SharedFailures > 0 || r.SharedError != "" {
			return false
		}
	}
	return true
}

// outliers names the rank with the highest peak live bytes, the one with the most fallbacks of
// its own pool (none when no rank fell back) and the one with the most time inside its calls.
func outliers(rows []schema.RankRow) (peak, fallbacks, calls string) {
	var p, f uint64
	var c int64 // an input without call durations is never the one with the most time in calls
	for _, r := range rows {
		if r.PeakLiveBytes > p || peak == "" {
			p, peak = r.PeakLiveBytes, r.Name
		}
		if r.OwnFallbacks > f {
			f, fallbacks = r.OwnFallbacks, r.Name
		}
		if r.MeasuredCallNs > c {
			c, calls = r.MeasuredCallNs, r.Name
		}
	}
	return peak, fallbacks, calls
}
