package schema

import "github.com/allocscope/allocscope/pool"

// Ranks compares the inputs of a multi-input analysis, one per rank (process or GPU), and gives
// the one pool that fits every rank: the classes of the combined analysis, each with the most
// slots any rank needs, and the largest arena any rank needs, checked by simulating it on each rank.
type Ranks struct {
	Rows []RankRow `json:"rows"`
	// The outliers, by input name ("" when no rank stands out: no fallbacks at all, no input
	// with call durations).
	HighestPeak   string `json:"highest_peak"`
	MostFallbacks string `json:"most_fallbacks,omitempty"`
	MostCallTime  string `json:"most_call_time"`
	// Config is the pool for every rank; Fits says every rank ran on it without growth or failure.
	Config *pool.Config `json:"config"`
	Fits   bool         `json:"fits"`
}

// RankRow is one rank's figures.
type RankRow struct {
	Name             string `json:"name"`
	Events           uint64 `json:"events"`
	PeakLiveBytes    uint64 `json:"peak_live_bytes"`
	OwnReservedBytes uint64 `json:"own_reserved_bytes"`    // its own recommended pool's peak reserved
	OwnFallbacks     uint64 `json:"own_fallbacks"`         // its own recommended pool's fallbacks
	SharedReserved   uint64 `json:"shared_reserved_bytes"` // the pool for every rank, on this rank
	SharedFallbacks  uint64 `json:"shared_fallbacks"`
	SharedFailures   uint64 `json:"shared_failures"`
	// SharedError is why the pool for every rank could not even be made for this rank (its plan
	// exceeds the capacity); "" when it was.
	SharedError    string `json:"shared_error,omitempty"`
	MeasuredCallNs int64  `json:"measured_call_ns"` // time inside its allocation calls, as recorded
}

// CallsiteTally is what the code at one callsite allocated.
type CallsiteTally struct {
	Callsite     string `json:"callsite"`
	PID          uint32 `json:"pid"`
	Allocs       uint64 `json:"allocs"`
	Bytes        uint64 `json:"bytes"`          // allocated in all
	AtPeakBytes  uint64 `json:"at_peak_bytes"`  // live at the peak of live bytes
	EndLiveBytes uint64 `json:"end_live_bytes"` // still live at the end
}

// PerProcess is the pool sized for each process of a trace of several on its own: every process
// of record --pool makes its own pool from the same pool.json, so the plan is the largest any one
// process needs (each class's most slots, the largest arena), not one sized over all processes'
// requests merged. It is what --emit-config writes for such a trace.
type PerProcess struct {
	Processes int          `json:"processes"`
	Config    *pool.Config `json:"config"`
	// MergedPlanBytes is the plan of the pool sized over all processes merged (TraceReport.Config).
	MergedPlanBytes uint64 `json:"merged_plan_bytes"`
	// Fits says every process ran on Config without growth or failure.
	Fits bool `json:"fits"`
}
