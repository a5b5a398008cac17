// Package slots is a table of values under small integer indexes, each index reused (the one
// released last first) once its value is released. Indexes stay below the most values held at
// once, so whatever is keyed by them (tree links, hash table values) stays small. It holds the
// nodes and spans of package pool's span trees and address spaces, and the live blocks of
// allocscope's request extraction and statistics pass.
package slots

// Table holds values of type T under indexes of type I. The zero value is an empty table.
type Table[T any, I ~int32 | ~uint32] struct {
	items []T
	free  []I // released indexes, the last released last
}

// Put stores v under a free index (the one released last, else a new one) and returns it.
func (s *Table[T, I]) Put(v T) I {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		s.items[i] = v
		return i
	}
	s.items = append(s.items, v)
	return I(len(s.items) - 1)
}

// Release makes index i free for a later Put. Its value stays readable until then.
func (s *Table[T, I]) Release(i I) { s.free = append(s.free, i) }

// At returns the value under index i, valid until the next Put.
func (s *Table[T, I]) At(i I) *T { return &s.items[i] }

// Len returns the number of indexes ever handed out: every index is below it.
func (s *Table[T, I]) Len() int { return len(s.items) }
