package replay

import (
	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/allocscope/allocscope/pool"
)

// Report is everything a replay measured. Counters are totals over all repetitions; peaks are the
// maximum over repetitions; times are nanoseconds.
type Report struct {
	Backend              string       `json:"backend"`
	BackendIsHost        bool         `json:"backend_is_host"`
	BackendDescription   string       `json:"backend_description"`
	Policy               pool.Policy  `json:"policy"`
	Repeat               int          `json:"repeat"`
	Verify               bool         `json:"verify"`
	Touch                bool         `json:"touch"`
	ClockOverheadNs      int64        `json:"clock_overhead_ns"` // median cost of one clock reading; in every latency, not in the allocator time
	Trace                ExtractStats `json:"trace"`
	Warnings             []string     `json:"warnings"`
	Modes                []ModeResult `json:"modes"`
	SpeedupRawOverPool   float64      `json:"speedup_raw_over_pool"`   // raw allocator time / pool allocator time; 0 = not measured
	SpeedupAsyncOverPool float64      `json:"speedup_async_over_pool"` // async allocator time / pool allocator time; 0 = not measured
	// RecordedNsPerRequest is the mean recorded duration of the trace's replayed requests: what the
	// program's own allocation calls cost it per request, device waits inside cudaFree included
	// (0 when the trace records no durations). SpeedupRecordedOverPool is its ratio to the pool's
	// allocator time per request.
	RecordedNsPerRequest    float64 `json:"recorded_ns_per_request"`
	SpeedupRecordedOverPool float64 `json:"speedup_recorded_over_pool"`
	// SpeedupRawOverCPool, SpeedupAsyncOverCPool and SpeedupPoolOverCPool are the raw, async and
	// pool modes' allocator time over the cpool mode's (the C pool that record --pool deploys), and
	// SpeedupRecordedOverCPool is RecordedNsPerRequest over its allocator time per request; absent
	// (0) when not measured.
	SpeedupRawOverCPool      float64          `json:"speedup_raw_over_cpool,omitempty"`
	SpeedupAsyncOverCPool    float64          `json:"speedup_async_over_cpool,omitempty"`
	SpeedupPoolOverCPool     float64          `json:"speedup_pool_over_cpool,omitempty"`
	SpeedupRecordedOverCPool float64          `json:"speedup_recorded_over_cpool,omitempty"`
	Prediction               *pool.Prediction `json:"prediction"`
	Memory                   MemoryCheck      `json:"memory"`
	Checks                   []Check          `json:"checks"`
	Passed                   bool             `json:"passed"`
}

// MemoryCheck is the backend's free memory before the first and after the last repetition.
type MemoryCheck struct {
	TotalBytes     uint64 `json:"total_bytes"`
	StartFreeBytes uint64 `json:"start_free_bytes"`
	EndFreeBytes   uint64 `json:"end_free_bytes"`
	LeakedBytes    int64  `json:"leaked_bytes"` // StartFreeBytes - EndFreeBytes
	ToleranceBytes uint64 `json:"tolerance_bytes"`
}

// ModeResult is what one mode measured over all repetitions.
type ModeResult struct {
	Mode Mode `json:"mode"`
	// Alloc and Free are the latencies of single calls into the allocator, from the checked
	// passes, which read the clock before and after every call (each latency includes one reading;
	// in cpool mode, clock_gettime read in C around each request of the run).
	Alloc Latency `json:"alloc"`
	Free  Latency `json:"free"`
	// AllocatorTimeNs is the time spent replaying the trace's requests per repetition (median over
	// repetitions, robust to one slowed by the machine), from the timed passes: the clock is read once per 4096 requests, not per call,
	// and nothing but the calls into the allocator (and the engine's address table) runs in between
	// (in cpool mode: the clock is read in C before the first request and after the last).
	// The speedups are ratios of it.
	AllocatorTimeNs int64 `json:"allocator_time_ns"`
	// AllocatorTimeNsByRepetition is AllocatorTimeNs of each repetition's timed pass.
	AllocatorTimeNsByRepetition []int64 `json:"allocator_time_ns_by_repetition"`
	// ClockedTimeNs is the sum of the call latencies of a checked pass (mean over repetitions): the
	// allocator time as per-call clock readings see it, each reading's cost included.
	ClockedTimeNs   int64  `json:"clocked_time_ns"`
	Allocs          uint64 `json:"allocs"`            // successful allocations
	Frees           uint64 `json:"frees"`             // successful frees (timed)
	FinalFrees      uint64 `json:"final_frees"`       // blocks still live at the end of the trace, freed untimed
	Failures        uint64 `json:"failures"`          // failed allocations (OOMs included)
	OOMs            uint64 `json:"ooms"`              // failed allocations that were out of memory
	SkippedFrees    uint64 `json:"skipped_frees"`     // frees of blocks whose allocation failed
	FreeErrors      uint64 `json:"free_errors"`       // frees the allocator refused
	TimedFailures   uint64 `json:"timed_failures"`    // failed allocations in the timed passes
	TimedFreeErrors uint64 `json:"timed_free_errors"` // refused frees (and failed syncs) in the timed passes
	Fallbacks       uint64 `json:"fallbacks"`         // pool, cpool: requests served outside the plan
	// Syncs counts the checked passes' calls at the trace's sync points (where the program
	// synchronized with the device): pool.Syncer.Sync for a stream-ordered policy in pool mode,
	// Backend.Synchronize in async mode. The timed passes make as many.
	Syncs uint64 `json:"syncs"`
	// SyncTimeNs is, in async mode, the time per repetition (mean over the timed passes) spent in
	// Backend.Synchronize at the trace's sync points: the program's own waiting, kept out of
	// AllocatorTimeNs and the latencies. A pool's Sync is allocator time and is not in it.
	SyncTimeNs    int64  `json:"sync_time_ns"`
	PeakLiveBytes uint64 `json:"peak_live_bytes"` // requested bytes live at once
	// PeakReservedBytes is the most memory the allocator held, by its own accounting: the
	// Upstream's reserved bytes for raw, pool and cpool, the stream-ordered pool's reserved-memory
	// high mark for async.
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	// PeakMemInfoBytes is the largest drop of the backend's free memory (MemGetInfo) from the start
	// of a repetition, sampled at each new own-accounting peak.
	PeakMemInfoBytes uint64 `json:"peak_meminfo_bytes"`
	// FreeBytesAfterRepetition is the backend's free memory after each repetition, once the
	// allocator was closed or trimmed.
	FreeBytesAfterRepetition []uint64 `json:"free_bytes_after_repetition"`
	// LeakedBytes is what the allocator still held after it was closed (raw, pool, cpool) or trimmed
	// (async).
	LeakedBytes uint64 `json:"leaked_bytes"`
	// PoolStats are the allocator's own counters of the first repetition (raw, pool and cpool).
	PoolStats *pool.Stats `json:"pool_stats,omitempty"`
	// PoolPeakStats are the allocator's counters at its peak reserved memory, first repetition.
	PoolPeakStats *pool.Stats `json:"pool_peak_stats,omitempty"`
	// UpstreamReserves and UpstreamReleases are the Reserve/Release calls seen by the engine (raw,
	// pool, cpool).
	UpstreamReserves uint64 `json:"upstream_reserves"`
	UpstreamReleases uint64 `json:"upstream_releases"`
	// Verify and Touch count the checks of --verify and --touch.
	VerifyChecks    uint64 `json:"verify_checks"`
	Overlaps        uint64 `json:"overlaps"`
	OutsideReserved uint64 `json:"outside_reserved"`
	Touched         uint64 `json:"touched"`
	TouchFailures   uint64 `json:"touch_failures"`
	// Errors are the first few problems, one line each.
	Errors []string `json:"errors"`
}

// Latency summarises the durations of single calls.
type Latency struct {
	Count  uint64  `json:"count"`
	MeanNs float64 `json:"mean_ns"`
	P50Ns  int64   `json:"p50_ns"`
	P99Ns  int64   `json:"p99_ns"`
	MaxNs  int64   `json:"max_ns"`
}

// Check is one pass/fail verdict of the report.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // CheckPass, CheckFail or CheckSkip
	Detail string `json:"detail"`
}

// The statuses of a Check.
const (
	CheckPass = "pass"
	CheckFail = "fail"
	CheckSkip = "skip"
)

// Mode returns the result for mode m, or nil.
func (r *Report) Mode(m Mode) *ModeResult {
	for i := range r.Modes {
		if r.Modes[i].Mode == m {
			return &r.Modes[i]
		}
	}
	return nil
}

// Failed returns the checks that failed.
func (r *Report) Failed() []Check {
	var failed []Check
	for _, c := range r.Checks {
		if c.Status == CheckFail {
			failed = append(failed, c)
		}
	}
	return failed
}

// latencyRecorder collects call durations into a histogram (3 significant digits) and an exact sum.
type latencyRecorder struct {
	hist  *hdrhistogram.Histogram
	sumNs int64
}

// maxLatencyNs is the largest duration the histograms keep apart; longer calls count as this.
const maxLatencyNs = 100e9

func newLatencyRecorder() *latencyRecorder {
	return &latencyRecorder{hist: hdrhistogram.New(1, maxLatencyNs, 3)}
}

func (l *latencyRecorder) record(ns int64) {
	l.sumNs += ns
	_ = l.hist.RecordValue(min(max(ns, 0), maxLatencyNs)) // in range by construction
}

func (l *latencyRecorder) summary() Latency {
	n := l.hist.TotalCount()
	if n == 0 {
		return Latency{}
	}
	return Latency{
		Count:  uint64(n),
		MeanNs: float64(l.sumNs) / float64(n),
		P50Ns:  l.hist.ValueAtQuantile(50),
		P99Ns:  l.hist.ValueAtQuantile(99),
		MaxNs:  l.hist.Max(),
	}
}
