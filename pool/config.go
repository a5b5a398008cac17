package pool

import "errors"

// This file's types are the pool.json contract between analyze (which writes it) and replay (which
// reads it). The pool owner completes it (validation, loading, New).

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

// ConfigVersion is the pool.json version this package reads and writes.
const ConfigVersion = 1

// Config is the content of pool.json: a policy and its parameters, plus the analyzer's predictions.
type Config struct {
	Version       int                  `json:"version"`
	Policy        Policy               `json:"policy"`
	Alignment     uint64               `json:"alignment_bytes"` // block alignment, power of two (default 512)
	SizeClass     *SizeClassConfig     `json:"size_class,omitempty"`
	BestFit       *BestFitConfig       `json:"best_fit,omitempty"`
	PyTorch       *PyTorchConfig       `json:"pytorch,omitempty"`
	StreamOrdered *StreamOrderedConfig `json:"stream_ordered,omitempty"`
	Prediction    *Prediction          `json:"prediction,omitempty"`
	Equivalents   *Equivalents         `json:"equivalents,omitempty"`
}

// Class is one size class: blocks of Size bytes, Slots of them reserved up front.
type Class struct {
	Size  uint64 `json:"size_bytes"`
	Slots uint64 `json:"slots"`
}

// SizeClassConfig parameterises PolicySizeClass.
type SizeClassConfig struct {
	Classes        []Class `json:"classes"`               // ascending by Size
	LargeThreshold uint64  `json:"large_threshold_bytes"` // requests above this go to the arena
	ArenaBytes     uint64  `json:"arena_bytes"`           // initial size of the best-fit arena for large blocks
	PerStream      bool    `json:"per_stream"`            // keep free lists per stream
}

// BestFitConfig parameterises PolicyBestFit (and the large-block arena).
type BestFitConfig struct {
	InitialBytes uint64 `json:"initial_bytes"` // first region taken from the Upstream
	MaximumBytes uint64 `json:"maximum_bytes"` // 0 = unbounded
	GrowBytes    uint64 `json:"grow_bytes"`    // minimum size of each further region (0 = the request)
}

// PyTorchConfig parameterises PolicyPyTorch with the knobs of PYTORCH_CUDA_ALLOC_CONF.
type PyTorchConfig struct {
	MaxSplitSizeMB         uint64 `json:"max_split_size_mb"`        // 0 = unlimited
	RoundupPower2Divisions uint64 `json:"roundup_power2_divisions"` // 0 = off
	ExpandableSegments     bool   `json:"expandable_segments"`
	CapacityBytes          uint64 `json:"capacity_bytes"` // device capacity for free-cached-and-retry; 0 = unbounded
}

// StreamOrderedConfig parameterises PolicyStreamOrdered.
type StreamOrderedConfig struct {
	ReleaseThresholdBytes uint64 `json:"release_threshold_bytes"` // memory kept by the pool at a sync point
}

// Prediction is what analyze predicted for the config on the trace it was derived from; replay
// prints it next to what it measured.
type Prediction struct {
	Trace                string `json:"trace"`
	Events               uint64 `json:"events"`
	PeakLiveBytes        uint64 `json:"peak_live_bytes"`
	PeakReservedBytes    uint64 `json:"peak_reserved_bytes"`
	UpstreamCalls        uint64 `json:"upstream_calls"`
	Fallbacks            uint64 `json:"fallbacks"`
	Failures             uint64 `json:"failures"`
	AllocatorTimeSavedNs int64  `json:"allocator_time_saved_ns"`
}

// Equivalents are the nearest settings of other allocators a user can paste.
type Equivalents struct {
	PyTorchAllocConf            string `json:"pytorch_cuda_alloc_conf"`
	RMMInitialPoolBytes         uint64 `json:"rmm_initial_pool_bytes"`
	RMMMaximumPoolBytes         uint64 `json:"rmm_maximum_pool_bytes"`
	CudaMemPoolReleaseThreshold uint64 `json:"cuda_mempool_release_threshold_bytes"`
}

// New builds the allocator that cfg describes on top of up.
func New(cfg Config, up Upstream) (Allocator, error) { return nil, errors.New("not implemented yet") }
