package schema

// Answer is what a report says first, in the program's terms: what the program does with memory
// today, what to change, what that saves against today, and the anomalies that need action. The
// analysis computes it once from the rest of its TraceReport (internal/analysis/answer.go); the text and
// HTML reports show it at their top, and `analyze --json` carries it as "answer".
type Answer struct {
	// PeakLiveBytes is the most bytes the program's requests held at once.
	PeakLiveBytes uint64 `json:"peak_live_bytes"`
	// WallNs is the time from the first request of the trace to its last.
	WallNs int64 `json:"wall_ns"`
	// CallTimeKnown says whether the trace records how long its allocation calls took: false for
	// a PyTorch snapshot or an RMM log, which have no call durations; CallNs and CallPercent are
	// then 0 and mean "n/a", not "no time".
	CallTimeKnown bool `json:"call_time_known"`
	// CallNs is the time inside the recorded device allocation and free calls, CallPercent its
	// share of WallNs (× 100).
	CallNs      int64   `json:"call_ns"`
	CallPercent float64 `json:"call_percent"`
	// Today is the allocator the program uses now.
	Today Today `json:"today"`
	// Recommendation is what to change, in the user's terms.
	Recommendation Advice `json:"recommendation"`
	// Savings is what the recommendation saves against Today.
	Savings Savings `json:"savings"`
	// Actions are the anomalies that need action (leaks, failed allocations, out-of-memory,
	// double frees, frees of unknown addresses), most serious first; empty when there are none.
	Actions []Action `json:"actions"`
	// Equivalents name the settings of other allocators (pool.Equivalents) that apply to the
	// program, which the text report shows: EquivalentPyTorch when it runs PyTorch,
	// EquivalentRMM when it uses RMM, EquivalentMemPool when it makes stream-ordered requests;
	// empty for a plain program of cudaMalloc calls.
	Equivalents []string `json:"equivalents"`
}

// The Equivalents an Answer names.
const (
	EquivalentPyTorch = "PYTORCH_CUDA_ALLOC_CONF"
	EquivalentRMM     = "RMM pool_memory_resource"
	EquivalentMemPool = "cudaMemPoolAttrReleaseThreshold"
)

// The allocators Today names.
const (
	AllocatorRaw     = "raw cudaMalloc"            // every request a CUDA call (no pool)
	AllocatorPyTorch = "PyTorch caching allocator" // PyTorch's CUDACachingAllocator
	AllocatorCuPy    = "CuPy memory pool"          // CuPy's default pool
	AllocatorJAX     = "JAX arena"                 // XLA's BFC allocator, its arena
	AllocatorRMM     = "RMM memory resource"       // an RMM log's requests
)

// Where Today's peak reserved bytes come from.
const (
	ReservedFromTrace = "trace" // the device memory the traced calls held at most
	ReservedFromModel = "model" // the simulation of the allocator with the program's settings
)

// Today is the allocator a program uses now and the device memory it reserved.
type Today struct {
	// Allocator is one of AllocatorRaw, AllocatorPyTorch, AllocatorCuPy, AllocatorJAX,
	// AllocatorRMM.
	Allocator string `json:"allocator"`
	// Settings are its settings when the report knows them (e.g. "expandable_segments:True"
	// when the snapshot maps memory), else "".
	Settings string `json:"settings,omitempty"`
	// PeakReservedBytes is the most device memory it held; ReservedFrom says how it is known
	// (ReservedFromTrace, ReservedFromModel), "" when it is not (then PeakReservedBytes is 0).
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	ReservedFrom      string `json:"reserved_from"`
}

// The kinds of Advice.
const (
	// AdviceSetting: set the framework's own setting (Setting: PYTORCH_CUDA_ALLOC_CONF=...,
	// cupy's pool limit, XLA_PYTHON_CLIENT_MEM_FRACTION=..., RMM's pool size).
	AdviceSetting = "setting"
	// AdviceKeep: keep the framework's defaults: no setting does better.
	AdviceKeep = "keep-defaults"
	// AdvicePool: serve the requests from allocscope's pool (analyze --emit-config pool.json,
	// then record --pool or the pool library).
	AdvicePool = "pool"
	// AdviceRecordRequests: the trace holds a framework allocator's segments, not the program's
	// requests; record them first (Setting says how).
	AdviceRecordRequests = "record-requests"
	// AdviceNoneFits: nothing the analysis tried fits the capacity.
	AdviceNoneFits = "none-fits"
)

// Advice is the recommendation in the user's terms.
type Advice struct {
	// Kind is one of AdviceSetting, AdviceKeep, AdvicePool, AdviceRecordRequests,
	// AdviceNoneFits.
	Kind string `json:"kind"`
	// Setting is what to set or do: an environment variable with its value, a call, or for a
	// pool "pool.json (analyze --emit-config)" and its policy.
	Setting string `json:"setting"`
	// PeakReservedBytes is the predicted peak reserved with the recommendation (for
	// AdviceNoneFits, the closest candidate's); 0 when there is no prediction.
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	// CapacityBytes is the capacity the analysis ran within (0: unbounded); MissBytes, for
	// AdviceNoneFits, by how much the closest candidate passes it.
	CapacityBytes uint64 `json:"capacity_bytes,omitempty"`
	MissBytes     uint64 `json:"miss_bytes,omitempty"`
	// Summary is the recommendation in one sentence, as the text report writes it.
	Summary string `json:"summary"`
}

// Savings is what a recommendation saves against today's allocator: positive saves, negative
// costs. A quantity the report cannot know (no call durations in the trace; no recommendation
// to compare) has its Known flag false and its fields 0.
type Savings struct {
	MemoryKnown   bool    `json:"memory_known"`
	MemoryBytes   int64   `json:"memory_bytes"`   // today's peak reserved − the recommendation's
	MemoryPercent float64 `json:"memory_percent"` // MemoryBytes / today's peak reserved × 100
	TimeKnown     bool    `json:"time_known"`
	TimeNs        int64   `json:"time_ns"`      // measured time in allocation calls − predicted
	TimePercent   float64 `json:"time_percent"` // TimeNs / the measured time × 100
}

// The kinds of Action, in the order a report lists them.
const (
	ActionOOM         = "out-of-memory"
	ActionFailed      = "failed-allocations"
	ActionLeak        = "leaks"
	ActionDoubleFree  = "double-frees"
	ActionUnknownFree = "unknown-frees"
)

// Action is one anomaly that needs action.
type Action struct {
	Kind  string `json:"kind"`  // ActionOOM, ActionFailed, ActionLeak, ActionDoubleFree, ActionUnknownFree
	Count uint64 `json:"count"` // events
	Bytes uint64 `json:"bytes"` // their bytes (for ActionOOM: the failed request's)
	Seq   uint64 `json:"seq"`   // the first event's seq
	// Summary is the anomaly in one sentence, as the text report writes it.
	Summary string `json:"summary"`
}
