// Package trace defines allocscope's trace format: the Event record, the Apache Arrow schema that stores
// events on disk, a Writer, a streaming Reader, and importers for traces written by other tools
// (PyTorch memory snapshots, RMM logging_resource_adaptor CSV files).
//
// It is one of the module's two public APIs (with package pool) and keeps to the format: what a
// program needs to write, read and import traces. Its exported names change only compatibly within
// a major version (.ci/apicheck holds them to the last release's). What allocscope's own tools read
// beyond the format is internal: a PyTorch snapshot's segments and settings (internal/torchsnap, to
// which the Reader hands them), and the recorder's metadata that Info carries as opaque JSON
// (Info.Pool, FrameworkCapture.OOM). It imports only internal packages that import no other
// allocscope package (internal/buildid, internal/torchsnap).
//
// # File format (FormatVersion 1)
//
// A trace is an Arrow IPC file (the "Feather v2" file format) with one column per Event field,
// in this order: seq uint64, time_ns int64 (ns), duration_ns int64 (ns), pid uint32, tid uint32,
// device int32, op, memory, layer, function, size uint64 (bytes), address uint64, handle uint64,
// stream uint64, result int32, callsite uint64, pool uint8 (1 when record --pool's pool served the
// call; readers take a trace without it as all 0). The four string columns are dictionary-encoded
// (int8 indices; int16 for function) with one dictionary per column for the whole file: op, memory
// and layer hold the names of the Op, Memory and Layer constants (entry i is the name of value
// i), function holds KnownFunctions plus any names given with WithFunctions. Each field's
// metadata has a "description" and, for times and sizes, a "unit" ("ns" or "bytes"). The schema
// metadata holds allocscope.format_version, allocscope.source, allocscope.command (JSON array),
// allocscope.host, allocscope.start_time (RFC 3339), allocscope.recorder_version,
// allocscope.driver_version, allocscope.gpu_names (JSON array), allocscope.lost_events,
// allocscope.modules (JSON array of Module), allocscope.ipc_export_sizes (JSON array),
// allocscope.framework (JSON array of FrameworkCapture) and allocscope.pool (a JSON object of the
// recorder's own, Info.Pool); an optional value is written as "". Record batches hold 65536 rows
// and their buffers are zstd-compressed. pyarrow (pyarrow.ipc.open_file), pandas (read_feather,
// string columns as categories) and DuckDB (through a pyarrow table) read the files unchanged.
//
// Readers accept the string columns as plain strings too, and extra columns are ignored.
package trace

import "fmt"

// Op is what an event did to memory.
type Op uint8

// The operations an event can record. The zero value is OpUnknown.
const (
	OpUnknown       Op = iota
	OpAlloc            // an allocation returned Address for Size bytes
	OpFree             // Address was freed; Size is the size of what was freed (0 if unknown)
	OpFreeRequested    // a framework was asked to free Address; the memory becomes reusable at a later OpFree
	OpReserve          // virtual address range reserved (cuMemAddressReserve)
	OpUnreserve        // virtual address range released (cuMemAddressFree)
	OpCreate           // physical memory handle created (cuMemCreate); Address holds the handle
	OpRelease          // physical memory handle released (cuMemRelease); Address holds the handle
	OpMap              // Size bytes of a handle mapped at Address (cuMemMap); Handle holds the handle
	OpUnmap            // Size bytes unmapped at Address (cuMemUnmap)
	OpOOM              // a framework reported running out of memory for Size bytes
	opCount
)

var opNames = [...]string{"unknown", "alloc", "free", "free_requested", "reserve", "unreserve",
	"create", "release", "map", "unmap", "oom"}

// String returns the lower-case name stored in the trace's "op" column.
func (o Op) String() string {
	if o < opCount {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseOp returns the Op whose String is name.
func ParseOp(name string) (Op, error) {
	for i, n := range opNames {
		if n == name {
			return Op(i), nil
		}
	}
	return OpUnknown, fmt.Errorf("unknown op %q", name)
}

// Memory is the kind of memory an event concerns.
type Memory uint8

// The kinds of memory. The zero value is MemoryDevice.
const (
	MemoryDevice  Memory = iota // device memory (cudaMalloc, cuMemAlloc, async and pool allocations)
	MemoryManaged               // unified memory (cudaMallocManaged, cuMemAllocManaged)
	MemoryHost                  // page-locked host memory (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc)
	MemoryVirtual               // virtual-memory management objects (cuMemCreate, cuMemMap, address ranges)
	memoryCount
)

var memoryNames = [...]string{"device", "managed", "host", "virtual"}

// String returns the lower-case name stored in the trace's "memory" column.
func (m Memory) String() string {
	if m < memoryCount {
		return memoryNames[m]
	}
	return fmt.Sprintf("memory(%d)", uint8(m))
}

// ParseMemory returns the Memory whose String is name.
func ParseMemory(name string) (Memory, error) {
	for i, n := range memoryNames {
		if n == name {
			return Memory(i), nil
		}
	}
	return MemoryDevice, fmt.Errorf("unknown memory kind %q", name)
}

// Layer is the API layer through which the program entered the allocation.
type Layer uint8

// The API layers. A runtime call that reaches the driver is recorded once, at the runtime layer.
const (
	LayerRuntime   Layer = iota // CUDA runtime API (cudaMalloc...)
	LayerDriver                 // CUDA driver API (cuMemAlloc_v2...)
	LayerFramework              // a framework's own allocator (PyTorch blocks, RMM resources), from an importer
	layerCount
)

var layerNames = [...]string{"runtime", "driver", "framework"}

// String returns the lower-case name stored in the trace's "layer" column.
func (l Layer) String() string {
	if l < layerCount {
		return layerNames[l]
	}
	return fmt.Sprintf("layer(%d)", uint8(l))
}

// ParseLayer returns the Layer whose String is name.
func ParseLayer(name string) (Layer, error) {
	for i, n := range layerNames {
		if n == name {
			return Layer(i), nil
		}
	}
	return LayerRuntime, fmt.Errorf("unknown layer %q", name)
}

// Event is one call that allocated, freed, reserved or mapped memory.
//
// All times are nanoseconds. TimeNs is a monotonic clock reading taken when the call began (the
// same clock for every process of one recording); DurationNs is how long the real call took.
type Event struct {
	Seq        uint64 // global order of the event across all threads and processes of a recording
	TimeNs     int64  // monotonic timestamp at the start of the call, ns
	DurationNs int64  // time spent in the real call, ns (0 when unknown)
	PID        uint32 // process id
	TID        uint32 // thread id (kernel tid)
	Device     int32  // device ordinal, -1 when unknown or not a device allocation
	Op         Op
	Memory     Memory
	Layer      Layer
	Function   string // entry point the program called, e.g. "cudaMallocAsync", "cuMemAlloc_v2", "torch.alloc"
	Size       uint64 // requested bytes for allocations; freed bytes for frees (0 when unknown)
	Address    uint64 // returned or freed device address (handle for OpCreate/OpRelease)
	Handle     uint64 // physical-memory handle for OpMap; 0 otherwise
	Stream     uint64 // stream handle for stream-ordered calls, 0 for the legacy default stream
	Result     int32  // CUDA result code of the real call; 0 is success
	Callsite   uint64 // return address of the program's call into the intercepted function, 0 when unknown
	Pool       bool   // allocscope's pool inside the program served the call (record --pool), not CUDA
}

// OK reports whether the call succeeded.
func (e *Event) OK() bool { return e.Result == 0 }
