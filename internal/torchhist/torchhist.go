// Package torchhist rebuilds the segments of PyTorch's CUDA caching allocator from the events of
// its memory history (the framework and segment events trace's snapshot importer writes), as a
// snapshot would have listed them at any point of the history: record keeps them at a recorded
// program's first out-of-memory error (torchsnap.OOM), for analyze to explain it.
package torchhist

import (
	"cmp"
	"maps"
	"slices"

	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/trace"
)

// smallSegmentBytes is the size of the segments of PyTorch's small pool (kSmallBuffer).
const smallSegmentBytes = 2 << 20

// State rebuilds the segments of PyTorch's caching allocator from the events of its memory
// history, applied in order (a snapshot's trace.Reader.Next): torch.segment_alloc and torch.segment_free
// make and drop a segment, torch.segment_map and torch.segment_unmap grow and shrink an expandable
// one, torch.alloc splits a free block, torch.free_requested marks a block pending and torch.free
// frees it, merged with its free neighbours.
type State struct {
	devices map[int32][]torchsnap.Segment // each device's segments, by address
	// Unplaced counts the events that name a segment or block the state does not hold: a history
	// that lost its oldest entries, or one not written by PyTorch's caching allocator.
	Unplaced int
}

// NewState returns the state of an allocator that holds no segment.
func NewState() *State {
	return &State{devices: map[int32][]torchsnap.Segment{}}
}

// SegmentsAtOOM applies events (a PyTorch history's, in order) to a new state up to the first
// torch.oom and returns that event and the segments then, with the state's Unplaced count; oom is
// nil when no event is an out-of-memory error.
func SegmentsAtOOM(events []trace.Event) (oom *trace.Event, segments []torchsnap.Segment, unplaced int) {
	f := NewOOMFinder()
	for i := range events {
		if f.Add(&events[i]); f.OOM != nil {
			return &events[i], f.Segments, f.Unplaced
		}
	}
	return nil, nil, f.state.Unplaced
}

// OOMFinder applies a PyTorch history's events, given in order a batch at a time, to a State
// up to the first out-of-memory error, and keeps the segments then.
type OOMFinder struct {
	state    *State
	OOM      *trace.Event        // a copy of the first torch.oom event; nil before it
	Segments []torchsnap.Segment // the segments when it came
	Unplaced int                 // the state's Unplaced count then
}

// NewOOMFinder returns a finder whose state holds no segment.
func NewOOMFinder() *OOMFinder { return &OOMFinder{state: NewState()} }

// Add applies e, or at the first torch.oom keeps it and the segments; after that it does nothing.
func (f *OOMFinder) Add(e *trace.Event) {
	switch {
	case f.OOM != nil:
	case e.Function == trace.FuncTorchOOM:
		oom := *e
		f.OOM, f.Segments, f.Unplaced = &oom, f.state.Segments(), f.state.Unplaced
	default:
		f.state.Apply(e)
	}
}

// Apply applies one event of the history; events of other functions change nothing.
func (s *State) Apply(e *trace.Event) {
	ok := true
	switch e.Function {
	case trace.FuncTorchSegmentAlloc:
		s.insert(newSegment(e, false))
	case trace.FuncTorchSegmentMap:
		s.mapPages(e)
	case trace.FuncTorchSegmentFree, trace.FuncTorchSegmentUnmap:
		ok = s.cut(e.Device, e.Address, e.Address+e.Size, e.Function == trace.FuncTorchSegmentFree)
	case trace.FuncTorchAlloc:
		ok = s.alloc(e)
	case trace.FuncTorchFreeRequested:
		ok = s.setState(e, torchsnap.StateAllocated, torchsnap.StatePendingFree)
	case trace.FuncTorchFree:
		ok = s.setState(e, "", torchsnap.StateInactive)
	}
	if !ok {
		s.Unplaced++
	}
}

// Segments returns a copy of the segments of every device, by device then address.
func (s *State) Segments() []torchsnap.Segment {
	var out []torchsnap.Segment
	for _, dev := range slices.Sorted(maps.Keys(s.devices)) {
		for _, seg := range s.devices[dev] {
			seg.BlockList = slices.Clone(seg.BlockList)
			out = append(out, seg)
		}
	}
	return out
}

// newSegment is the segment e makes: one free block over its bytes.
func newSegment(e *trace.Event, expandable bool) torchsnap.Segment {
	seg := torchsnap.Segment{Device: e.Device, Address: e.Address, TotalSize: e.Size, Stream: e.Stream,
		Large: e.Size != smallSegmentBytes || expandable, Expandable: expandable}
	seg.BlockList = []torchsnap.Block{{Address: e.Address, Size: e.Size, State: torchsnap.StateInactive}}
	seg.Blocks = 1
	return seg
}

// insert adds seg to its device's segments, in address order.
func (s *State) insert(seg torchsnap.Segment) {
	segs := s.devices[seg.Device]
	i, _ := slices.BinarySearchFunc(segs, seg.Address, func(x torchsnap.Segment, a uint64) int { return cmp.Compare(x.Address, a) })
	s.devices[seg.Device] = slices.Insert(segs, i, seg)
}

// find returns the index of the segment of device dev that holds addr, or -1.
func (s *State) find(dev int32, addr uint64) int {
	segs := s.devices[dev]
	i, found := slices.BinarySearchFunc(segs, addr, func(x torchsnap.Segment, a uint64) int { return cmp.Compare(x.Address, a) })
	if found {
		return i
	}
	if i > 0 && addr < segs[i-1].Address+segs[i-1].TotalSize {
		return i - 1
	}
	return -1
}

// mapPages maps the pages of e into an expandable segment: onto the end of the one of its stream
// that ends at e's address, else as a new one.
func (s *State) mapPages(e *trace.Event) {
	segs := s.devices[e.Device]
	if e.Address > 0 {
		if i := s.find(e.Device, e.Address-1); i >= 0 && segs[i].Expandable && segs[i].Stream == e.Stream &&
			segs[i].Address+segs[i].TotalSize == e.Address {
			seg := &segs[i]
			seg.TotalSize += e.Size
			seg.BlockList = append(seg.BlockList, torchsnap.Block{Address: e.Address, Size: e.Size, State: torchsnap.StateInactive})
			mergeFree(seg, len(seg.BlockList)-1)
			return
		}
	}
	s.insert(newSegment(e, true))
}

// cut takes the bytes [from, to) out of the segment of dev that holds from; whole is true for a
// segment_free, which names the segment's start and drops all of it. The bytes before and after
// the range stay as segments. false when no segment holds from.
func (s *State) cut(dev int32, from, to uint64, whole bool) bool {
	i := s.find(dev, from)
	if i < 0 || (whole && s.devices[dev][i].Address != from) {
		return false
	}
	seg := s.devices[dev][i]
	end := seg.Address + seg.TotalSize
	if whole {
		to = end
	}
	s.devices[dev] = slices.Delete(s.devices[dev], i, i+1)
	if seg.Address < from {
		s.insert(clipSegment(seg, seg.Address, from))
	}
	if to < end {
		s.insert(clipSegment(seg, to, end))
	}
	return true
}

// clipSegment is the part [from, to) of seg, with the parts of its blocks that lie there.
func clipSegment(seg torchsnap.Segment, from, to uint64) torchsnap.Segment {
	part := seg
	part.Address, part.TotalSize, part.BlockList, part.AllocatedSize, part.ActiveSize = from, to-from, nil, 0, 0
	for _, b := range seg.BlockList {
		lo, hi := max(b.Address, from), min(b.Address+b.Size, to)
		if lo >= hi {
			continue
		}
		b.Address, b.Size = lo, hi-lo
		part.BlockList = append(part.BlockList, b)
	}
	recount(&part)
	return part
}

// alloc splits the free block that holds e's bytes into the allocated block and the free rest.
func (s *State) alloc(e *trace.Event) bool {
	i := s.find(e.Device, e.Address)
	if i < 0 {
		return false
	}
	seg := &s.devices[e.Device][i]
	j := slices.IndexFunc(seg.BlockList, func(b torchsnap.Block) bool {
		return b.Free() && b.Address <= e.Address && e.Address+e.Size <= b.Address+b.Size
	})
	if j < 0 {
		return false
	}
	free := seg.BlockList[j]
	var parts []torchsnap.Block
	if free.Address < e.Address {
		parts = append(parts, torchsnap.Block{Address: free.Address, Size: e.Address - free.Address, State: torchsnap.StateInactive})
	}
	parts = append(parts, torchsnap.Block{Address: e.Address, Size: e.Size, RequestedSize: e.Size, State: torchsnap.StateAllocated,
		Callsite: e.Callsite})
	if end := e.Address + e.Size; end < free.Address+free.Size {
		parts = append(parts, torchsnap.Block{Address: end, Size: free.Address + free.Size - end, State: torchsnap.StateInactive})
	}
	seg.BlockList = slices.Replace(seg.BlockList, j, j+1, parts...)
	recount(seg)
	return true
}

// setState moves the block at e's address from state from ("": any state in use) to state to; a
// block made free merges with its free neighbours.
func (s *State) setState(e *trace.Event, from, to string) bool {
	i := s.find(e.Device, e.Address)
	if i < 0 {
		return false
	}
	seg := &s.devices[e.Device][i]
	j := slices.IndexFunc(seg.BlockList, func(b torchsnap.Block) bool { return b.Address == e.Address })
	if j < 0 || seg.BlockList[j].Free() || (from != "" && seg.BlockList[j].State != from) {
		return false
	}
	seg.BlockList[j].State = to
	if to == torchsnap.StateInactive {
		seg.BlockList[j].RequestedSize, seg.BlockList[j].Callsite = 0, 0
		mergeFree(seg, j)
	}
	recount(seg)
	return true
}

// mergeFree merges the free block j of seg with the free blocks beside it.
func mergeFree(seg *torchsnap.Segment, j int) {
	blocks := seg.BlockList
	if j+1 < len(blocks) && blocks[j+1].Free() {
		blocks[j].Size += blocks[j+1].Size
		blocks = slices.Delete(blocks, j+1, j+2)
	}
	if j > 0 && blocks[j-1].Free() {
		blocks[j-1].Size += blocks[j].Size
		blocks = slices.Delete(blocks, j, j+1)
	}
	seg.BlockList = blocks
	recount(seg)
}

// recount sets seg's block count and allocated, active and requested bytes from its blocks.
func recount(seg *torchsnap.Segment) {
	seg.Blocks, seg.AllocatedSize, seg.ActiveSize, seg.RequestedSize = len(seg.BlockList), 0, 0, 0
	for _, b := range seg.BlockList {
		switch b.State {
		case torchsnap.StateAllocated:
			seg.AllocatedSize += b.Size
			seg.RequestedSize += b.RequestedSize
			seg.ActiveSize += b.Size
		case torchsnap.StatePendingFree:
			seg.ActiveSize += b.Size
		}
	}
}
