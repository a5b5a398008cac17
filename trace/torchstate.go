package trace

import (
	"cmp"
	"maps"
	"slices"
)

// Block states of SnapshotBlock.State, as PyTorch's snapshots name them.
const (
	blockAllocated   = "active_allocated"
	blockPendingFree = "active_pending_free"
	blockInactive    = "inactive"
)

// smallSegmentBytes is the size of the segments of PyTorch's small pool (kSmallBuffer).
const smallSegmentBytes = 2 << 20

// TorchOOM is PyTorch's caching allocator as its first out-of-memory error left it in one
// process, rebuilt from the process's memory history (TorchSegmentsAtOOM): what record keeps of a
// recorded out-of-memory error (FrameworkCapture.OOM), so that analyze explains it as it explains
// a snapshot's from the snapshot's segments.
type TorchOOM struct {
	Device          int32  `json:"device"`            // the failed request's device
	RequestedBytes  uint64 `json:"requested_bytes"`   // what it asked for
	DeviceFreeBytes uint64 `json:"device_free_bytes"` // what CUDA still had free on the device
	// Segments are the segments of every device at the failure, by device then address, with
	// their blocks.
	Segments []SnapshotSegment `json:"segments"`
	// Callsites names the blocks' stacks: a block's Callsite i > 0 is Callsites[i-1], 0 none.
	Callsites []string `json:"callsites,omitempty"`
}

// TorchState rebuilds the segments of PyTorch's caching allocator from the events of its memory
// history, applied in order (a snapshot's Reader.Next): torch.segment_alloc and torch.segment_free
// make and drop a segment, torch.segment_map and torch.segment_unmap grow and shrink an expandable
// one, torch.alloc splits a free block, torch.free_requested marks a block pending and torch.free
// frees it, merged with its free neighbours.
type TorchState struct {
	devices map[int32][]SnapshotSegment // each device's segments, by address
	// Unplaced counts the events that name a segment or block the state does not hold: a history
	// that lost its oldest entries, or one not written by PyTorch's caching allocator.
	Unplaced int
}

// NewTorchState returns the state of an allocator that holds no segment.
func NewTorchState() *TorchState {
	return &TorchState{devices: map[int32][]SnapshotSegment{}}
}

// TorchSegmentsAtOOM applies events (a PyTorch history's, in order) to a new state up to the first
// torch.oom and returns that event and the segments then, with the state's Unplaced count; oom is
// nil when no event is an out-of-memory error.
func TorchSegmentsAtOOM(events []Event) (oom *Event, segments []SnapshotSegment, unplaced int) {
	f := NewTorchOOMFinder()
	for i := range events {
		if f.Add(&events[i]); f.OOM != nil {
			return &events[i], f.Segments, f.Unplaced
		}
	}
	return nil, nil, f.state.Unplaced
}

// TorchOOMFinder applies a PyTorch history's events, given in order a batch at a time, to a
// TorchState up to the first out-of-memory error, and keeps the segments then.
type TorchOOMFinder struct {
	state    *TorchState
	OOM      *Event            // a copy of the first torch.oom event; nil before it
	Segments []SnapshotSegment // the segments when it came
	Unplaced int               // the state's Unplaced count then
}

// NewTorchOOMFinder returns a finder whose state holds no segment.
func NewTorchOOMFinder() *TorchOOMFinder { return &TorchOOMFinder{state: NewTorchState()} }

// Add applies e, or at the first torch.oom keeps it and the segments; after that it does nothing.
func (f *TorchOOMFinder) Add(e *Event) {
	switch {
	case f.OOM != nil:
	case e.Function == FuncTorchOOM:
		oom := *e
		f.OOM, f.Segments, f.Unplaced = &oom, f.state.Segments(), f.state.Unplaced
	default:
		f.state.Apply(e)
	}
}

// Apply applies one event of the history; events of other functions change nothing.
func (s *TorchState) Apply(e *Event) {
	ok := true
	switch e.Function {
	case FuncTorchSegmentAlloc:
		s.insert(newSegment(e, false))
	case FuncTorchSegmentMap:
		s.mapPages(e)
	case FuncTorchSegmentFree, FuncTorchSegmentUnmap:
		ok = s.cut(e.Device, e.Address, e.Address+e.Size, e.Function == FuncTorchSegmentFree)
	case FuncTorchAlloc:
		ok = s.alloc(e)
	case FuncTorchFreeRequested:
		ok = s.setState(e, blockAllocated, blockPendingFree)
	case FuncTorchFree:
		ok = s.setState(e, "", blockInactive)
	}
	if !ok {
		s.Unplaced++
	}
}

// Segments returns a copy of the segments of every device, by device then address.
func (s *TorchState) Segments() []SnapshotSegment {
	var out []SnapshotSegment
	for _, dev := range slices.Sorted(maps.Keys(s.devices)) {
		for _, seg := range s.devices[dev] {
			seg.BlockList = slices.Clone(seg.BlockList)
			out = append(out, seg)
		}
	}
	return out
}

// newSegment is the segment e makes: one free block over its bytes.
func newSegment(e *Event, expandable bool) SnapshotSegment {
	seg := SnapshotSegment{Device: e.Device, Address: e.Address, TotalSize: e.Size, Stream: e.Stream,
		Large: e.Size != smallSegmentBytes || expandable, Expandable: expandable}
	seg.BlockList = []SnapshotBlock{{Address: e.Address, Size: e.Size, State: blockInactive}}
	seg.Blocks = 1
	return seg
}

// insert adds seg to its device's segments, in address order.
func (s *TorchState) insert(seg SnapshotSegment) {
	segs := s.devices[seg.Device]
	i, _ := slices.BinarySearchFunc(segs, seg.Address, func(x SnapshotSegment, a uint64) int { return cmp.Compare(x.Address, a) })
	s.devices[seg.Device] = slices.Insert(segs, i, seg)
}

// find returns the index of the segment of device dev that holds addr, or -1.
func (s *TorchState) find(dev int32, addr uint64) int {
	segs := s.devices[dev]
	i, found := slices.BinarySearchFunc(segs, addr, func(x SnapshotSegment, a uint64) int { return cmp.Compare(x.Address, a) })
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
func (s *TorchState) mapPages(e *Event) {
	segs := s.devices[e.Device]
	if e.Address > 0 {
		if i := s.find(e.Device, e.Address-1); i >= 0 && segs[i].Expandable && segs[i].Stream == e.Stream &&
			segs[i].Address+segs[i].TotalSize == e.Address {
			seg := &segs[i]
			seg.TotalSize += e.Size
			seg.BlockList = append(seg.BlockList, SnapshotBlock{Address: e.Address, Size: e.Size, State: blockInactive})
			mergeFree(seg, len(seg.BlockList)-1)
			return
		}
	}
	s.insert(newSegment(e, true))
}

// cut takes the bytes [from, to) out of the segment of dev that holds from; whole is true for a
// segment_free, which names the segment's start and drops all of it. The bytes before and after
// the range stay as segments. false when no segment holds from.
func (s *TorchState) cut(dev int32, from, to uint64, whole bool) bool {
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
func clipSegment(seg SnapshotSegment, from, to uint64) SnapshotSegment {
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
func (s *TorchState) alloc(e *Event) bool {
	i := s.find(e.Device, e.Address)
	if i < 0 {
		return false
	}
	seg := &s.devices[e.Device][i]
	j := slices.IndexFunc(seg.BlockList, func(b SnapshotBlock) bool {
		return b.Free() && b.Address <= e.Address && e.Address+e.Size <= b.Address+b.Size
	})
	if j < 0 {
		return false
	}
	free := seg.BlockList[j]
	var parts []SnapshotBlock
	if free.Address < e.Address {
		parts = append(parts, SnapshotBlock{Address: free.Address, Size: e.Address - free.Address, State: blockInactive})
	}
	parts = append(parts, SnapshotBlock{Address: e.Address, Size: e.Size, RequestedSize: e.Size, State: blockAllocated,
		Callsite: e.Callsite})
	if end := e.Address + e.Size; end < free.Address+free.Size {
		parts = append(parts, SnapshotBlock{Address: end, Size: free.Address + free.Size - end, State: blockInactive})
	}
	seg.BlockList = slices.Replace(seg.BlockList, j, j+1, parts...)
	recount(seg)
	return true
}

// setState moves the block at e's address from state from ("": any state in use) to state to; a
// block made free merges with its free neighbours.
func (s *TorchState) setState(e *Event, from, to string) bool {
	i := s.find(e.Device, e.Address)
	if i < 0 {
		return false
	}
	seg := &s.devices[e.Device][i]
	j := slices.IndexFunc(seg.BlockList, func(b SnapshotBlock) bool { return b.Address == e.Address })
	if j < 0 || seg.BlockList[j].Free() || (from != "" && seg.BlockList[j].State != from) {
		return false
	}
	seg.BlockList[j].State = to
	if to == blockInactive {
		seg.BlockList[j].RequestedSize, seg.BlockList[j].Callsite = 0, 0
		mergeFree(seg, j)
	}
	recount(seg)
	return true
}

// mergeFree merges the free block j of seg with the free blocks beside it.
func mergeFree(seg *SnapshotSegment, j int) {
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
func recount(seg *SnapshotSegment) {
	seg.Blocks, seg.AllocatedSize, seg.ActiveSize, seg.RequestedSize = len(seg.BlockList), 0, 0, 0
	for _, b := range seg.BlockList {
		switch b.State {
		case blockAllocated:
			seg.AllocatedSize += b.Size
			seg.RequestedSize += b.RequestedSize
			seg.ActiveSize += b.Size
		case blockPendingFree:
			seg.ActiveSize += b.Size
		}
	}
}
