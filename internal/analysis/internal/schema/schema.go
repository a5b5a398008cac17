// Package schema holds the data types of an analysis report. Their JSON field names are the stable
// contract of `analyze --json`; the analysis package re-exports them.
package schema

import "github.com/allocscope/allocscope/pool"

// ReportVersion is the version of the JSON report layout.
const ReportVersion = 1

// Report is the result of analyzing one or more traces.
type Report struct {
	Version  int            `json:"version"`
	Inputs   []string       `json:"inputs"`
	Warnings []string       `json:"warnings"`
	Combined *TraceReport   `json:"combined"`           // all inputs analyzed together
	PerFile  []*TraceReport `json:"per_file,omitempty"` // each input alone, when there are several
	Ranks    *Ranks         `json:"ranks,omitempty"`    // the inputs side by side, and one pool for all
}

// TraceReport is everything computed for one event stream.
type TraceReport struct {
	Name string     `json:"name"`
	Info *TraceInfo `json:"info,omitempty"` // the trace's metadata, when it has some
	// Answer is what the report says first: today's use of memory, the recommendation and what
	// it saves, the anomalies that need action.
	Answer       *Answer   `json:"answer,omitempty"`
	Events       uint64    `json:"events"`
	RequestLayer string    `json:"request_layer"` // "framework" when the trace has framework allocations, else "device"
	Requests     *Stats    `json:"requests"`      // the user-level requests, all groups together
	Upstream     *Stats    `json:"upstream,omitempty"`
	Groups       []*Stats  `json:"groups"` // requests per process, device and stream
	Anomalies    Anomalies `json:"anomalies"`
	// Framework is the framework whose allocator the trace shows (package framework's rules), or
	// whose requests it holds; nil for neither.
	Framework *FrameworkNote `json:"framework,omitempty"`
	// TopCallsites are the code that allocated the most bytes; PeakCallsites the code that held
	// the most at the peak of live bytes (each at most 10).
	TopCallsites  []CallsiteTally `json:"top_callsites"`
	PeakCallsites []CallsiteTally `json:"peak_callsites"`
	SizeClasses   *SizeClassPlan  `json:"size_classes"`
	Simulations   []Simulation    `json:"simulations"`
	Fidelity      *Fidelity       `json:"fidelity,omitempty"`
	TorchSearch   *TorchSearch    `json:"pytorch_search,omitempty"` // the PYTORCH_CUDA_ALLOC_CONF search
	OOM           *OOMReport      `json:"oom,omitempty"`            // a PyTorch snapshot's out-of-memory, explained
	Config        *pool.Config    `json:"config"`
	PerProcess    *PerProcess     `json:"per_process,omitempty"` // a trace of several processes: the pool sized for each
	Detail        *Detail         `json:"-"`                     // the HTML report's timeline, when asked for

	// CallsiteNote says in one line why the trace's callsites are shown as addresses, and what to
	// do about it; "" when the trace names them all (or has none).
	CallsiteNote string `json:"callsite_note,omitempty"`
	// Stacks are the full stacks of the callsites the report names, by name, innermost frame first
	// ("function (file:line)"), where the trace has them: a PyTorch snapshot's recorded stacks, a
	// symbolized recording's frame. Only the HTML report shows them; not in the JSON report.
	Stacks map[string][]string `json:"-"`
}

// TraceInfo is the metadata a trace file carries.
type TraceInfo struct {
	Source  string   `json:"source"` // "allocscope", "pytorch-snapshot" or "rmm-csv"
	Command []string `json:"command,omitempty"`
	Host    string   `json:"host,omitempty"`
	Driver  string   `json:"driver,omitempty"`
	GPUs    []string `json:"gpus,omitempty"`
}

// Stats are the statistics of one stream of allocations and frees.
type Stats struct {
	Scope            string       `json:"scope"` // "all" or "pid P device D stream 0xS"
	PID              uint32       `json:"pid"`
	Device           int32        `json:"device"`
	Stream           uint64       `json:"stream"`
	Ops              []OpCount    `json:"ops"`
	Allocs           uint64       `json:"allocs"`
	Frees            uint64       `json:"frees"`
	AllocBytes       uint64       `json:"alloc_bytes"`
	FreedBytes       uint64       `json:"freed_bytes"`
	PeakLiveBytes    uint64       `json:"peak_live_bytes"`
	PeakLiveBlocks   uint64       `json:"peak_live_blocks"`
	PeakSeq          uint64       `json:"peak_seq"`
	PeakTimeNs       int64        `json:"peak_time_ns"`
	EndLiveBytes     uint64       `json:"end_live_bytes"`
	FirstTimeNs      int64        `json:"first_time_ns"`
	WallNs           int64        `json:"wall_ns"`
	AllocsPerSec     float64      `json:"allocs_per_sec"`
	AllocBytesPerSec float64      `json:"alloc_bytes_per_sec"`
	CallNs           int64        `json:"call_ns"`        // time inside the recorded calls
	CallPercent      float64      `json:"call_percent"`   // CallNs / WallNs × 100
	MedianFreeNs     int64        `json:"median_free_ns"` // median duration of the frees
	WaitedFrees      uint64       `json:"waited_frees"`   // frees that waited for the device
	WaitedFreeNs     int64        `json:"waited_free_ns"` // their threshold: 10 × the median
	Histogram        []SizeBucket `json:"size_histogram"` // log2 buckets, non-empty ones
	TopSizes         []SizeCount  `json:"top_sizes"`      // most frequent exact sizes
	Lifetime         Quantiles    `json:"lifetime_ns"`    // allocation lifetimes of freed blocks
	Timeline         []Point      `json:"timeline,omitempty"`
	LifetimeCDF      []Point      `json:"lifetime_cdf,omitempty"` // X = lifetime ns, Y = fraction
}

// OpCount counts the events of one operation on one kind of memory.
type OpCount struct {
	Op     string `json:"op"`
	Memory string `json:"memory"`
	Count  uint64 `json:"count"`
	Failed uint64 `json:"failed"`
	Bytes  uint64 `json:"bytes"`
}

// SizeBucket is one log2 bucket of request sizes: Lo ≤ size < Hi (bucket 0 holds size 0).
type SizeBucket struct {
	Lo    uint64 `json:"lo"`
	Hi    uint64 `json:"hi"`
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// SizeCount is how often one exact size was requested.
type SizeCount struct {
	Size  uint64 `json:"size"`
	Count uint64 `json:"count"`
}

// Quantiles summarise a distribution. Exact is false when they come from a bounded sample.
type Quantiles struct {
	Count uint64  `json:"count"`
	Exact bool    `json:"exact"`
	Min   float64 `json:"min"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Point is one point of a chart.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Anomalies are the suspicious events of the request stream.
type Anomalies struct {
	Leaks        Anomaly `json:"leaks"`
	DoubleFrees  Anomaly `json:"double_frees"`
	UnknownFrees Anomaly `json:"unknown_frees"`
	FailedAllocs Anomaly `json:"failed_allocs"`
	ZeroSize     Anomaly `json:"zero_size"`
	// HeldByAllocator is the memory a framework's allocator took from CUDA and held until exit:
	// not in Leaks, which hold only what it does not explain. nil when no framework's is found.
	HeldByAllocator *Held `json:"held_by_allocator,omitempty"`
}

// Held is the memory a framework's allocator (PyTorch's caching allocator, CuPy's pool, JAX's
// arena) held until exit: its segments still live at the end of a trace of driver calls.
type Held struct {
	Framework string     `json:"framework"` // "PyTorch", "CuPy" or "JAX"
	Count     uint64     `json:"count"`     // segments
	Bytes     uint64     `json:"bytes"`
	Callsites []string   `json:"callsites"` // the allocator's callsites, the first used first
	Events    []EventRef `json:"events"`    // the oldest five segments
}

// FrameworkNote is what the report says of a framework. Layer "driver": its allocator's
// segments were found among the trace's driver and runtime calls (Evidence), its requests are
// not in the trace (SeeRequests says how to record them), and the pool sized to the segments is
// not one for the program's requests. Layer "framework": the trace holds its requests, and
// Setting is the framework's own setting for them, the report's first recommendation.
type FrameworkNote struct {
	Framework   string   `json:"framework"` // "PyTorch", "CuPy" or "JAX"
	Layer       string   `json:"layer"`     // "driver" or "framework"
	Evidence    []string `json:"evidence,omitempty"`
	SeeRequests string   `json:"see_requests,omitempty"`
	// ArenaBytes is JAX's preallocated arena, ArenaFraction its share of the GPU's memory (0 when
	// the GPU's total is not known).
	ArenaBytes    uint64  `json:"arena_bytes,omitempty"`
	ArenaFraction float64 `json:"arena_fraction,omitempty"`
	// Setting is the framework's own setting (PYTORCH_CUDA_ALLOC_CONF=..., CuPy's pool limit,
	// XLA_PYTHON_CLIENT_MEM_FRACTION=...), its predicted peak reserved bytes, and for PyTorch the
	// defaults' and the bytes saved against them.
	Setting                   string `json:"setting,omitempty"`
	PeakReservedBytes         uint64 `json:"peak_reserved_bytes,omitempty"`
	DefaultsPeakReservedBytes uint64 `json:"defaults_peak_reserved_bytes,omitempty"`
	SavedBytes                int64  `json:"saved_bytes,omitempty"`
}

// Anomaly is one kind of anomaly: how often it happened and its first events.
type Anomaly struct {
	Count  uint64     `json:"count"`
	Bytes  uint64     `json:"bytes"`
	Events []EventRef `json:"events"`
}

// EventRef identifies one event of the trace.
type EventRef struct {
	Seq      uint64 `json:"seq"`
	TimeNs   int64  `json:"time_ns"`
	PID      uint32 `json:"pid"`
	Device   int32  `json:"device"`
	Function string `json:"function"`
	Size     uint64 `json:"size"`
	Address  string `json:"address"`  // hex
	Callsite string `json:"callsite"` // hex
	Result   int32  `json:"result"`
}

// SizeClassPlan is the size-class recommendation.
type SizeClassPlan struct {
	Alignment          uint64      `json:"alignment_bytes"`
	LargeThreshold     uint64      `json:"large_threshold_bytes"`
	ThresholdRule      string      `json:"threshold_rule"`
	ArenaRule          string      `json:"arena_rule"`         // when the arena is paged
	ArenaPaged         bool        `json:"arena_paged"`        // the arena is pages mapped on demand
	ArenaBudgetBytes   uint64      `json:"arena_budget_bytes"` // paged: the most bytes it keeps mapped
	Thresholds         []Split     `json:"thresholds"`         // every candidate threshold tried
	DistinctSizes      int         `json:"distinct_sizes"`     // aligned sizes at or below the threshold
	K                  int         `json:"k"`
	KRule              string      `json:"k_rule"`
	Classes            []ClassPlan `json:"classes"`
	Curve              []KWaste    `json:"curve"` // waste for every k tried
	ClassBytes         uint64      `json:"class_bytes"`
	LargePeakLiveBytes uint64      `json:"large_peak_live_bytes"`
	ArenaBytes         uint64      `json:"arena_bytes"` // paged: its address space
	PoolBytes          uint64      `json:"pool_bytes"`  // class bytes + arena bytes, or + budget when paged
	PeakLiveBytes      uint64      `json:"peak_live_bytes"`
	// PagedAlternative is the paged arena the arena rule names beside the one-region pool (analyze
	// --arena paged writes it); nil when none qualifies or the arena is paged.
	PagedAlternative *PagedAlternative `json:"paged_alternative,omitempty"`
}

// PagedAlternative is what the recommended pool with a paged arena did in its simulation: replay
// and the Go library run it, record --pool does not.
type PagedAlternative struct {
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	PageOps           uint64 `json:"page_ops"`    // maps, unmaps and moves of pages
	SavedBytes        int64  `json:"saved_bytes"` // the one-region pool's peak reserved minus this one's
}

// Split is one candidate large-request threshold and what replaying the trace through it gave.
type Split struct {
	Threshold  uint64 `json:"threshold_bytes"`
	K          int    `json:"k"`
	ClassBytes uint64 `json:"class_bytes"`
	ArenaBytes uint64 `json:"arena_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
}

// ClassPlan is one recommended size class.
type ClassPlan struct {
	Size      uint64 `json:"size_bytes"`
	Slots     uint64 `json:"slots"`
	Requests  uint64 `json:"requests"`
	PeakLive  uint64 `json:"live_at_peak"`
	WasteAtPk uint64 `json:"waste_at_peak_bytes"`
}

// KWaste is the rounding waste of the optimal k classes.
type KWaste struct {
	K          int     `json:"k"`
	PeakWaste  uint64  `json:"peak_waste_bytes"`
	TotalWaste uint64  `json:"total_waste_bytes"`
	Objective  float64 `json:"objective"`
}

// Simulation is the outcome of one allocator policy on the request stream.
type Simulation struct {
	Name              string  `json:"name"`
	Policy            string  `json:"policy"`
	Settings          string  `json:"settings"`
	PeakLiveBytes     uint64  `json:"peak_live_bytes"`
	PeakReservedBytes uint64  `json:"peak_reserved_bytes"`
	ReservedRatio     float64 `json:"reserved_to_peak_live"`
	InternalFragBytes uint64  `json:"internal_frag_bytes"` // block − requested bytes at peak reserved
	ExternalFragBytes uint64  `json:"external_frag_bytes"` // reserved − block bytes at peak reserved
	UpstreamReserves  uint64  `json:"upstream_reserves"`
	UpstreamReleases  uint64  `json:"upstream_releases"`
	UpstreamBytes     uint64  `json:"upstream_reserved_bytes"`
	Failures          uint64  `json:"failures"`
	Fallbacks         uint64  `json:"fallbacks"`
	PageOps           uint64  `json:"page_ops"` // pages (2 MiB; the stream-ordered model's 32 MiB steps) mapped, unmapped or moved while serving the trace
	PredictedCallNs   int64   `json:"predicted_call_ns"`
	MeasuredCallNs    int64   `json:"measured_call_ns"`
	TimeSavedNs       int64   `json:"time_saved_ns"`
	Error             string  `json:"error,omitempty"`
	// PeakMap is where the policy's memory was at the moment its peak figures are from; only for
	// the recommended pool (the first simulation) and PyTorch's caching allocator with its defaults.
	PeakMap *PeakMap `json:"peak_map,omitempty"`
}

// PeakMap is where a simulated allocator's memory was at its peak of reserved bytes: the moment of
// a Simulation's fragmentation figures (reserved bytes at their maximum; among such moments, the
// first with the most live bytes), when the bytes it held but did not use were what made it reserve
// that much. Its totals cover every region; Shown lists the largest regions, largest first, each
// with its blocks in address order, neighbouring blocks smaller than MinBlockBytes merged into one
// entry so that the map stays small (at most a few thousand entries) whatever the trace.
type PeakMap struct {
	AtRequest        uint64      `json:"at_request"`         // the allocator calls it had served (requests, failed ones included)
	ReservedBytes    uint64      `json:"reserved_bytes"`     // held from the device: the regions' bytes
	LiveBytes        uint64      `json:"live_bytes"`         // live blocks' bytes, after the allocator's rounding
	RequestedBytes   uint64      `json:"requested_bytes"`    // what the live blocks' requests asked for
	FreeBytes        uint64      `json:"free_bytes"`         // free (cached) blocks: reserved − live, the external fragmentation
	LargestFreeBytes uint64      `json:"largest_free_bytes"` // the largest free block
	LiveBlocks       uint64      `json:"live_blocks"`
	Regions          int         `json:"regions"`         // regions in all
	MinBlockBytes    uint64      `json:"min_block_bytes"` // blocks below this are merged with their neighbours in Shown
	Shown            []MapRegion `json:"shown"`           // the largest regions, at most 64
	HiddenBytes      uint64      `json:"hidden_bytes"`    // the bytes of the regions not shown
	HiddenFreeBytes  uint64      `json:"hidden_free_bytes"`
}

// MapRegion is one region of a PeakMap: memory the allocator got from the device in one call (a
// cudaMalloc, or a run of mapped pages).
type MapRegion struct {
	Address          string     `json:"address"` // hex
	SizeBytes        uint64     `json:"size_bytes"`
	Kind             string     `json:"kind"`   // plan, slab, arena (size-class pool); small, large (PyTorch): pool.RegionKind
	Stream           uint64     `json:"stream"` // PyTorch: the stream whose pool the segment belongs to
	Expandable       bool       `json:"expandable,omitempty"`
	FreeBytes        uint64     `json:"free_bytes"`
	LargestFreeBytes uint64     `json:"largest_free_bytes"`
	Blocks           []MapBlock `json:"blocks"` // tile the region, in address order
}

// MapBlock is a block of a MapRegion, or several neighbouring ones too small to draw (Blocks > 1).
type MapBlock struct {
	Offset         uint64 `json:"offset"` // from the region's address
	SizeBytes      uint64 `json:"size_bytes"`
	Blocks         int    `json:"blocks"`                    // blocks in this entry: 1 for one block
	LiveBytes      uint64 `json:"live_bytes"`                // bytes of its live blocks: size_bytes for a live block, 0 for a free one
	RequestedBytes uint64 `json:"requested_bytes,omitempty"` // what its live blocks' requests asked for
	Callsite       string `json:"callsite,omitempty"`        // of the live block (merged: of the largest); "" when unknown
	ClassBytes     uint64 `json:"class_bytes,omitempty"`     // a size-class slot, or free slots of one class: the class's block size
}

// Fidelity compares the PyTorch model's segment allocations with the snapshot's real ones.
type Fidelity struct {
	Model         string  `json:"model"`
	RealSegments  uint64  `json:"real_segments"`
	RealBytes     uint64  `json:"real_bytes"`
	ModelSegments uint64  `json:"model_segments"`
	ModelBytes    uint64  `json:"model_bytes"`
	CountMatch    float64 `json:"count_match_percent"`
	BytesMatch    float64 `json:"bytes_match_percent"`
}

// Detail is the live-bytes timeline of the HTML report at several resolutions, each point with the
// event behind it. It is kept only when the analysis is asked for it (analysis.Options.Detail) and
// is not part of the JSON report.
type Detail struct {
	// Events are the allocations and frees behind the points of the finest level, in order.
	Events []DetailEvent
	// Levels are the resolutions, finest first: level 0 splits the requests into buckets of
	// Levels[0].BucketEvents events, each level after it merges pairs of its buckets. A bucket
	// keeps the events at which live bytes were lowest and highest in it, in time order.
	Levels []DetailLevel
}

// DetailLevel is one resolution of a Detail.
type DetailLevel struct {
	BucketEvents uint64  // requests per bucket
	Points       []int32 // indexes into Detail.Events, ascending
}

// DetailEvent is an allocation or free of the requests and the live bytes right after it.
type DetailEvent struct {
	Request   uint64 // its place among the requests, from 1: level l's bucket k holds requests k·w+1 … (k+1)·w
	Seq       uint64
	TimeNs    int64
	LiveBytes uint64
	Free      bool
	SizeBytes uint64
	PID       uint32
	Device    int32
	Stream    uint64
	Callsite  string // the allocation's callsite ("" when unknown), for a free too
	// LifetimeNs is how long the block lived: from its allocation to its free (-1 when it was
	// still live at the end of the trace).
	LifetimeNs int64
}
