package trace

// Request is the kind of allocator call an event is, by its operation and memory kind: an
// allocation, a free, or neither (Event.Request).
type Request uint8

// The kinds of request. The zero value is RequestNone.
const (
	RequestNone  Request = iota // not an allocation or a free of memory a pool could serve
	RequestAlloc                // Size bytes handed out at Address (a handle for cuMemCreate)
	RequestFree                 // the memory at Address (a handle for cuMemRelease) given back
)

// Request classifies e by its operation and memory kind alone, whatever its layer, size, address
// and outcome (check OK).
//
// Allocations and frees of device and of managed memory are RequestAlloc and RequestFree. So are the
// creation and the release of physical memory through the virtual-memory API (cuMemCreate,
// cuMemRelease): that is how programs that manage their own address space (JAX's platform
// allocator, PyTorch with expandable_segments) get device memory, one handle per piece, and a pool
// could serve each piece as it serves a cudaMalloc. Address reservations and mappings only arrange
// address space around those pieces, and page-locked host memory is not device memory: they are
// RequestNone.
//
// This is not the rule for the requests that analyze simulates and replay replays: that rule (the
// request stream, package internal/requests of this module, built on this classification) also
// leaves out managed memory, failed calls, allocations of 0 bytes, at address 0 or of more than
// 256 TiB, frees of blocks that are not live, and the native layer's events when the trace has
// framework allocations.
func (e *Event) Request() Request {
	switch e.Op {
	case OpAlloc, OpFree:
		if e.Memory != MemoryDevice && e.Memory != MemoryManaged {
			return RequestNone
		}
		if e.Op == OpAlloc {
			return RequestAlloc
		}
		return RequestFree
	case OpCreate:
		return RequestAlloc
	case OpRelease:
		return RequestFree
	}
	return RequestNone
}
