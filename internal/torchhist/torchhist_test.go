package torchhist

import (
	"reflect"
	"testing"

	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/trace"
)

// torchEvent is one history event on device dev, stream 0.
func torchEvent(fn string, dev int32, addr, size uint64) trace.Event {
	return trace.Event{Function: fn, Device: dev, Address: addr, Size: size}
}

// onStream puts e on stream s.
func onStream(e trace.Event, s uint64) trace.Event {
	e.Stream = s
	return e
}

// A hand-made history: a 20 MiB segment on stream 0 split by three blocks, two of them freed (the
// first merging with the free start, the middle one awaiting its free), a 2 MiB segment on stream 7
// that a block fills and frees, a third segment made and released, an expandable segment mapped in
// two pages, whose second page is unmapped, and a segment on device 1; then the out-of-memory
// error, after which nothing counts. The rebuilt segments are PyTorch's as a snapshot lists them.
func TestSegmentsAtOOM(t *testing.T) {
	const a, b, c, x = 0x10000000, 0x20000000, 0x30000000, 0x40000000
	events := []trace.Event{
		torchEvent(trace.FuncTorchSegmentAlloc, 0, a, 20<<20),
		onStream(torchEvent(trace.FuncTorchSegmentAlloc, 0, b, 2<<20), 7),
		torchEvent(trace.FuncTorchAlloc, 0, a, 4<<20),
		{Function: trace.FuncTorchAlloc, Address: a + 4<<20, Size: 6 << 20, Callsite: 0xc1},
		{Function: trace.FuncTorchAlloc, Address: a + 10<<20, Size: 2 << 20, Callsite: 0xc2},
		onStream(torchEvent(trace.FuncTorchAlloc, 0, b, 2<<20), 7),
		torchEvent(trace.FuncTorchFreeRequested, 0, a, 4<<20),
		torchEvent(trace.FuncTorchFree, 0, a, 4<<20),
		torchEvent(trace.FuncTorchFreeRequested, 0, a+10<<20, 2<<20),
		onStream(torchEvent(trace.FuncTorchFree, 0, b, 2<<20), 7),
		torchEvent(trace.FuncTorchSegmentAlloc, 0, c, 2<<20),
		torchEvent(trace.FuncTorchSegmentFree, 0, c, 2<<20),
		onStream(torchEvent(trace.FuncTorchSegmentMap, 0, x, 2<<20), 7),
		onStream(torchEvent(trace.FuncTorchSegmentMap, 0, x+2<<20, 2<<20), 7),
		onStream(torchEvent(trace.FuncTorchAlloc, 0, x, 1<<20), 7),
		onStream(torchEvent(trace.FuncTorchSegmentUnmap, 0, x+2<<20, 2<<20), 7),
		torchEvent(trace.FuncTorchSegmentAlloc, 1, a, 2<<20),
		{Function: trace.FuncTorchOOM, Device: 0, Address: 1 << 20, Size: 30 << 20, Op: trace.OpOOM},
		torchEvent(trace.FuncTorchSegmentFree, 0, a, 20<<20),
	}
	oom, segs, unplaced := SegmentsAtOOM(events)
	if oom != &events[17] || unplaced != 0 {
		t.Errorf("oom %+v, unplaced %d; want the 18th event, 0", oom, unplaced)
	}
	want := []torchsnap.Segment{
		{Device: 0, Address: a, TotalSize: 20 << 20, AllocatedSize: 6 << 20, ActiveSize: 8 << 20, RequestedSize: 6 << 20,
			Large: true, Blocks: 4, BlockList: []torchsnap.Block{
				{Address: a, Size: 4 << 20, State: "inactive"},
				{Address: a + 4<<20, Size: 6 << 20, RequestedSize: 6 << 20, State: "active_allocated", Callsite: 0xc1},
				{Address: a + 10<<20, Size: 2 << 20, RequestedSize: 2 << 20, State: "active_pending_free", Callsite: 0xc2},
				{Address: a + 12<<20, Size: 8 << 20, State: "inactive"}}},
		{Device: 0, Address: b, TotalSize: 2 << 20, Stream: 7, Blocks: 1,
			BlockList: []torchsnap.Block{{Address: b, Size: 2 << 20, State: "inactive"}}},
		{Device: 0, Address: x, TotalSize: 2 << 20, AllocatedSize: 1 << 20, ActiveSize: 1 << 20, RequestedSize: 1 << 20,
			Stream: 7, Large: true, Expandable: true, Blocks: 2, BlockList: []torchsnap.Block{
				{Address: x, Size: 1 << 20, RequestedSize: 1 << 20, State: "active_allocated"},
				{Address: x + 1<<20, Size: 1 << 20, State: "inactive"}}},
		{Device: 1, Address: a, TotalSize: 2 << 20, Blocks: 1,
			BlockList: []torchsnap.Block{{Address: a, Size: 2 << 20, State: "inactive"}}},
	}
	if !reflect.DeepEqual(segs, want) {
		t.Errorf("segments\n%+v\nwant\n%+v", segs, want)
	}
}

// Entries that name a segment or block the state never made (a history that lost its oldest
// entries) are counted and change nothing; a history without an error rebuilds nothing.
func TestStateUnplaced(t *testing.T) {
	s := NewState()
	for _, e := range []trace.Event{
		torchEvent(trace.FuncTorchAlloc, 0, 0x1000, 512),               // no segment
		torchEvent(trace.FuncTorchFree, 0, 0x1000, 512),                // no segment
		torchEvent(trace.FuncTorchSegmentFree, 0, 0x1000, 2<<20),       // no segment
		torchEvent(trace.FuncTorchSegmentAlloc, 0, 0x100000, 2<<20),    // made
		torchEvent(trace.FuncTorchFree, 0, 0x100000, 512),              // a free block: not in use
		torchEvent(trace.FuncTorchFreeRequested, 0, 0x100200, 512),     // no block starts there
		torchEvent(trace.FuncTorchSegmentFree, 0, 0x100200, 2<<20),     // not the segment's start
		torchEvent(trace.FuncTorchAlloc, 0, 0x100000, 4<<20),           // larger than any free block
		{Function: trace.FuncCupyMalloc, Address: 0x100000, Size: 512}, // another framework's: ignored
	} {
		s.Apply(&e)
	}
	want := []torchsnap.Segment{{Address: 0x100000, TotalSize: 2 << 20, Blocks: 1,
		BlockList: []torchsnap.Block{{Address: 0x100000, Size: 2 << 20, State: "inactive"}}}}
	if segs := s.Segments(); s.Unplaced != 7 || !reflect.DeepEqual(segs, want) {
		t.Errorf("unplaced %d, segments %+v; want 7, %+v", s.Unplaced, segs, want)
	}
	if oom, segs, unplaced := SegmentsAtOOM([]trace.Event{torchEvent(trace.FuncTorchSegmentAlloc, 0, 0x100000, 2<<20)}); oom != nil ||
		segs != nil || unplaced != 0 {
		t.Errorf("without an error: %+v, %+v, %d", oom, segs, unplaced)
	}
}
