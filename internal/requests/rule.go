// Package requests is the one rule for which events of a trace are the requests an allocator
// serves, and the compact form of those requests: analyze's simulation, replay's engine and the
// tests that predict replays all read a trace through it, so that a prediction and the replay that
// checks it see the same requests in the same order.
//
// The rule: the requests are the framework's own block allocations and frees (PyTorch snapshots,
// RMM logs) when the trace has any, otherwise the device allocations and frees of the CUDA runtime
// and driver, cuMemCreate/cuMemRelease included: the events trace.Event.Request classifies as
// requests, of one layer (LayerChoice). Host and managed memory, address reservations and
// mappings are not requests; nor are failed calls, allocations of 0 bytes, at address 0 or above
// MaxSize, frees of address 0 or of blocks that are not live. A native device call without "Async"
// in its name synchronizes with the device (cudaMalloc, cudaFree, cuMemFree_v2, ...).
package requests

import (
	"strings"

	"github.com/allocscope/allocscope/trace"
)

// Source streams the events of a trace in batches, in seq order, and returns io.EOF after the last
// batch. *trace.Reader implements it; tests pass fakes.
type Source interface {
	Next() ([]trace.Event, error)
}

// MaxSize is the largest allocation size believed: 256 TiB, far above any device. A successful
// allocation claiming more comes from a corrupt trace: it is not a request (analyze warns about it),
// so that byte sums cannot overflow.
const MaxSize = 1 << 48

// Layer names which events of a trace are its requests.
type Layer string

// The two layers.
const (
	Framework Layer = "framework" // a framework's own allocator events (PyTorch blocks, RMM resources)
	Device    Layer = "device"    // CUDA runtime and driver device allocations
)

// LayerOf returns the layer of e.
func LayerOf(e *trace.Event) Layer {
	if e.Layer == trace.LayerFramework {
		return Framework
	}
	return Device
}

// Synchronizes reports whether e is a native call that synchronizes with the device: a
// cudaMalloc/cudaFree-like device call that is not stream-ordered (no "Async" in its name).
func Synchronizes(e *trace.Event) bool {
	return blockingCandidate(e) && !streamOrdered(e.Function)
}

// blockingCandidate reports whether e is a native device allocation or free: it synchronizes with
// the device unless its function is stream-ordered.
func blockingCandidate(e *trace.Event) bool {
	return e.Layer != trace.LayerFramework && (e.Op == trace.OpAlloc || e.Op == trace.OpFree) &&
		e.Memory == trace.MemoryDevice
}

// streamOrdered reports whether function is a stream-ordered entry point (cudaMallocAsync, ...).
func streamOrdered(function string) bool { return strings.Contains(function, "Async") }
