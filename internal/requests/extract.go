package requests

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/allocscope/allocscope/internal/slots"
	"github.com/allocscope/allocscope/trace"
)

// Stats counts what an Extractor found in a trace and what it left out.
type Stats struct {
	Events           uint64 `json:"events"`              // events read
	Layer            Layer  `json:"layer"`               // the layer whose requests these are
	Allocs           uint64 `json:"allocs"`              // allocations in the op list
	Frees            uint64 `json:"frees"`               // frees in the op list
	UnknownFrees     uint64 `json:"unknown_frees"`       // frees of an address that was not live: reported, not replayed
	FailedAllocs     uint64 `json:"failed_allocs"`       // recorded allocations that failed: skipped
	FailedFrees      uint64 `json:"failed_frees"`        // recorded frees that failed: skipped
	ZeroSizeAllocs   uint64 `json:"zero_size_allocs"`    // allocations of 0 bytes or at address 0: skipped
	OversizeAllocs   uint64 `json:"oversize_allocs"`     // allocations above MaxSize (a corrupt trace): skipped
	NullFrees        uint64 `json:"null_frees"`          // frees of address 0 (no-ops): skipped
	ImplicitFrees    uint64 `json:"implicit_frees"`      // allocations at a still-live address: a free was inserted before them
	SkippedHost      uint64 `json:"skipped_host"`        // page-locked host memory events: skipped
	SkippedManaged   uint64 `json:"skipped_managed"`     // managed memory events: skipped
	SkippedVirtual   uint64 `json:"skipped_virtual"`     // address reservations and mappings (cuMemAddressReserve, cuMemMap, ...): skipped
	SkippedOther     uint64 `json:"skipped_other"`       // events of the other layer, OpFreeRequested, OpOOM
	OOMEvents        uint64 `json:"oom_events"`          // OpOOM events (a framework ran out of memory)
	LiveAtEnd        uint64 `json:"live_at_end"`         // blocks never freed in the trace
	LiveBytesAtEnd   uint64 `json:"live_bytes_at_end"`   // their bytes
	PeakLiveBytes    uint64 `json:"peak_live_bytes"`     // maximum of requested bytes live at once
	PeakLiveBlocks   uint64 `json:"peak_live_blocks"`    // maximum number of blocks live at once
	Streams          int    `json:"streams"`             // distinct (process, stream) pairs
	Devices          int    `json:"devices"`             // distinct device ordinals among the requests
	Processes        int    `json:"processes"`           // distinct process ids among the requests
	LargestAllocSize uint64 `json:"largest_alloc_bytes"` // largest single request
	RequestedBytes   uint64 `json:"requested_bytes"`     // sum of all requests
	// RecordedCalls and RecordedCallNs are the requests whose trace event has a duration and the
	// sum of those durations: what the program's own allocation calls cost it, device waits inside
	// cudaFree included (0 for framework traces, which record no durations).
	RecordedCalls  uint64 `json:"recorded_calls"`
	RecordedCallNs int64  `json:"recorded_call_ns"`
}

type addrKey struct {
	pid     uint32
	device  int32
	address uint64
}

type streamKey struct {
	pid    uint32
	stream uint64
}

// Extractor turns the events of a trace, batch by batch, into the ops of one layer's requests. It
// gives each live block (process, device, address) a slot; an allocation at the address of a block
// whose free was never recorded frees that block first (an inserted free op).
type Extractor struct {
	layer       Layer
	live        map[addrKey]uint32          // address → slot
	sizes       slots.Table[uint64, uint32] // slot → requested size of the live block
	streams     map[streamKey]uint32
	handles     []uint64 // stream index → recorded handle
	devices     map[int32]struct{}
	pids        map[uint32]struct{}
	last        lastSeen // of the last request: spares most map lookups
	liveBytes   uint64
	layerChoice LayerChoice // of every event seen, of either layer
	stats       Stats
}

// NewExtractor returns an Extractor of layer's requests.
func NewExtractor(layer Layer) *Extractor {
	return &Extractor{layer: layer, live: make(map[addrKey]uint32), streams: make(map[streamKey]uint32),
		devices: make(map[int32]struct{}), pids: make(map[uint32]struct{}), stats: Stats{Layer: layer}}
}

// Append appends to ops the ops of batch: a request of the extractor's layer makes one (two for an
// allocation at a live address), and an event that synchronizes with the device marks the last op
// of ops with its sync point, or appends a sync-only op when ops is empty (the first ops of a trace,
// or of a batch handed out alone).
func (x *Extractor) Append(batch []trace.Event, ops []Op) []Op {
	for i := range batch {
		ops = x.appendEvent(&batch[i], ops)
	}
	return ops
}

// Site is where a request came from: the process and the callsite (trace.Event.Callsite) of the
// event that made it.
type Site struct {
	PID      uint32
	Callsite uint64
}

// AppendSites is Append that also appends to sites, for each op it appends, the Site of the event
// that made it (an inserted free and a sync-only op get their event's Site too), so that sites
// stays parallel to ops when it was on entry.
func (x *Extractor) AppendSites(batch []trace.Event, ops []Op, sites []Site) ([]Op, []Site) {
	for i := range batch {
		e := &batch[i]
		n := len(ops)
		ops = x.appendEvent(e, ops)
		for range len(ops) - n {
			sites = append(sites, Site{PID: e.PID, Callsite: e.Callsite})
		}
	}
	return ops, sites
}

// appendEvent appends the ops of e and marks its sync point.
func (x *Extractor) appendEvent(e *trace.Event, ops []Op) []Op {
	return x.appendRequest(e, Synchronizes(e), ops)
}

// appendRequest appends the ops of e and marks its sync point when syncs (Synchronizes(e)).
func (x *Extractor) appendRequest(e *trace.Event, syncs bool, ops []Op) []Op {
	ops = x.add(e, ops)
	if syncs {
		if len(ops) > 0 {
			ops[len(ops)-1].stream |= syncBit
		} else {
			ops = append(ops, Op{Slot: NoSlot, stream: syncBit})
		}
	}
	return ops
}

// add counts e and appends the ops it asks for.
func (x *Extractor) add(e *trace.Event, ops []Op) []Op {
	x.stats.Events++
	x.layerChoice.Add(e)
	own := LayerOf(e) == x.layer
	switch {
	case e.Layer == trace.LayerFramework:
	case e.Memory == trace.MemoryHost:
		x.stats.SkippedHost++
		return ops
	case e.Memory == trace.MemoryManaged:
		x.stats.SkippedManaged++
		return ops
	case e.Memory == trace.MemoryVirtual && e.Request() == trace.RequestNone:
		x.stats.SkippedVirtual++
		return ops
	}
	switch req := e.Request(); {
	case e.Op == trace.OpOOM:
		x.stats.OOMEvents++
		x.stats.SkippedOther++
	case !own || req == trace.RequestNone:
		x.stats.SkippedOther++
	case req == trace.RequestAlloc:
		ops = x.alloc(e, ops)
	default:
		ops = x.free(e, ops)
	}
	return ops
}

func (x *Extractor) alloc(e *trace.Event, ops []Op) []Op {
	switch {
	case !e.OK():
		x.stats.FailedAllocs++
		return ops
	case e.Size == 0 || e.Address == 0:
		x.stats.ZeroSizeAllocs++
		return ops
	case e.Size > MaxSize:
		x.stats.OversizeAllocs++
		return ops
	}
	key := addrKey{e.PID, e.Device, e.Address}
	stream := x.stream(e)
	if slot, ok := x.live[key]; ok {
		x.stats.ImplicitFrees++
		ops = x.release(key, slot, stream, ops)
	}
	slot := x.sizes.Put(e.Size)
	x.live[key] = slot
	ops = append(ops, Op{Size: e.Size, Slot: slot, stream: stream})
	x.stats.Allocs++
	x.noteDuration(e)
	x.stats.RequestedBytes += e.Size
	x.stats.LargestAllocSize = max(x.stats.LargestAllocSize, e.Size)
	x.liveBytes += e.Size
	x.stats.PeakLiveBytes = max(x.stats.PeakLiveBytes, x.liveBytes)
	x.stats.PeakLiveBlocks = max(x.stats.PeakLiveBlocks, uint64(len(x.live)))
	x.note(e)
	return ops
}

func (x *Extractor) free(e *trace.Event, ops []Op) []Op {
	switch {
	case !e.OK():
		x.stats.FailedFrees++
		return ops
	case e.Address == 0:
		x.stats.NullFrees++
		return ops
	}
	key := addrKey{e.PID, e.Device, e.Address}
	slot, ok := x.live[key]
	if !ok {
		x.stats.UnknownFrees++
		return ops
	}
	x.stats.Frees++
	x.noteDuration(e)
	return x.release(key, slot, x.stream(e), ops)
}

// noteDuration adds the recorded duration of a request, when it has one.
func (x *Extractor) noteDuration(e *trace.Event) {
	if e.DurationNs > 0 {
		x.stats.RecordedCalls++
		x.stats.RecordedCallNs += e.DurationNs
	}
}

// release appends the free of the block in slot and makes the slot reusable.
func (x *Extractor) release(key addrKey, slot, stream uint32, ops []Op) []Op {
	x.liveBytes -= *x.sizes.At(slot)
	delete(x.live, key)
	x.sizes.Release(slot)
	return append(ops, Op{Slot: slot, stream: stream})
}

func (x *Extractor) stream(e *trace.Event) uint32 {
	key := streamKey{e.PID, e.Stream}
	if len(x.streams) > 0 && key == x.last.stream {
		return x.last.index
	}
	s, ok := x.streams[key]
	if !ok {
		s = uint32(len(x.streams))
		x.streams[key] = s
		x.handles = append(x.handles, e.Stream)
	}
	x.last.stream, x.last.index = key, s
	return s
}

// lastSeen is the stream, device and process of the last request, known to be in the Extractor's
// maps once they are not empty: consecutive requests mostly share them.
type lastSeen struct {
	stream streamKey
	index  uint32 // of stream
	device int32
	pid    uint32
}

// note adds the device and the process of an allocation to their sets.
func (x *Extractor) note(e *trace.Event) {
	if len(x.devices) == 0 || e.Device != x.last.device {
		x.devices[e.Device] = struct{}{}
		x.last.device = e.Device
	}
	if len(x.pids) == 0 || e.PID != x.last.pid {
		x.pids[e.PID] = struct{}{}
		x.last.pid = e.PID
	}
}

// Handles returns the recorded stream handle of each stream index so far. Appending later batches
// does not change the elements of a slice returned earlier.
func (x *Extractor) Handles() []uint64 { return x.handles }

// Slots returns the number of slots handed out so far: the most blocks live at once.
func (x *Extractor) Slots() int { return x.sizes.Len() }

// Stats returns the counts so far.
func (x *Extractor) Stats() Stats {
	s := x.stats
	s.LiveAtEnd = uint64(len(x.live))
	s.LiveBytesAtEnd = x.liveBytes
	s.Streams = len(x.streams)
	s.Devices = len(x.devices)
	s.Processes = len(x.pids)
	return s
}

// Trace is the request stream of a whole trace in compact form, ready to be replayed any number of
// times.
type Trace struct {
	Ops     []Op
	Slots   int      // size of the live-block table (the most blocks live at once)
	Streams []uint64 // stream index → recorded stream handle
	// Stats describes the extraction.
	Stats Stats
	// Warnings are non-fatal problems found while extracting, one line each.
	Warnings []string
}

// Extract reads src to the end and returns its request stream (see the package's rule). Errors from
// src are returned wrapped; the warnings are non-fatal.
func Extract(src Source) (*Trace, error) { return scan(src, true) }

// ExtractFile opens the trace at path (an Arrow trace or an importable file, see trace.Open) and
// returns its request stream.
func ExtractFile(path string) (*Trace, error) {
	r, err := trace.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return Extract(r)
}

// Count reads src to the end and returns what Extract's Stats would say, keeping no ops: its memory
// does not grow with the trace.
func Count(src Source) (Stats, error) {
	t, err := scan(src, false)
	if err != nil {
		return Stats{}, err
	}
	return t.Stats, nil
}

// scan extracts both layers' requests from src, by column when src is a ColumnSource, and keeps the
// chosen layer's; without keep, every batch's ops are dropped once counted and the Trace has none.
func scan(src Source, keep bool) (*Trace, error) {
	fw, dev := NewExtractor(Framework), NewExtractor(Device)
	var fwOps, devOps []Op
	for {
		batch, err := NextBatch(src)
		if !keep {
			fwOps, devOps = fwOps[:0], devOps[:0]
		}
		fwOps = fw.AppendBatch(batch, fwOps)
		devOps = dev.AppendBatch(batch, devOps)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
	}
	x, ops := dev, devOps
	if fw.layerChoice.Layer() == Framework {
		x, ops = fw, fwOps
	}
	if !keep {
		ops = nil
	}
	if err := x.checkReplayable(); err != nil {
		return nil, err
	}
	s := x.Stats()
	return &Trace{Ops: ops, Slots: x.Slots(), Streams: x.handles, Stats: s, Warnings: Warnings(&s)}, nil
}

// checkReplayable returns an error when the ops cannot index the blocks or streams x found.
func (x *Extractor) checkReplayable() error {
	if x.sizes.Len() > math.MaxUint32-1 || len(x.streams) > MaxStreams {
		return fmt.Errorf("trace has %d live blocks at once and %d streams; at most %d and %d can be replayed",
			x.sizes.Len(), len(x.streams), uint32(math.MaxUint32-1), MaxStreams)
	}
	return nil
}

// LayerChoice chooses the layer whose events are a trace's requests: the framework's when the trace
// has an allocation request (trace.Event.Request) of the framework layer, whatever its outcome and size (a failed
// one, or one above MaxSize, counts too), else the device's. The extraction and analyze's statistics
// both choose through it: give it every event of the trace, in any order.
type LayerChoice struct {
	frameworkAllocs uint64
}

// Add counts e toward the choice.
func (c *LayerChoice) Add(e *trace.Event) {
	if e.Layer == trace.LayerFramework && e.Request() == trace.RequestAlloc {
		c.frameworkAllocs++
	}
}

// Layer returns the layer chosen from the events added so far.
func (c *LayerChoice) Layer() Layer {
	if c.frameworkAllocs > 0 {
		return Framework
	}
	return Device
}

// Warnings returns one line for each thing s counts that a user should know.
func Warnings(s *Stats) []string {
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
	add(s.OversizeAllocs, "%d allocations above 256 TiB (a corrupt trace?): skipped")
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
