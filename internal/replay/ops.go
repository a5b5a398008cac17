package replay

import "github.com/allocscope/allocscope/internal/requests"

// Source streams the events of a trace in batches, in seq order, and returns io.EOF after the last
// batch. *trace.Reader implements it; tests pass fakes.
type Source = requests.Source

// Trace is the request stream of a trace in compact form (package requests: the same rule and the
// same ops analyze's simulation reads), ready to be replayed any number of times.
type Trace = requests.Trace

// ExtractStats counts what Extract found in a trace and what it left out.
type ExtractStats = requests.Stats

// The layers whose events Extract replays.
const (
	LayerFramework = requests.Framework // a framework's own allocator events (PyTorch blocks, RMM resources)
	LayerDevice    = requests.Device    // CUDA runtime and driver device allocations
)

// Extract reads src to the end and returns its request stream: the framework-layer allocations
// and frees when the trace has any, otherwise the runtime and driver device allocations and frees
// (see package requests for the whole rule). Errors from src are returned wrapped; the warnings are
// non-fatal.
func Extract(src Source) (*Trace, error) { return requests.Extract(src) }
