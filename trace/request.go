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
// and outcome (check OK). It is the one classification of allocator requests of this module:
// analyze's statistics and simulation and replay all build on it.
//
// Allocations and frees of device memory, and a framework's allocations and frees of its blocks,
// are RequestAlloc and RequestFree. So are the creation and the release of physical memory through
// the virtual-memory API (cuMemCreate, cuMemRelease): that is how programs that manage their own
// address space (JAX's platform allocator, PyTorch with expandable_segments) get device memory, one
// handle per piece, and a pool could serve each piece as it serves a cudaMalloc. Managed memory
// (cudaMallocManaged) migrates between host and device and is no pool's to serve; address
// reservations and mappings only arrange address space around the pieces; page-locked host memory
// is not device memory: they are RequestNone.
//
// Which requests of a trace a pool would see takes the whole trace, not one event: the request
// stream (package internal/requests of this module, built on this classification) also leaves out
// failed calls, allocations of 0 bytes, at address 0 or of more than 256 TiB, frees of blocks that
// are not live, and the native layer's events when the trace has framework allocations.
func (e *Event) Request() Request {
	switch e.Op {
	case OpAlloc, OpFree:
		if e.Memory != MemoryDevice {
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
