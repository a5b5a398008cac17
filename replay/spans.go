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
