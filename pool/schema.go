package pool

import "github.com/allocscope/allocscope/internal/upstreams"

// The types of this file are the schema of pool.json, the contract between analyze (which writes
// it), record --pool and replay (which read it) and a user's own program: docs/pool-json.md
// describes the file with an example. validate.go checks a Config, configfile.go reads and writes
// the file, new.go builds the allocator it describes.

// Policy names an allocator policy.
type Policy string

// The policies this package implements.
const (
	PolicySizeClass     Policy = "sizeclass"      // recommended: size classes with per-class slots + best-fit arena for large blocks
	PolicyBestFit       Policy = "bestfit"        // one best-fit coalescing arena, like RMM's pool_memory_resource
	PolicyPyTorch       Policy = "pytorch"        // model of PyTorch's CUDA caching allocator
	PolicyStreamOrdered Policy = "stream-ordered" // model of cudaMallocAsync's pool with a release threshold
	PolicyRaw           Policy = "raw"            // every request goes straight to the Upstream (cudaMalloc/cudaFree)
)

// policies lists every policy, for Validate.
var policies = []Policy{PolicySizeClass, PolicyBestFit, PolicyPyTorch, PolicyStreamOrdered, PolicyRaw}

// ConfigVersion is the pool.json version this package reads and writes.
const ConfigVersion = 1

// DefaultAlignment is the block alignment when Config.Alignment is 0: 512 bytes, the rounding
// of PyTorch's allocator and a multiple of cudaMalloc's 256-byte alignment.
const DefaultAlignment = 512

// AlignUp rounds n up to a multiple of align, which must be above 0: AlignUp(1000,
// DefaultAlignment) is 1024. A power of two (an alignment, a page) costs a mask, any other align a
// division. Like n + align - 1, the result wraps past the largest uint64.
func AlignUp(n, align uint64) uint64 { return upstreams.AlignUp(n, align) }

// DefaultGrowBytes is the size a class grows by when SizeClassConfig.GrowSlots is 0 (the class
// grows by as many slots as fit in it, at least one): 2 MiB, cudaMalloc's granularity.
const DefaultGrowBytes = 2 << 20

// Config is the content of pool.json: a policy and its parameters, plus the analyzer's predictions.
// Sections for policies other than Policy may be present (they are validated, and ignored by New):
// replay reads StreamOrdered's threshold for its cudaMallocAsync mode whatever the policy.
type Config struct {
	// Version is the file format version; must be ConfigVersion.
	Version int `json:"version"`
	// Policy is the allocator policy New builds.
	Policy Policy `json:"policy"`
	// Alignment is the block alignment in bytes, a power of two (0 = DefaultAlignment). Block
	// sizes are multiples of it, and so are size class sizes. PolicyPyTorch ignores it (512 B).
	Alignment uint64 `json:"alignment_bytes"`
	// SizeClass parameterises PolicySizeClass; required for it.
	SizeClass *SizeClassConfig `json:"size_class,omitempty"`
	// BestFit parameterises PolicyBestFit, and the growth of PolicySizeClass's large-block arena.
	BestFit *BestFitConfig `json:"best_fit,omitempty"`
	// PyTorch parameterises PolicyPyTorch (defaults: PyTorch's defaults).
	PyTorch *PyTorchConfig `json:"pytorch,omitempty"`
	// StreamOrdered parameterises PolicyStreamOrdered (default: release threshold 0).
	StreamOrdered *StreamOrderedConfig `json:"stream_ordered,omitempty"`
	// PassThroughSizes are request sizes that record --pool sends to CUDA instead of serving them:
	// the sizes of the device allocations the program exported by IPC (cudaIpcGetMemHandle) in
	// the recording the config came from, since another process that opens a handle of a pool
	// block would map the pool's region. At most MaxPassThroughSizes, each above 0, none twice.
	// New ignores them: the pool itself serves every request (replay too).
	PassThroughSizes []uint64 `json:"pass_through_sizes,omitempty"`
	// Prediction is what analyze predicted for this config on its trace (not read by New).
	Prediction *Prediction `json:"prediction,omitempty"`
	// Equivalents are the nearest settings of other allocators (not read by New).
	Equivalents *Equivalents `json:"equivalents,omitempty"`
}

// Class is one size class: blocks of Size bytes, Slots of them reserved up front.
type Class struct {
	// Size is the block size in bytes: a multiple of the alignment, above the previous class's.
	Size uint64 `json:"size_bytes"`
	// Slots is the number of blocks reserved at New (the most simultaneously live blocks
	// expected); 0 reserves none until the class is first used.
	Slots uint64 `json:"slots"`
}

// SizeClassConfig parameterises PolicySizeClass.
type SizeClassConfig struct {
	// Classes are the size classes, strictly ascending by Size. A request goes to the smallest
	// class at least as large, unless it is above LargeThreshold or above every class.
	Classes []Class `json:"classes"`
	// LargeThreshold sends requests above it to the arena (0 = the largest class's size).
	LargeThreshold uint64 `json:"large_threshold_bytes"`
	// ArenaBytes is the initial size of the best-fit arena for large blocks (rounded up to the
	// alignment); growth beyond it counts a Fallback per region added.
	ArenaBytes uint64 `json:"arena_bytes"`
	// PerStream keeps freed blocks on per-stream free lists: a block freed on stream S is reused
	// only by requests on S (never-used slots and arena space are shared).
	PerStream bool `json:"per_stream"`
	// GrowSlots is how many slots a class grows by when all its slots are taken (one Fallback
	// per growth); 0 = as many as fit in DefaultGrowBytes, at least 1.
	GrowSlots uint64 `json:"grow_slots,omitempty"`
	// ArenaFit is the large-block arena's placement strategy (empty = FitBest).
	ArenaFit Fit `json:"arena_fit,omitempty"`
	// ArenaPaging, when set, makes the arena ArenaBytes of address space whose pages are mapped
	// on demand instead of one region of memory (see ArenaPaging); needs a Mapper Upstream.
	ArenaPaging *ArenaPaging `json:"arena_paging,omitempty"`
}

// BestFitConfig parameterises PolicyBestFit (and the large-block arena).
type BestFitConfig struct {
	// InitialBytes is the first region taken from the Upstream at New (0 = none until needed).
	// For PolicySizeClass it must be 0 or equal ArenaBytes.
	InitialBytes uint64 `json:"initial_bytes"`
	// MaximumBytes caps the bytes the arena holds (0 = unbounded); at least InitialBytes.
	MaximumBytes uint64 `json:"maximum_bytes"`
	// GrowBytes is the minimum size of each further region (0 = the request).
	GrowBytes uint64 `json:"grow_bytes"`
	// Fit is PolicyBestFit's placement strategy (empty = FitBest).
	Fit Fit `json:"fit,omitempty"`
}

// PyTorchConfig parameterises PolicyPyTorch with the knobs of PYTORCH_CUDA_ALLOC_CONF.
type PyTorchConfig struct {
	// MaxSplitSizeMB is max_split_size_mb: blocks this large (MiB) or larger are never split and
	// serve only requests of at least this size (0 = unlimited; otherwise at least 20).
	MaxSplitSizeMB uint64 `json:"max_split_size_mb"`
	// RoundupPower2Divisions is roundup_power2_divisions: requests are rounded up to one of this
	// many steps between powers of two (0 or 1 = off; otherwise a power of two).
	RoundupPower2Divisions uint64 `json:"roundup_power2_divisions"`
	// RoundupPower2Ranges is roundup_power2_divisions's per-size-range form, [256:1,512:2,>:8]
	// (see RoundupRange), in place of RoundupPower2Divisions.
	RoundupPower2Ranges []RoundupRange `json:"roundup_power2_ranges,omitempty"`
	// GarbageCollectionThreshold is garbage_collection_threshold (0 = off, else in (0, 1)): when a
	// segment is needed while more than this share of CapacityBytes is reserved, the cached
	// segments unused the longest are released first. It acts only with a capacity, as PyTorch's
	// only with a per-process memory fraction.
	GarbageCollectionThreshold float64 `json:"garbage_collection_threshold,omitempty"`
	// ExpandableSegments is expandable_segments:True: one growing segment per stream and pool,
	// mapped in 2 MiB (small) / 20 MiB (large) pages; needs an Upstream that is a Mapper.
	ExpandableSegments bool `json:"expandable_segments"`
	// CapacityBytes is the device capacity: a segment that would take reserved memory above it
	// fails like cudaMalloc on a full device, triggering PyTorch's free-cached-and-retry (0 = unbounded).
	CapacityBytes uint64 `json:"capacity_bytes"`
}

// StreamOrderedConfig parameterises PolicyStreamOrdered.
type StreamOrderedConfig struct {
	// ReleaseThresholdBytes is cudaMemPoolAttrReleaseThreshold: the memory the pool keeps at a
	// synchronization point; unused memory above it goes back to the Upstream.
	ReleaseThresholdBytes uint64 `json:"release_threshold_bytes"`
}

// Prediction is what analyze predicted for the config on the trace it was derived from; replay
// prints it next to what it measured.
type Prediction struct {
	Trace                string `json:"trace"`                   // the trace file the config was derived from
	Events               uint64 `json:"events"`                  // allocation and free events simulated
	PeakLiveBytes        uint64 `json:"peak_live_bytes"`         // peak of requested bytes live
	PeakReservedBytes    uint64 `json:"peak_reserved_bytes"`     // peak of bytes held from the Upstream
	UpstreamCalls        uint64 `json:"upstream_calls"`          // Upstream calls (Stats.UpstreamCalls)
	Fallbacks            uint64 `json:"fallbacks"`               // Stats.Fallbacks
	Failures             uint64 `json:"failures"`                // Stats.Failures
	AllocatorTimeSavedNs int64  `json:"allocator_time_saved_ns"` // measured time of the replaced calls minus the pool's
	// RecordPool is what the same requests do to the pool inside the program under `record --pool`,
	// where a synchronous free is deferred (Deferrer); nil when record --pool cannot serve the config.
	RecordPool *DeferredPrediction `json:"record_pool,omitempty"`
}

// DeferredPrediction is a simulation of the pool with synchronous frees deferred until the pool
// synchronizes the device (Deferrer): the figures `record --pool` reports in the trace.
type DeferredPrediction struct {
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // Stats.PeakReservedBytes
	Fallbacks         uint64 `json:"fallbacks"`           // Stats.Fallbacks
	Syncs             uint64 `json:"syncs"`               // Stats.Syncs: synchronizations the pool makes itself
}

// Equivalents are the nearest settings of other allocators a user can paste.
type Equivalents struct {
	PyTorchAllocConf            string `json:"pytorch_cuda_alloc_conf"`              // a PYTORCH_CUDA_ALLOC_CONF value
	RMMInitialPoolBytes         uint64 `json:"rmm_initial_pool_bytes"`               // rmm pool_memory_resource initial size
	RMMMaximumPoolBytes         uint64 `json:"rmm_maximum_pool_bytes"`               // rmm pool_memory_resource maximum size
	CudaMemPoolReleaseThreshold uint64 `json:"cuda_mempool_release_threshold_bytes"` // cudaMemPoolAttrReleaseThreshold
}

// PlanBytes returns what a size-class pool of c reserves when it is made: its classes' slots and
// its arena (0 for the other policies).
func (c Config) PlanBytes() uint64 {
	if c.SizeClass == nil {
		return 0
	}
	n := c.SizeClass.ArenaBytes
	for _, cl := range c.SizeClass.Classes {
		n += cl.Size * cl.Slots
	}
	return n
}

// alignment returns the block alignment in force.
func (c Config) alignment() uint64 {
	if c.Alignment == 0 {
		return DefaultAlignment
	}
	return c.Alignment
}
