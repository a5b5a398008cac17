// Package analysis turns allocation traces into a verified memory-pool recommendation: streaming
// statistics, anomalies, optimal size classes, a what-if simulation of allocator policies (through
// package pool), and terminal, JSON and HTML reports.
//
// It works in stages, like benchstat: the statistics pass reads every event once in bounded memory
// (it grows with the live allocations and distinct sizes, not with the events) and decodes the
// requests into their compact log (16 bytes and a site index each), held in memory up to
// Options.MemoryBytes and spilled to a temporary file beyond; the size classes are chosen from the
// statistics; then a sizing pass replays the log through every candidate's classes, the arena
// fitting replays its large requests, and a simulation pass replays it through every policy at
// once, each policy on its own goroutine. Only the statistics pass reads the input, and the
// out-of-memory explanation within a capacity, which replays the events; an Input is a way to open
// a Source, not a Source. Problems that do not stop the analysis are returned as warnings.
package analysis

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// Source yields a trace's events in batches, in order, and io.EOF after the last batch. A batch
// is only valid until the next call. *trace.Reader is a Source. When a Source also implements
// io.Closer it is closed after each pass, and when it implements Warnings() []string its warnings
// go into the report.
type Source = requests.Source

// Input is one trace to analyze: its name (for reports and errors) and how to open it.
type Input struct {
	Name string
	Open func() (Source, error)
}

// Options tune an analysis. The zero value is usable.
type Options struct {
	// Capacity is the device memory in bytes the simulated policies may hold (0 = unbounded);
	// allocations beyond it fail and are counted.
	Capacity uint64
	// Top is the number of most frequent exact sizes listed (0 = 10).
	Top int
	// K forces the number of size classes (0 = chosen by the k rule).
	K int
	// Arena chooses the recommended pool's large-block arena: ArenaAuto (the default: one region,
	// the pool.json replay, record --pool and the Go library all run, with the paged variant named
	// beside it when sizeclass.ArenaRule says so), ArenaFixed (one region, no paged variant
	// simulated) or ArenaPaged (paged whenever one region would pass 1.05 × peak live and the paged
	// arena stays within that with no fallbacks, however many page operations it needs; record
	// --pool refuses it).
	Arena ArenaChoice
	// PyTorchSearch runs the PYTORCH_CUDA_ALLOC_CONF search whatever the trace; without it the
	// search runs on a PyTorch snapshot's requests and on traces of at most maxSearchRequests
	// requests (on larger native traces its dozens of policies would dominate the analysis).
	PyTorchSearch bool
	// PoolHeadroom multiplies the recommended pool's class slots and arena bytes (values below 1
	// are 1): memory that lets `record --pool` hold blocks freed by cudaFree until a synchronization
	// with fewer synchronizations of its own (pool.Prediction.RecordPool predicts them).
	PoolHeadroom float64
	// Detail keeps, for WriteHTML's timeline, live bytes at several resolutions with the event
	// behind each point (at most 65,536 points per input; not in the JSON report).
	Detail bool
	// Progress, when set, is called as the analysis proceeds: stage is "statistics", "sizing",
	// "arena" or "simulation" followed by a space and the input's base name ("combined" for all
	// inputs together), or "inputs, each alone" (the inputs done out of all of them). done is what
	// the stage processed so far: the events read in the statistics pass, then the requests
	// replayed from the input's request log; total is the input's requests (0 in the statistics
	// pass, which decodes them).
	Progress func(stage string, done, total uint64)
	// MemoryBytes is the memory the inputs' request logs may hold together (0 =
	// DefaultMemoryBytes): the statistics pass decodes each input once into the compact log of its
	// requests, which every later pass reads; what does not fit is spilled to a temporary file in
	// SpillDir ("" = the system's temporary directory, $TMPDIR), unlinked at once.
	MemoryBytes uint64
	SpillDir    string

	input  string           // base name of the input being analyzed, for Progress
	budget *requests.Budget // MemoryBytes, shared by every input's logs
	// ranksMerged marks the analysis of several inputs merged, whose pool analyzeRanks sizes per
	// input: no pool sized per process of it.
	ranksMerged bool
}

// DefaultMemoryBytes is Options.MemoryBytes when it is 0: 1 GiB, 50 M requests in memory.
const DefaultMemoryBytes = 1 << 30

// ArenaChoice is Options.Arena.
type ArenaChoice string

// The values of ArenaChoice.
const (
	ArenaAuto  ArenaChoice = "" // or "auto"
	ArenaFixed ArenaChoice = "fixed"
	ArenaPaged ArenaChoice = "paged"
)

// Report is the result of an analysis; its JSON form is `analyze --json`.
type Report = schema.Report

// TraceReport is the analysis of one event stream: one input, or all of them together.
type TraceReport = schema.TraceReport

// EventRef identifies one event of a trace in a report.
type EventRef = schema.EventRef

// Analyze analyzes the inputs: all of them together and, when there are several, each alone.
// An error names the input and the position in it; the report's Warnings hold the rest.
func Analyze(inputs []Input, opts Options) (*Report, error) {
	if len(inputs) == 0 {
		return nil, errors.New("no input")
	}
	if opts.Top <= 0 {
		opts.Top = 10
	}
	r := &Report{Version: schema.ReportVersion, Warnings: []string{}}
	for _, in := range inputs {
		r.Inputs = append(r.Inputs, in.Name)
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	opts.budget = requests.NewBudget(opts.MemoryBytes)
	if len(inputs) == 1 {
		tr, warns, log, err := analyzeStream(inputs[0].Name, inputs[0].Open, opts)
		if err != nil {
			return nil, err
		}
		_ = log.Close() // an unlinked temporary file: nothing to lose
		r.Combined = tr
		r.Warnings = append(r.Warnings, warns...)
		return r, nil
	}
	r.PerFile = make([]*schema.TraceReport, len(inputs))
	warns := make([][]string, len(inputs))
	logs := make([]*requests.Log, len(inputs)) // kept for the ranks' comparison
	defer func() {
		for _, l := range logs {
			if l != nil {
				_ = l.Close()
			}
		}
	}()
	each := opts
	each.Progress = filesProgress(opts.Progress, len(inputs))
	err := forEachInput(len(inputs), func(i int) (err error) {
		r.PerFile[i], warns[i], logs[i], err = analyzeStream(inputs[i].Name, inputs[i].Open, each)
		each.Progress("", 0, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, w := range warns {
		r.Warnings = append(r.Warnings, w...)
	}
	merged := opts
	merged.ranksMerged = true // the ranks' pool (analyzeRanks) is sized per input instead
	tr, _, log, err := analyzeStream("combined", func() (Source, error) { return openMerged(inputs) }, merged)
	if err != nil {
		return nil, err
	}
	_ = log.Close()
	r.Combined = tr
	if r.Ranks, err = analyzeRanks(inputs, logs, r.PerFile, tr, opts); err != nil {
		return nil, err
	}
	return r, nil
}

// filesProgress turns the per-file analyses, which run at once, into one stage: the inputs done out
// of all of them. Called with an empty stage when an input is done; the other calls are ignored.
func filesProgress(progress func(string, uint64, uint64), n int) func(string, uint64, uint64) {
	var mu sync.Mutex
	var done uint64
	return func(stage string, _, _ uint64) {
		if stage != "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done++
		if progress != nil {
			progress("inputs, each alone", done, uint64(n))
		}
	}
}

// Config returns the recommended pool configuration of the report: with several inputs (ranks),
// the pool that fits every rank; with one input of several processes, the pool sized for each of
// them (the largest one process needs); else the input's.
func Config(r *Report) *pool.Config {
	if r == nil || r.Combined == nil {
		return nil
	}
	if r.Ranks != nil && r.Ranks.Config != nil {
		return r.Ranks.Config
	}
	if pp := r.Combined.PerProcess; pp != nil && pp.Config != nil {
		return pp.Config
	}
	return r.Combined.Config
}

// CheckFits returns an error when the recommended pool cannot work within the capacity the
// analysis ran with: its simulation failed requests. The error says by how much its plan misses
// and which PYTORCH_CUDA_ALLOC_CONF setting came closest.
func CheckFits(r *Report, capacity uint64) error {
	if rk := r.Ranks; rk != nil && rk.Config != nil {
		if rk.Fits {
			return nil
		}
		for _, row := range rk.Rows {
			if row.SharedError != "" {
				return fmt.Errorf("the pool for every rank cannot be made for %s: %s", row.Name, row.SharedError)
			}
			if row.SharedFallbacks > 0 || row.SharedFailures > 0 {
				return fmt.Errorf("the pool for every rank still grows or fails on %s: %d fallbacks, %d failed requests",
					row.Name, row.SharedFallbacks, row.SharedFailures)
			}
		}
	}
	if r.Ranks == nil && r.Combined != nil && r.Combined.PerProcess != nil && !r.Combined.PerProcess.Fits {
		return errors.New("the pool sized per process still grows or fails on some process")
	}
	tr := r.Combined
	if tr == nil || len(tr.Simulations) == 0 || tr.Config == nil {
		return nil
	}
	rec := tr.Simulations[0]
	if rec.Failures == 0 && rec.Error == "" {
		return nil
	}
	plan := tr.Config.PlanBytes()
	msg := fmt.Sprintf("the recommended pool does not fit in %d bytes: its plan needs %d bytes", capacity, plan)
	if rec.Failures > 0 {
		msg = fmt.Sprintf("the recommended pool does not fit in %d bytes: it failed %d requests; its plan needs %d bytes",
			capacity, rec.Failures, plan)
	}
	if plan > capacity {
		msg += fmt.Sprintf(", %d more", plan-capacity)
	}
	if s := searchSummary(tr.TorchSearch); s != "" {
		msg += "; " + s
	}
	return errors.New(msg)
}

// PyTorchConf returns the best PYTORCH_CUDA_ALLOC_CONF value of the report's search ("" when
// PyTorch's defaults are best), or an error when no setting fits the capacity or the trace holds a
// framework's segments instead of its requests (a recording of driver calls only, whose
// framework's allocator package framework found): the search would take the segments for
// requests.
func PyTorchConf(r *Report) (string, error) {
	if fw := driverOnlyFramework(r.Combined); fw != nil {
		return "", fmt.Errorf("the trace holds %s's segments, not its requests: no PYTORCH_CUDA_ALLOC_CONF "+
			"can be found from them; %s", fw.Framework, fw.SeeRequests)
	}
	if r.Combined == nil || r.Combined.TorchSearch == nil || len(r.Combined.TorchSearch.Best) == 0 {
		return "", errors.New("no PYTORCH_CUDA_ALLOC_CONF setting could be simulated")
	}
	ts := r.Combined.TorchSearch
	if !ts.Fits {
		return "", errors.New(searchSummary(ts))
	}
	return ts.Best[0].Conf, nil
}

// closeSource closes src when it is an io.Closer and collects its warnings.
func closeSource(src Source, warns *[]string) error {
	if w, ok := src.(interface{ Warnings() []string }); ok && warns != nil {
		*warns = append(*warns, w.Warnings()...)
	}
	if c, ok := src.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
	}
	return nil
}
