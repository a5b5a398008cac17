package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/allocscope/allocscope/trace"
)

// Source streams the events of a trace in batches, in seq order, and returns io.EOF after the last
// batch. *trace.Reader implements it; tests pass fakes.
type Source interface {
	Next() ([]trace.Event, error)
}

// op is one request of the replayed stream, 16 bytes. An allocation has size > 0; a free has
// size 0. slot indexes the table of live blocks (old address → new address); stream holds the
// index of the recorded stream, and in its top bit whether the program synchronized with the
// device right after this request (see synchronizes).
type op struct {
	size   uint64
	slot   uint32
	stream uint32
}

// syncBit marks an op after which the program synchronized with the device.
const syncBit = 1 << 31

func (o op) isAlloc() bool { return o.size > 0 }

// streamIndex returns the index of the op's recorded stream.
func (o op) streamIndex() uint32 { return o.stream &^ syncBit }

// syncs reports whether the program synchronized with the device right after the op.
func (o op) syncs() bool { return o.stream&syncBit != 0 }

// synchronizes reports whether e is a native call that synchronizes with the device: a
// cudaMalloc/cudaFree-like device call that is not stream-ordered. This is the rule analyze's
// simulation uses, so that stream-ordered policies replay as they were simulated.
func synchronizes(e *trace.Event) bool {
	return e.Layer != trace.LayerFramework && (e.Op == trace.OpAlloc || e.Op == trace.OpFree) &&
		e.Memory == trace.MemoryDevice && !strings.Contains(e.Function, "Async")
}

// Layer names which events Extract replayed.
const (
	LayerFramework = "framework" // a framework's own allocator events (PyTorch blocks, RMM resources)
	LayerDevice    = "device"    // CUDA runtime and driver device allocations
)

// ExtractStats counts what Extract found in a trace and what it left out.
type ExtractStats struct {
	Events           uint64 `json:"events"`              // events read
	Layer            string `json:"layer"`               // LayerFramework or LayerDevice
	Allocs           uint64 `json:"allocs"`              // allocations in the op list
	Frees            uint64 `json:"frees"`               // frees in the op list
	UnknownFrees     uint64 `json:"unknown_frees"`       // frees of an address that was not live: reported, not replayed
	FailedAllocs     uint64 `json:"failed_allocs"`       // recorded allocations that failed: skipped
	FailedFrees      uint64 `json:"failed_frees"`        // recorded frees that failed: skipped
	ZeroSizeAllocs   uint64 `json:"zero_size_allocs"`    // allocations of 0 bytes: skipped
	NullFrees        uint64 `json:"null_frees"`          // frees of address 0 (no-ops): skipped
	ImplicitFrees    uint64 `json:"implicit_frees"`      // allocations at a still-live address: a free was inserted before them
	SkippedHost      uint64 `json:"skipped_host"`        // page-locked host memory events: skipped
	SkippedManaged   uint64 `json:"skipped_managed"`     // managed memory events: skipped
	SkippedVirtual   uint64 `json:"skipped_virtual"`     // address reservations and mappings (cuMemAddressReserve, cuMemMap, ...): skipped
	SkippedOther     uint64 `json:"skipped_other"`       // events of the layer not replayed, OpFreeRequested, OpOOM
	OOMEvents        uint64 `json:"oom_events"`          // OpOOM events (a framework ran out of memory)
	LiveAtEnd        uint64 `json:"live_at_end"`         // blocks never freed in the trace (freed by replay after the last op)
	LiveBytesAtEnd   uint64 `json:"live_bytes_at_end"`   // their bytes
	PeakLiveBytes    uint64 `json:"peak_live_bytes"`     // maximum of requested bytes live at once
	PeakLiveBlocks   uint64 `json:"peak_live_blocks"`    // maximum number of blocks live at once
	Streams          int    `json:"streams"`             // distinct (process, stream) pairs
	Devices          int    `json:"devices"`             // distinct device ordinals among replayed events
	Processes        int    `json:"processes"`           // distinct process ids among replayed events
	LargestAllocSize uint64 `json:"largest_alloc_bytes"` // largest single request
	RequestedBytes   uint64 `json:"requested_bytes"`     // sum of all requests
	// RecordedCalls and RecordedCallNs are the replayed requests whose trace event has a duration
	// and the sum of those durations: what the program's own allocation calls cost it, device
	// waits inside cudaFree included (0 for framework traces, which record no durations).
	RecordedCalls  uint64 `json:"recorded_calls"`
	RecordedCallNs int64  `json:"recorded_call_ns"`
}

// Trace is the request stream of a trace in compact form, ready to be replayed any number of times.
type Trace struct {
	ops     []op
	slots   int      // size of the live-block table (peak number of blocks live at once)
	streams []uint64 // stream index → recorded stream handle
	// Stats describes the extraction.
	Stats ExtractStats
	// Warnings are non-fatal problems found while extracting, one line each.
	Warnings []string
}

// Ops returns the number of requests (allocations and frees) in the stream.
func (t *Trace) Ops() int { return len(t.ops) }

type addrKey struct {
	pid     uint32
	device  int32
	address uint64
}

type streamKey struct {
	pid    uint32
	stream uint64
}

// extractor builds one op list for one layer.
type extractor struct {
	ops       []op
	live      map[addrKey]uint32 // old address → slot
	sizes     []uint64           // slot → requested size of the live block
	freeSlots []uint32
	streams   map[streamKey]uint32
	handles   []uint64 // stream index → recorded handle
	devices   map[int32]struct{}
	pids      map[uint32]struct{}
	liveBytes uint64
	requests  uint64 // allocation and free requests seen (trace.Event.Request), replayed or not
	stats     ExtractStats
}

func newExtractor(layer string) *extractor {
	return &extractor{
		live:    make(map[addrKey]uint32),
		streams: make(map[streamKey]uint32),
		devices: make(map[int32]struct{}),
		pids:    make(map[uint32]struct{}),
		stats:   ExtractStats{Layer: layer},
	}
}

// Extract reads src to the end and returns its request stream: the framework-layer allocations
// and frees when the trace has any, otherwise the runtime and driver device allocations and frees.
// Device memory includes the physical memory of the virtual-memory API (cuMemCreate/cuMemRelease,
// see trace.Event.Request). Host and managed memory, address reservations and mappings are skipped
// and counted; so are failed calls, frees of
// addresses that are not live, and the framework's OpFreeRequested (its memory is reusable only at
// the OpFree that follows). Errors from src are returned wrapped; the warnings are non-fatal.
func Extract(src Source) (*Trace, error) {
	fw, dev := newExtractor(LayerFramework), newExtractor(LayerDevice)
	var events, host, managed, virtual uint64
	for {
		batch, err := src.Next()
		for i := range batch {
			e := &batch[i]
			events++
			switch {
			case e.Layer == trace.LayerFramework:
				fw.add(e)
			case e.Memory == trace.MemoryHost:
				host++
			case e.Memory == trace.MemoryManaged:
				managed++
			case e.Memory == trace.MemoryVirtual && e.Request() == trace.RequestNone:
				virtual++
			default:
				dev.add(e)
			}
			if synchronizes(e) {
				fw.markSync()
				dev.markSync()
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
	}
	x, other := dev, fw
	if fw.requests > 0 {
		x, other = fw, dev
	}
	t, err := x.finish()
	if err != nil {
		return nil, err
	}
	t.Stats.Events = events
	t.Stats.SkippedHost, t.Stats.SkippedManaged, t.Stats.SkippedVirtual = host, managed, virtual
	t.Stats.SkippedOther += other.stats.Allocs + other.stats.Frees + other.stats.UnknownFrees +
		other.stats.FailedAllocs + other.stats.FailedFrees + other.stats.ZeroSizeAllocs + other.stats.NullFrees +
		other.stats.SkippedOther
	t.Stats.OOMEvents += other.stats.OOMEvents
	t.Warnings = extractWarnings(&t.Stats)
	return t, nil
}

// add appends the op that e asks for, or counts why it is skipped.
func (x *extractor) add(e *trace.Event) {
	switch {
	case e.Request() == trace.RequestAlloc:
		x.requests++
		x.alloc(e)
	case e.Request() == trace.RequestFree:
		x.requests++
		x.free(e)
	case e.Op == trace.OpOOM:
		x.stats.OOMEvents++
		x.stats.SkippedOther++
	default:
		x.stats.SkippedOther++
	}
}

func (x *extractor) alloc(e *trace.Event) {
	switch {
	case !e.OK():
		x.stats.FailedAllocs++
		return
	case e.Size == 0 || e.Address == 0:
		x.stats.ZeroSizeAllocs++
		return
	}
	key := addrKey{e.PID, e.Device, e.Address}
	stream := x.stream(e)
	if slot, ok := x.live[key]; ok {
		x.stats.ImplicitFrees++
		x.release(key, slot, stream)
	}
	slot := x.newSlot(e.Size)
	x.live[key] = slot
	x.ops = append(x.ops, op{size: e.Size, slot: slot, stream: stream})
	x.stats.Allocs++
	x.noteDuration(e)
	x.stats.RequestedBytes += e.Size
	x.stats.LargestAllocSize = max(x.stats.LargestAllocSize, e.Size)
	x.liveBytes += e.Size
	x.stats.PeakLiveBytes = max(x.stats.PeakLiveBytes, x.liveBytes)
	x.stats.PeakLiveBlocks = max(x.stats.PeakLiveBlocks, uint64(len(x.live)))
	x.devices[e.Device] = struct{}{}
	x.pids[e.PID] = struct{}{}
}

func (x *extractor) free(e *trace.Event) {
	switch {
	case !e.OK():
		x.stats.FailedFrees++
		return
	case e.Address == 0:
		x.stats.NullFrees++
		return
	}
	key := addrKey{e.PID, e.Device, e.Address}
	slot, ok := x.live[key]
	if !ok {
		x.stats.UnknownFrees++
		return
	}
	x.release(key, slot, x.stream(e))
	x.stats.Frees++
	x.noteDuration(e)
}

// noteDuration adds the recorded duration of a replayed request, when it has one.
func (x *extractor) noteDuration(e *trace.Event) {
	if e.DurationNs > 0 {
		x.stats.RecordedCalls++
		x.stats.RecordedCallNs += e.DurationNs
	}
}

// markSync records that the program synchronized after the last op so far.
func (x *extractor) markSync() {
	if n := len(x.ops); n > 0 {
		x.ops[n-1].stream |= syncBit
	}
}

// release appends the free of the block in slot and makes the slot reusable.
func (x *extractor) release(key addrKey, slot, stream uint32) {
	x.ops = append(x.ops, op{slot: slot, stream: stream})
	x.liveBytes -= x.sizes[slot]
	delete(x.live, key)
	x.freeSlots = append(x.freeSlots, slot)
}

func (x *extractor) newSlot(size uint64) uint32 {
	if n := len(x.freeSlots); n > 0 {
		slot := x.freeSlots[n-1]
		x.freeSlots = x.freeSlots[:n-1]
		x.sizes[slot] = size
		return slot
	}
	x.sizes = append(x.sizes, size)
	return uint32(len(x.sizes) - 1)
}

func (x *extractor) stream(e *trace.Event) uint32 {
	key := streamKey{e.PID, e.Stream}
	if s, ok := x.streams[key]; ok {
		return s
	}
	s := uint32(len(x.streams))
	x.streams[key] = s
	x.handles = append(x.handles, e.Stream)
	return s
}

func (x *extractor) finish() (*Trace, error) {
	if len(x.sizes) > math.MaxUint32 || len(x.streams) >= syncBit {
		return nil, fmt.Errorf("trace has %d live blocks at once and %d streams; at most %d and %d can be replayed",
			len(x.sizes), len(x.streams), uint32(math.MaxUint32), syncBit-1)
	}
	x.stats.LiveAtEnd = uint64(len(x.live))
	x.stats.LiveBytesAtEnd = x.liveBytes
	x.stats.Streams = len(x.streams)
	x.stats.Devices = len(x.devices)
	x.stats.Processes = len(x.pids)
	return &Trace{ops: x.ops, slots: len(x.sizes), streams: x.handles, Stats: x.stats}, nil
}

func extractWarnings(s *ExtractStats) []string {
	var w []string
	add := func(n uint64, format string) {
		if n > 0 {
			w = append(w, fmt.Sprintf(format, n))
		}
	}
	add(s.UnknownFrees, "%d frees of addresses that were not live: reported, not replayed")
	add(s.FailedAllocs, "%d failed allocations in the trace: skipped")
	add(s.FailedFrees, "%d failed frees in the trace: skipped")
	add(s.ZeroSizeAllocs, "%d allocations of 0 bytes or at address 0: skipped")
	add(s.NullFrees, "%d frees of address 0: skipped")
	add(s.ImplicitFrees, "%d allocations at an address that was still live: the missing free was inserted")
	add(s.SkippedHost, "%d host (page-locked) memory events: skipped")
	add(s.SkippedManaged, "%d managed memory events: skipped")
	add(s.SkippedVirtual, "%d virtual address events (cuMemAddressReserve, cuMemMap and their inverses): skipped")
	add(s.OOMEvents, "%d out-of-memory events recorded by the framework")
	if s.Devices > 1 {
		w = append(w, fmt.Sprintf("trace allocates on %d devices: all replayed on one device", s.Devices))
	}
	if s.Processes > 1 {
		w = append(w, fmt.Sprintf("trace has %d processes: replayed as one request stream in seq order", s.Processes))
	}
	return w
}
