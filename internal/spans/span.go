// Package spans keeps address space as spans, the data structures behind every policy of package
// pool that splits and coalesces (the best-fit arena, the PyTorch model, the stream-ordered pool)
// and behind the simulated Upstream: Tree, an ordered set of spans (a B+tree per owner), and
// Space, segments of address space cut into nodes, free ones found by best fit in a Tree. It is
// the one implementation of best fit.
package spans

// Span is a range [Addr, Addr+Size) of address space with an owner: the key of the ordered trees.
// Its owner is Tagged and Stream: a tagged span belongs to Stream's own free list, an untagged one
// to any stream (its Stream is then 0 in a Space's trees).
type Span struct {
	Addr, Size uint64
	Seg        uint64 // base address of the segment (Upstream region) the span lies in
	Stream     uint64 // the owning stream when tagged
	Tagged     bool   // true when the span belongs to Stream's own free list; false when any stream may use it
	Node       int32  // the span's node in its Space (not part of any order)
}

// End returns the address just past the span.
func (s Span) End() uint64 { return s.Addr + s.Size }

// Order is the order a Tree keeps its spans in; either way owners come first (untagged ones, then
// tagged ones by stream).
type Order bool

// The orders of a Tree.
const (
	// BySize orders spans by owner, then size, then address: a lower bound on (owner, size)
	// is a best fit, ties going to the lowest address.
	BySize Order = true
	// ByAddr orders spans by owner, then address.
	ByAddr Order = false
)
