package pool

// span is a free range [addr, addr+size) inside one segment. Every policy that splits and
// coalesces (the best-fit arena, the PyTorch model, the stream-ordered pool, the simulated
// address space) keeps its free ranges as spans in a freeIndex: one implementation of best fit.
type span struct {
	addr, size uint64
	seg        uint64 // identifies the segment (Upstream region) the span lies in; spans of different segments never merge
	tagged     bool   // true when the span belongs to stream's own free list; false when any stream may use it
	stream     uint64 // the owning stream when tagged
}

func (s span) end() uint64 { return s.addr + s.size }

// sameList reports whether s and o may coalesce: same segment, same owner.
func (s span) sameList(o span) bool {
	return s.seg == o.seg && s.tagged == o.tagged && s.stream == o.stream
}

// The orders a freeIndex keeps its spans in.
const (
	// bySizeOrder orders spans by owner, then size, then address: a lower bound on (owner, size)
	// is a best fit, ties going to the lowest address.
	bySizeOrder = true
	// byAddrOrder orders spans by owner, then address (PyTorch's unmapped-block set).
	byAddrOrder = false
)

// freeIndex holds free spans in an ordered tree (O(log n) best fit) and in two hash maps keyed by
// start and end address (O(1) neighbour lookup for coalescing).
type freeIndex struct {
	tree    *spanTree
	byStart map[uint64]span
	byEnd   map[uint64]uint64 // end address → start address
	bytes   uint64            // total free bytes
}

func newFreeIndex(order bool) *freeIndex {
	return &freeIndex{
		tree:    newSpanTree(order),
		byStart: make(map[uint64]span),
		byEnd:   make(map[uint64]uint64),
	}
}

// add inserts s as it is, without coalescing.
func (f *freeIndex) add(s span) {
	f.tree.insert(s)
	f.byStart[s.addr] = s
	f.byEnd[s.end()] = s.addr
	f.bytes += s.size
}

// remove deletes s, which must be in the index.
func (f *freeIndex) remove(s span) {
	f.tree.delete(s)
	delete(f.byStart, s.addr)
	delete(f.byEnd, s.end())
	f.bytes -= s.size
}

// insert adds s, merging it with the free spans right before and after it that share its
// segment and owner, and returns the merged span.
func (f *freeIndex) insert(s span) span {
	if prev, ok := f.endingAt(s.addr); ok && prev.sameList(s) {
		f.remove(prev)
		s.addr, s.size = prev.addr, prev.size+s.size
	}
	if next, ok := f.byStart[s.end()]; ok && next.sameList(s) {
		f.remove(next)
		s.size += next.size
	}
	f.add(s)
	return s
}

// startingAt returns the free span that starts at addr.
func (f *freeIndex) startingAt(addr uint64) (span, bool) {
	s, ok := f.byStart[addr]
	return s, ok
}

// endingAt returns the free span that ends at addr.
func (f *freeIndex) endingAt(addr uint64) (span, bool) {
	start, ok := f.byEnd[addr]
	if !ok {
		return span{}, false
	}
	return f.byStart[start], true
}

// bestFit returns the smallest span of the given owner with at least size bytes (lowest address
// among equals).
func (f *freeIndex) bestFit(tagged bool, stream, size uint64) (span, bool) {
	s, ok := f.tree.lowerBound(span{tagged: tagged, stream: stream, size: size})
	if !ok || s.tagged != tagged || s.stream != stream {
		return span{}, false
	}
	return s, true
}

// ascendFrom calls fn on the spans of the given owner in index order, starting at the first one
// not below (owner, size), until fn returns false.
func (f *freeIndex) ascendFrom(tagged bool, stream, size uint64, fn func(span) bool) {
	s, ok := f.tree.lowerBound(span{tagged: tagged, stream: stream, size: size})
	for ok && s.tagged == tagged && s.stream == stream && fn(s) {
		s, ok = f.tree.above(s)
	}
}

// descendBelow calls fn on the spans of the given owner that sort below (owner, size), in
// descending order, until fn returns false.
func (f *freeIndex) descendBelow(tagged bool, stream, size uint64, fn func(span) bool) {
	s, ok := f.tree.below(span{tagged: tagged, stream: stream, size: size})
	for ok && s.tagged == tagged && s.stream == stream && fn(s) {
		s, ok = f.tree.below(s)
	}
}

// all returns every span in index order.
func (f *freeIndex) all() []span {
	out := make([]span, 0, f.tree.count)
	f.tree.each(func(s span) { out = append(out, s) })
	return out
}

// len returns the number of free spans.
func (f *freeIndex) len() int { return f.tree.count }
