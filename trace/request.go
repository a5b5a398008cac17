package trace

// Request is what an event asks of a memory allocator: the unit analyze simulates and replay
// replays.
type Request uint8

// The kinds of request. The zero value is RequestNone.
const (
	RequestNone  Request = iota // not an allocation or a free of memory a pool could serve
	RequestAlloc                // Size bytes handed out at Address (a handle for cuMemCreate)
	RequestFree                 // the memory at Address (a handle for cuMemRelease) given back
)

// Request classifies e as an allocator sees it, whether or not the call succeeded (check OK).
//
// Allocations and frees of device and managed memory are requests. So are the creation and the
// release of physical memory through the virtual-memory API (cuMemCreate, cuMemRelease): that is how
// programs that manage their own address space (JAX's platform allocator, PyTorch with
// expandable_segments) get device memory, one handle per piece, and a pool could serve each piece
// as it serves a cudaMalloc. Address reservations and mappings only arrange address space around
// those pieces, and page-locked host memory is not device memory: they are not requests.
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
