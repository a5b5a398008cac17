package replay

import "github.com/google/btree"

// span is the address range [addr, addr+size). data is the host memory behind it, where there is.
type span struct {
	addr, size uint64
	data       []byte
}

func (s span) end() uint64 { return s.addr + s.size }

// spans is a set of address ranges ordered by start address, in a B-tree: O(log n) insert, delete
// and neighbour lookups.
type spans struct {
	tree *btree.BTreeG[span]
}

func newSpans() *spans {
	return &spans{tree: btree.NewG(32, func(a, b span) bool { return a.addr < b.addr })}
}

// floor returns the span with the greatest start address ≤ addr.
func (s *spans) floor(addr uint64) (span, bool) {
	var found span
	ok := false
	s.tree.DescendLessOrEqual(span{addr: addr}, func(x span) bool {
		found, ok = x, true
		return false
	})
	return found, ok
}

// ceiling returns the span with the smallest start address ≥ addr.
func (s *spans) ceiling(addr uint64) (span, bool) {
	var found span
	ok := false
	s.tree.AscendGreaterOrEqual(span{addr: addr}, func(x span) bool {
		found, ok = x, true
		return false
	})
	return found, ok
}

// overlapping returns a span of the set that shares a byte with [addr, addr+size), if any.
func (s *spans) overlapping(addr, size uint64) (span, bool) {
	if prev, ok := s.floor(addr); ok && prev.end() > addr {
		return prev, true
	}
	if next, ok := s.ceiling(addr); ok && next.addr < addr+size {
		return next, true
	}
	return span{}, false
}

// containing returns the span that holds all of [addr, addr+size), if any.
func (s *spans) containing(addr, size uint64) (span, bool) {
	prev, ok := s.floor(addr)
	if !ok || prev.end() < addr+size || prev.end() <= addr {
		return span{}, false
	}
	return prev, true
}

// insert adds x, replacing a span with the same start address.
func (s *spans) insert(x span) { s.tree.ReplaceOrInsert(x) }

// remove deletes the span that starts at addr and returns it.
func (s *spans) remove(addr uint64) (span, bool) { return s.tree.Delete(span{addr: addr}) }

// get returns the span that starts at addr.
func (s *spans) get(addr uint64) (span, bool) { return s.tree.Get(span{addr: addr}) }

// len returns the number of spans.
func (s *spans) len() int { return s.tree.Len() }

// each calls f for every span in address order until f returns false.
func (s *spans) each(f func(span) bool) { s.tree.Ascend(btree.ItemIteratorG[span](f)) }

// clear removes all spans.
func (s *spans) clear() { s.tree.Clear(false) }

// insertMerged adds x, merged with the spans of the set that touch it and lie inside [lo, hi)
// (one address reservation), so that ranges added piece by piece form one span. Spans merged this
// way carry no data.
func (s *spans) insertMerged(x span, lo, hi uint64) {
	if prev, ok := s.floor(x.addr); ok && prev.end() == x.addr && prev.addr >= lo {
		s.remove(prev.addr)
		x.addr, x.size = prev.addr, prev.size+x.size
	}
	if next, ok := s.get(x.end()); ok && next.end() <= hi {
		s.remove(next.addr)
		x.size += next.size
	}
	s.insert(span{addr: x.addr, size: x.size})
}

// cut removes [addr, addr+size) from the one span that holds all of it, keeping the parts of that
// span before and after the range. It reports false, and changes nothing, when no span holds it.
func (s *spans) cut(addr, size uint64) bool {
	m, ok := s.containing(addr, size)
	if !ok || size == 0 {
		return false
	}
	s.remove(m.addr)
	if addr > m.addr {
		s.insert(span{addr: m.addr, size: addr - m.addr})
	}
	if end := addr + size; end < m.end() {
		s.insert(span{addr: end, size: m.end() - end})
	}
	return true
}
