// Package torchsnap holds what allocscope reads of PyTorch's CUDA caching allocator beyond the
// events of the trace format: the segments and settings of a memory snapshot
// (torch.cuda.memory._snapshot()), which package trace's importer reads next to the history and
// hands out through Of, and the segments at an out-of-memory error that record rebuilds from a
// recorded history and keeps in the trace's metadata (OOM, trace.FrameworkCapture.OOM). analyze
// explains an out-of-memory error from either. Package trace imports this one, so this one
// imports no package of allocscope.
package torchsnap

import (
	"bytes"
	"encoding/json"
)

// Block states of Block.State, as PyTorch's snapshots name them.
const (
	StateAllocated   = "active_allocated"    // in use by a tensor
	StatePendingFree = "active_pending_free" // freed, awaiting another stream
	StateInactive    = "inactive"            // free, cached
)

// Snapshot is the state of PyTorch's CUDA caching allocator when a memory snapshot was taken,
// next to the history that trace.Reader.Next returns: the segments reserved at snapshot time and
// the allocator settings in force.
type Snapshot struct {
	Segments []Segment // the "segments" list: memory reserved from CUDA at snapshot time
	// Settings holds "allocator_settings"; nil in snapshots of PyTorch versions that lack it.
	Settings *Settings
	// TraceEntries is the number of history entries ("device_traces") per device ordinal,
	// including entries that produce no event ("snapshot" markers, unknown actions).
	TraceEntries []int
}

// Segment is one segment (one cudaMalloc, or one expandable segment) of a snapshot.
type Segment struct {
	Device        int32  `json:"device"`
	Address       uint64 `json:"address"`
	TotalSize     uint64 `json:"total_size"`     // bytes reserved from CUDA ("total_size")
	AllocatedSize uint64 `json:"allocated_size"` // bytes of blocks in use by tensors ("allocated_size")
	ActiveSize    uint64 `json:"active_size"`    // bytes in use or awaiting free on another stream ("active_size")
	RequestedSize uint64 `json:"requested_size"` // bytes requested by tensors, before rounding ("requested_size")
	Stream        uint64 `json:"stream"`
	Large         bool   `json:"large"`      // segment_type "large" (the pool of blocks > 1 MiB)
	Expandable    bool   `json:"expandable"` // an expandable segment (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
	Blocks        int    `json:"blocks"`     // number of blocks the segment is split into
	// BlockList is the blocks, in address order as the snapshot lists them.
	BlockList []Block `json:"block_list"`
}

// Block is one block of a snapshot's segment.
type Block struct {
	Address       uint64 `json:"address"`
	Size          uint64 `json:"size"`           // bytes of the block ("size")
	RequestedSize uint64 `json:"requested_size"` // bytes the tensor asked for ("requested_size")
	// State is StateAllocated, StatePendingFree or StateInactive.
	State string `json:"state"`
	// Callsite is the stack that allocated it (trace.Reader.Callsite), 0 when not recorded; in
	// OOM, an index into OOM.Callsites.
	Callsite uint64 `json:"callsite,omitempty"`
}

// Free reports whether the block is cached and free.
func (b Block) Free() bool { return b.State == StateInactive }

// Settings are the caching allocator's settings recorded in a snapshot.
type Settings struct {
	AllocConf                  string  // PYTORCH_CUDA_ALLOC_CONF as last parsed
	MaxSplitSize               int64   // bytes; -1 means no limit
	GarbageCollectionThreshold float64 // 0 when off
	ExpandableSegments         bool
	// RoundupPower2Divisions[i] is the number of divisions for sizes in the interval PyTorch
	// keys "2^i" (MiB); 0 means no power-of-two rounding there.
	RoundupPower2Divisions    []int64
	ReleaseLockOnCudaMalloc   bool
	PinnedNumRegisterThreads  int64
	PinnedUseCudaHostRegister bool
}

// OOM is PyTorch's caching allocator as its first out-of-memory error left it in one process,
// rebuilt from the process's memory history: what record keeps of a recorded out-of-memory error
// (trace.FrameworkCapture.OOM, as JSON), so that analyze explains it as it explains a snapshot's
// from the snapshot's segments.
type OOM struct {
	Device          int32  `json:"device"`            // the failed request's device
	RequestedBytes  uint64 `json:"requested_bytes"`   // what it asked for
	DeviceFreeBytes uint64 `json:"device_free_bytes"` // what CUDA still had free on the device
	// Segments are the segments of every device at the failure, by device then address, with
	// their blocks.
	Segments []Segment `json:"segments"`
	// Callsites names the blocks' stacks: a block's Callsite i > 0 is Callsites[i-1], 0 none.
	Callsites []string `json:"callsites,omitempty"`
}

// JSON encodes o as trace.FrameworkCapture.OOM holds it; nil for nil.
func (o *OOM) JSON() json.RawMessage {
	if o == nil {
		return nil
	}
	b, _ := json.Marshal(o) // numbers, strings and booleans always marshal
	return b
}

// DecodeOOM reads the JSON of trace.FrameworkCapture.OOM, refusing unknown fields; empty raw is
// nil (no out-of-memory error kept).
func DecodeOOM(raw json.RawMessage) (*OOM, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var o OOM
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return nil, err
	}
	return &o, nil
}

// readerSnapshot returns the snapshot a *trace.Reader holds, nil for another value; package trace
// registers it (RegisterReader).
var readerSnapshot func(reader any) *Snapshot

// RegisterReader makes Of call f. Package trace calls it when it is initialized, with the function
// that returns a *trace.Reader's snapshot, which the Reader keeps unexported: the snapshot is no
// part of trace's API, and this package cannot name trace's Reader (trace imports it).
func RegisterReader(f func(reader any) *Snapshot) { readerSnapshot = f }

// Of returns the snapshot that reader, a *trace.Reader, read from a PyTorch memory snapshot: nil
// when the trace is not one, or reader is no *trace.Reader.
func Of(reader any) *Snapshot {
	if readerSnapshot == nil {
		return nil
	}
	return readerSnapshot(reader)
}
