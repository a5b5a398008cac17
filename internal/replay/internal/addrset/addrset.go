// Package addrset is the ordered set of address ranges that replay's --verify checks and both
// backends (internal/replay/backend/host, internal/replay/backend/cuda) keep their mappings and address reservations
// in.
package addrset

import "github.com/google/btree"

// Span is the address range [Addr, Addr+Size). Data is the host memory behind it, where there is.
type Span struct {
	Addr, Size uint64
	Data       []byte
}

// End returns the first address after the span.
func (s Span) End() uint64 { return s.Addr + s.Size }

// Bytes returns the host bytes of [addr, addr+size), which lies inside s.
func (s Span) Bytes(addr, size uint64) []byte {
	off := addr - s.Addr
	return s.Data[off : off+size : off+size]
}

// Set is a set of address ranges ordered by start address, in a B-tree: O(log n) insert, delete
// and neighbour lookups. The zero value is not usable; make one with New.
type Set struct {
	tree *btree.BTreeG[Span]
}

// New returns an empty set.
func New() *Set {
	return &Set{tree: btree.NewG(32, func(a, b Span) bool { return a.Addr < b.Addr })}
}

// Floor returns the span with the greatest start address ≤ addr.
func (s *Set) Floor(addr uint64) (Span, bool) {
	var found Span
	ok := false
	s.tree.DescendLessOrEqual(Span{Addr: addr}, func(x Span) bool {
		found, ok = x, true
		return false
	})
	return found, ok
}

// Ceiling returns the span with the smallest start address ≥ addr.
func (s *Set) Ceiling(addr uint64) (Span, bool) {
	var found Span
	ok := false
	s.tree.AscendGreaterOrEqual(Span{Addr: addr}, func(x Span) bool {
		found, ok = x, true
		return false
	})
	return found, ok
}

// Overlapping returns a span of the set that shares a byte with [addr, addr+size), if any.
func (s *Set) Overlapping(addr, size uint64) (Span, bool) {
	if prev, ok := s.Floor(addr); ok && prev.End() > addr {
		return prev, true
	}
	if next, ok := s.Ceiling(addr); ok && next.Addr < addr+size {
		return next, true
	}
	return Span{}, false
}

// Containing returns the span that holds all of [addr, addr+size), if any.
func (s *Set) Containing(addr, size uint64) (Span, bool) {
	prev, ok := s.Floor(addr)
	if !ok || prev.End() < addr+size || prev.End() <= addr {
		return Span{}, false
	}
	return prev, true
}

// Insert adds x, replacing a span with the same start address.
func (s *Set) Insert(x Span) { s.tree.ReplaceOrInsert(x) }

// Remove deletes the span that starts at addr and returns it.
func (s *Set) Remove(addr uint64) (Span, bool) { return s.tree.Delete(Span{Addr: addr}) }

// Get returns the span that starts at addr.
func (s *Set) Get(addr uint64) (Span, bool) { return s.tree.Get(Span{Addr: addr}) }

// Len returns the number of spans.
func (s *Set) Len() int { return s.tree.Len() }

// Each calls f for every span in address order until f returns false.
func (s *Set) Each(f func(Span) bool) { s.tree.Ascend(btree.ItemIteratorG[Span](f)) }

// Clear removes all spans.
func (s *Set) Clear() { s.tree.Clear(false) }

// InsertMerged adds x, merged with the spans of the set that touch it and lie inside [lo, hi)
// (one address reservation), so that ranges added piece by piece form one span. Spans merged this
// way carry no data.
func (s *Set) InsertMerged(x Span, lo, hi uint64) {
	if prev, ok := s.Floor(x.Addr); ok && prev.End() == x.Addr && prev.Addr >= lo {
		s.Remove(prev.Addr)
		x.Addr, x.Size = prev.Addr, prev.Size+x.Size
	}
	if next, ok := s.Get(x.End()); ok && next.End() <= hi {
		s.Remove(next.Addr)
		x.Size += next.Size
	}
	s.Insert(Span{Addr: x.Addr, Size: x.Size})
}

// Cut removes [addr, addr+size) from the one span that holds all of it, keeping the parts of that
// span before and after the range. It reports false, and changes nothing, when no span holds it.
func (s *Set) Cut(addr, size uint64) bool {
	m, ok := s.Containing(addr, size)
	if !ok || size == 0 {
		return false
	}
	s.Remove(m.Addr)
	if addr > m.Addr {
		s.Insert(Span{Addr: m.Addr, Size: addr - m.Addr})
	}
	if end := addr + size; end < m.End() {
		s.Insert(Span{Addr: end, Size: m.End() - end})
	}
	return true
}
