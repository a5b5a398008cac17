package spans

import "github.com/allocscope/allocscope/internal/slots"

// NodeState says what a node of a Space is.
type NodeState uint8

// The states of a node.
const (
	NodeFree     NodeState = iota // free memory, in the free tree
	NodeUsed                      // a live block
	NodeUnmapped                  // address space without memory (PyTorch's expandable segments), in the unmapped tree
)

// NoNode marks the absence of a node: before a segment's first node and after its last.
const NoNode int32 = -1

// Node is a piece of a segment; the pieces of a segment are linked in address order, so a
// freed block finds its neighbours without a search. Its Span's Node is its own index.
type Node struct {
	Span
	Prev, Next int32 // neighbours in the same segment, NoNode at its ends
	State      NodeState
}

// Space cuts segments of address space into nodes: free ones in a tree ordered by owner, size and
// address (O(log n) best fit), unmapped ones in a tree ordered by owner and address, used ones
// held by the policy by node index. Nodes of a segment never merge with another segment's. A
// node always keeps the lowest part of what it is split into, and absorbs the neighbours merged
// into it from above, so a segment's first node keeps its index for the segment's life.
type Space struct {
	nodes     slots.Table[Node, int32]
	fit       fitHint // where the last BestFit found its node in the free tree
	free      *Tree
	unmapped  *Tree
	freeBytes uint64
}

// fitHint is where BestFit found space node id in the free tree: Take splits that node without
// searching the tree again.
type fitHint struct {
	id int32
	at treeHint
}

// NewSpace returns a space without segments.
func NewSpace() *Space {
	return &Space{free: NewTree(BySize), unmapped: NewTree(ByAddr)}
}

// Node returns node id, valid until the next change of the space.
func (sp *Space) Node(id int32) *Node { return sp.nodes.At(id) }

func (sp *Space) newNode(s Span, state NodeState) int32 {
	id := sp.nodes.Put(Node{Span: s, Prev: NoNode, Next: NoNode, State: state})
	sp.nodes.At(id).Node = id
	return id
}

// recycle frees node id's slot for a later node. Until then it reads as a used node without
// neighbours, so that no merge takes it.
func (sp *Space) recycle(id int32) {
	*sp.nodes.At(id) = Node{Prev: NoNode, Next: NoNode, State: NodeUsed}
	sp.nodes.Release(id)
}

// attach puts a free or unmapped node into its tree.
func (sp *Space) attach(id int32) {
	n := sp.nodes.At(id)
	switch n.State {
	case NodeFree:
		sp.free.Insert(n.Span)
		sp.freeBytes += n.Size
	case NodeUnmapped:
		sp.unmapped.Insert(n.Span)
	}
}

// detach takes a free or unmapped node out of its tree.
func (sp *Space) detach(id int32) {
	n := sp.nodes.At(id)
	switch n.State {
	case NodeFree:
		sp.free.Delete(n.Span)
		sp.freeBytes -= n.Size
	case NodeUnmapped:
		sp.unmapped.Delete(n.Span)
	}
}

// AddSegment adds a segment [addr, addr+size) as one node in the given state and returns it.
func (sp *Space) AddSegment(addr, size uint64, tagged bool, stream uint64, state NodeState) int32 {
	id := sp.newNode(Span{Addr: addr, Size: size, Seg: addr, Tagged: tagged, Stream: stream}, state)
	sp.attach(id)
	return id
}

// AddSegmentTaken adds a segment [addr, addr+size) whose first used bytes are a used block, the
// rest (if any) a free node of no stream, and returns the used node: AddSegment followed by Take,
// with one tree operation fewer.
func (sp *Space) AddSegmentTaken(addr, size, used uint64) int32 {
	id := sp.newNode(Span{Addr: addr, Size: size, Seg: addr}, NodeUsed)
	if used < size {
		r := sp.splitDetached(id, used) // a used node: not attached yet
		sp.nodes.At(r).State = NodeFree
		sp.attach(r)
	}
	return id
}

// Walk calls fn on every node of the segment whose first node is head, in address order, until
// fn returns false. fn must not change the space. It is how a policy lists its blocks (the
// layouts of package pool).
func (sp *Space) Walk(head int32, fn func(*Node) bool) {
	for id := head; id != NoNode; {
		n := sp.nodes.At(id)
		if !fn(n) {
			return
		}
		id = n.Next
	}
}

// DropSegment removes every node of the segment whose first node is head.
func (sp *Space) DropSegment(head int32) {
	for id := head; id != NoNode; {
		next := sp.nodes.At(id).Next
		sp.detach(id)
		sp.recycle(id)
		id = next
	}
}

// BestFit returns the free node of the given owner that is the smallest with at least size
// bytes (lowest address among equals).
func (sp *Space) BestFit(tagged bool, stream, size uint64) (int32, bool) {
	s, ok := sp.free.lowerBoundHint(&Span{Tagged: tagged, Stream: stream, Size: size}, &sp.fit.at)
	if !ok {
		sp.fit.id = NoNode
		return NoNode, false
	}
	sp.fit.id = s.Node
	return s.Node, true
}

// Split cuts node id after its first size bytes; the rest becomes a new node in the same state,
// returned. Tree membership follows.
func (sp *Space) Split(id int32, size uint64) int32 {
	sp.detach(id)
	r := sp.splitDetached(id, size)
	sp.attach(id)
	return r
}

// splitDetached is Split for a node out of its tree; the new node is attached.
func (sp *Space) splitDetached(id int32, size uint64) int32 {
	n := *sp.nodes.At(id)
	rest := n.Span
	rest.Addr, rest.Size = n.Addr+size, n.Size-size
	r := sp.newNode(rest, n.State)
	sp.nodes.At(id).Size = size
	sp.nodes.At(r).Prev, sp.nodes.At(r).Next = id, n.Next
	if n.Next != NoNode {
		sp.nodes.At(n.Next).Prev = r
	}
	sp.nodes.At(id).Next = r
	sp.attach(r)
	return r
}

// Take makes free node id a used block of size bytes, splitting the rest off as a free node.
func (sp *Space) Take(id int32, size uint64) {
	if sp.nodes.At(id).Size <= size {
		if sp.fit.id == id && sp.free.deleteHint(&sp.fit.at) {
			sp.freeBytes -= sp.nodes.At(id).Size
		} else {
			sp.detach(id)
		}
		sp.nodes.At(id).State = NodeUsed
		return
	}
	// The rest takes the whole node's place in the free tree, usually without moving in it.
	n := *sp.nodes.At(id)
	rest := n.Span
	rest.Addr, rest.Size = n.Addr+size, n.Size-size
	r := sp.newNode(rest, NodeFree)
	sp.nodes.At(id).Size = size
	sp.nodes.At(r).Prev, sp.nodes.At(r).Next = id, n.Next
	if n.Next != NoNode {
		sp.nodes.At(n.Next).Prev = r
	}
	sp.nodes.At(id).Next = r
	sp.nodes.At(id).State = NodeUsed
	sp.free.rekeyHint(&sp.fit.at, sp.fit.id == id, n.Span, sp.nodes.At(r).Span)
	sp.freeBytes -= size
}

// Release makes used node id free for the given owner, merges it with free neighbours of the
// same owner and returns the node that holds it now.
func (sp *Space) Release(id int32, tagged bool, stream uint64) int32 {
	n := sp.nodes.At(id)
	n.State, n.Tagged, n.Stream = NodeFree, tagged, stream
	return sp.settle(id)
}

// SetOwner gives free node id to another owner, merging it with that owner's free neighbours.
func (sp *Space) SetOwner(id int32, tagged bool, stream uint64) int32 {
	sp.detach(id)
	n := sp.nodes.At(id)
	n.Tagged, n.Stream = tagged, stream
	return sp.settle(id)
}

// SetState turns node id (detached from its tree first) into state, merges it with neighbours
// in the same state and owner, and returns the node that holds it now.
func (sp *Space) SetState(id int32, state NodeState) int32 {
	sp.detach(id)
	sp.nodes.At(id).State = state
	return sp.settle(id)
}

// settle merges detached node id with its neighbours that are in the same state (not used) and
// owner, puts the result in its tree and returns the node that holds it (the lowest one). A
// neighbour's tree entry is re-keyed to the merged span, usually without moving in its tree.
func (sp *Space) settle(id int32) int32 {
	p, nx := sp.nodes.At(id).Prev, sp.nodes.At(id).Next
	mergePrev := p != NoNode && sp.mergeable(p, id)
	mergeNext := nx != NoNode && sp.mergeable(nx, id)
	var old Span
	switch {
	case mergePrev:
		old = sp.nodes.At(p).Span
		sp.absorbNext(p)
		if mergeNext {
			sp.detach(nx)
			sp.absorbNext(p)
		}
		id = p
	case mergeNext:
		old = sp.nodes.At(nx).Span
		sp.absorbNext(id)
	default:
		sp.attach(id)
		return id
	}
	n := sp.nodes.At(id)
	switch n.State {
	case NodeFree:
		sp.free.rekey(old, n.Span)
		sp.freeBytes += n.Size - old.Size
	case NodeUnmapped:
		sp.unmapped.rekey(old, n.Span)
	}
	return id
}

func (sp *Space) mergeable(a, b int32) bool {
	x, y := sp.nodes.At(a), sp.nodes.At(b)
	return x.State == y.State && x.State != NodeUsed && x.Tagged == y.Tagged && x.Stream == y.Stream
}

// absorbNext appends node id's next node to it; both are detached.
func (sp *Space) absorbNext(id int32) {
	n := sp.nodes.At(id)
	nx := n.Next
	n.Size += sp.nodes.At(nx).Size
	n.Next = sp.nodes.At(nx).Next
	if n.Next != NoNode {
		sp.nodes.At(n.Next).Prev = id
	}
	sp.recycle(nx)
}

// AscendFree calls fn on the free spans of the given owner in (size, address) order, starting at
// the first one of at least size bytes, until fn returns false. fn must not change the space. A
// Take of the first span's node then finds it without a search, as after BestFit.
func (sp *Space) AscendFree(tagged bool, stream, size uint64, fn func(Span) bool) {
	sp.fit.id = NoNode
	sp.free.ascend(Span{Tagged: tagged, Stream: stream, Size: size}, &sp.fit.at, func(s Span) bool {
		if sp.fit.id == NoNode {
			sp.fit.id = s.Node
		}
		return fn(s)
	})
}

// DescendFreeBelow calls fn on the free spans of the given owner below size bytes, largest
// first, until fn returns false. fn must not change the space.
func (sp *Space) DescendFreeBelow(tagged bool, stream, size uint64, fn func(Span) bool) {
	sp.free.descendBelow(Span{Tagged: tagged, Stream: stream, Size: size}, fn)
}

// FreeSpans returns every free span in (owner, size, address) order.
func (sp *Space) FreeSpans() []Span {
	out := make([]Span, 0, sp.free.count)
	sp.free.each(func(s Span) { out = append(out, s) })
	return out
}

// TakeHigh makes the top size bytes of free node id a used block and returns the block's node;
// the rest stays free in node id.
func (sp *Space) TakeHigh(id int32, size uint64) int32 {
	n := *sp.nodes.At(id)
	if n.Size <= size {
		sp.Take(id, size)
		return id
	}
	top := n.Span
	top.Addr, top.Size = n.End()-size, size
	r := sp.newNode(top, NodeUsed)
	sp.nodes.At(r).Prev, sp.nodes.At(r).Next = id, n.Next
	if n.Next != NoNode {
		sp.nodes.At(n.Next).Prev = r
	}
	sp.nodes.At(id).Next = r
	sp.nodes.At(id).Size = n.Size - size
	sp.free.rekeyHint(&sp.fit.at, sp.fit.id == id, n.Span, sp.nodes.At(id).Span)
	sp.freeBytes -= size
	return r
}

// LowerBoundFree returns the first free span not below key in the free tree's order (owner,
// size, address).
func (sp *Space) LowerBoundFree(key Span) (Span, bool) { return sp.free.bound(key, false) }

// LowerBoundUnmapped returns the first unmapped span not below key in the unmapped tree's order
// (owner, address).
func (sp *Space) LowerBoundUnmapped(key Span) (Span, bool) { return sp.unmapped.bound(key, false) }

// AboveUnmapped returns the unmapped span that follows s in the unmapped tree's order.
func (sp *Space) AboveUnmapped(s Span) (Span, bool) { return sp.unmapped.bound(s, true) }
