package pool

// span is a range [addr, addr+size) of address space with an owner: the key of the ordered
// trees. Every policy that splits and coalesces (the best-fit arena, the PyTorch model, the
// stream-ordered pool, the simulated address space) keeps its address space as spans in a space:
// one implementation of best fit.
type span struct {
	addr, size uint64
	seg        uint64 // base address of the segment (Upstream region) the span lies in
	stream     uint64 // the owning stream when tagged
	tagged     bool   // true when the span belongs to stream's own free list; false when any stream may use it
	node       int32  // the span's node in its space (not part of any order)
}

func (s span) end() uint64 { return s.addr + s.size }

// The orders a spanTree keeps its spans in.
const (
	// bySizeOrder orders spans by owner, then size, then address: a lower bound on (owner, size)
	// is a best fit, ties going to the lowest address.
	bySizeOrder = true
	// byAddrOrder orders spans by owner, then address.
	byAddrOrder = false
)

// nodeState says what a node of a space is.
type nodeState uint8

const (
	nodeFree     nodeState = iota // free memory, in the free tree
	nodeUsed                      // a live block
	nodeUnmapped                  // address space without memory (PyTorch's expandable segments), in the unmapped tree
)

// spaceNode is a piece of a segment; the pieces of a segment are linked in address order, so a
// freed block finds its neighbours without a search.
type spaceNode struct {
	span
	prev, next int32 // neighbours in the same segment, nilNode at its ends
	state      nodeState
}

// space cuts segments of address space into nodes: free ones in a tree ordered by owner, size and
// address (O(log n) best fit), unmapped ones in a tree ordered by owner and address, used ones
// held by the policy by node index. Nodes of a segment never merge with another segment's. A
// node always keeps the lowest part of what it is split into, and absorbs the neighbours merged
// into it from above, so a segment's first node keeps its index for the segment's life.
type space struct {
	nodes     []spaceNode
	fit       fitHint // where the last bestFit found its node in the free tree
	recycled  int32   // unused node slots, linked through next
	free      *spanTree
	unmapped  *spanTree
	freeBytes uint64
}

// fitHint is where bestFit found space node id in the free tree: take splits that node without
// searching the tree again.
type fitHint struct {
	id int32
	at treeHint
}

func newSpace() *space {
	return &space{recycled: nilNode, free: newSpanTree(bySizeOrder), unmapped: newSpanTree(byAddrOrder)}
}

func (sp *space) node(id int32) *spaceNode { return &sp.nodes[id] }

func (sp *space) newNode(s span, state nodeState) int32 {
	id := sp.recycled
	if id == nilNode {
		sp.nodes = append(sp.nodes, spaceNode{})
		id = int32(len(sp.nodes) - 1)
	} else {
		sp.recycled = sp.nodes[id].next
	}
	s.node = id
	sp.nodes[id] = spaceNode{span: s, prev: nilNode, next: nilNode, state: state}
	return id
}

func (sp *space) recycle(id int32) {
	sp.nodes[id] = spaceNode{next: sp.recycled, state: nodeUsed}
	sp.recycled = id
}

// attach puts a free or unmapped node into its tree.
func (sp *space) attach(id int32) {
	n := &sp.nodes[id]
	switch n.state {
	case nodeFree:
		sp.free.insert(n.span)
		sp.freeBytes += n.size
	case nodeUnmapped:
		sp.unmapped.insert(n.span)
	}
}

// detach takes a free or unmapped node out of its tree.
func (sp *space) detach(id int32) {
	n := &sp.nodes[id]
	switch n.state {
	case nodeFree:
		sp.free.delete(n.span)
		sp.freeBytes -= n.size
	case nodeUnmapped:
		sp.unmapped.delete(n.span)
	}
}

// addSegment adds a segment [addr, addr+size) as one node in the given state and returns it.
func (sp *space) addSegment(addr, size uint64, tagged bool, stream uint64, state nodeState) int32 {
	id := sp.newNode(span{addr: addr, size: size, seg: addr, tagged: tagged, stream: stream}, state)
	sp.attach(id)
	return id
}

// addSegmentTaken adds a segment [addr, addr+size) whose first used bytes are a used block, the
// rest (if any) a free node of no stream, and returns the used node: addSegment followed by take,
// with one tree operation fewer.
func (sp *space) addSegmentTaken(addr, size, used uint64) int32 {
	id := sp.newNode(span{addr: addr, size: size, seg: addr}, nodeUsed)
	if used < size {
		r := sp.splitDetached(id, used) // a used node: not attached yet
		sp.nodes[r].state = nodeFree
		sp.attach(r)
	}
	return id
}

// dropSegment removes every node of the segment whose first node is head.
func (sp *space) dropSegment(head int32) {
	for id := head; id != nilNode; {
		next := sp.nodes[id].next
		sp.detach(id)
		sp.recycle(id)
		id = next
	}
}

// bestFit returns the free node of the given owner that is the smallest with at least size
// bytes (lowest address among equals).
func (sp *space) bestFit(tagged bool, stream, size uint64) (int32, bool) {
	s, ok := sp.free.lowerBoundHint(&span{tagged: tagged, stream: stream, size: size}, &sp.fit.at)
	if !ok {
		sp.fit.id = nilNode
		return nilNode, false
	}
	sp.fit.id = s.node
	return s.node, true
}

// split cuts node id after its first size bytes; the rest becomes a new node in the same state,
// returned. Tree membership follows.
func (sp *space) split(id int32, size uint64) int32 {
	sp.detach(id)
	r := sp.splitDetached(id, size)
	sp.attach(id)
	return r
}

// splitDetached is split for a node out of its tree; the new node is attached.
func (sp *space) splitDetached(id int32, size uint64) int32 {
	n := sp.nodes[id]
	rest := n.span
	rest.addr, rest.size = n.addr+size, n.size-size
	r := sp.newNode(rest, n.state)
	sp.nodes[id].size = size
	sp.nodes[r].prev, sp.nodes[r].next = id, n.next
	if n.next != nilNode {
		sp.nodes[n.next].prev = r
	}
	sp.nodes[id].next = r
	sp.attach(r)
	return r
}

// take makes free node id a used block of size bytes, splitting the rest off as a free node.
func (sp *space) take(id int32, size uint64) {
	if sp.nodes[id].size <= size {
		if sp.fit.id == id && sp.free.deleteHint(&sp.fit.at) {
			sp.freeBytes -= sp.nodes[id].size
		} else {
			sp.detach(id)
		}
		sp.nodes[id].state = nodeUsed
		return
	}
	// The rest takes the whole node's place in the free tree, usually without moving in it.
	n := sp.nodes[id]
	rest := n.span
	rest.addr, rest.size = n.addr+size, n.size-size
	r := sp.newNode(rest, nodeFree)
	sp.nodes[id].size = size
	sp.nodes[r].prev, sp.nodes[r].next = id, n.next
	if n.next != nilNode {
		sp.nodes[n.next].prev = r
	}
	sp.nodes[id].next = r
	sp.nodes[id].state = nodeUsed
	sp.free.rekeyHint(&sp.fit.at, sp.fit.id == id, n.span, sp.nodes[r].span)
	sp.freeBytes -= size
}

// release makes used node id free for the given owner, merges it with free neighbours of the
// same owner and returns the node that holds it now.
func (sp *space) release(id int32, tagged bool, stream uint64) int32 {
	n := &sp.nodes[id]
	n.state, n.tagged, n.stream = nodeFree, tagged, stream
	return sp.settle(id)
}

// setOwner gives free node id to another owner, merging it with that owner's free neighbours.
func (sp *space) setOwner(id int32, tagged bool, stream uint64) int32 {
	sp.detach(id)
	n := &sp.nodes[id]
	n.tagged, n.stream = tagged, stream
	return sp.settle(id)
}

// setState turns node id (detached from its tree first) into state, merges it with neighbours
// in the same state and owner, and returns the node that holds it now.
func (sp *space) setState(id int32, state nodeState) int32 {
	sp.detach(id)
	sp.nodes[id].state = state
	return sp.settle(id)
}

// settle merges detached node id with its neighbours that are in the same state (not used) and
// owner, puts the result in its tree and returns the node that holds it (the lowest one). A
// neighbour's tree entry is re-keyed to the merged span, usually without moving in its tree.
func (sp *space) settle(id int32) int32 {
	p, nx := sp.nodes[id].prev, sp.nodes[id].next
	mergePrev := p != nilNode && sp.mergeable(p, id)
	mergeNext := nx != nilNode && sp.mergeable(nx, id)
	var old span
	switch {
	case mergePrev:
		old = sp.nodes[p].span
		sp.absorbNext(p)
		if mergeNext {
			sp.detach(nx)
			sp.absorbNext(p)
		}
		id = p
	case mergeNext:
		old = sp.nodes[nx].span
		sp.absorbNext(id)
	default:
		sp.attach(id)
		return id
	}
	n := &sp.nodes[id]
	switch n.state {
	case nodeFree:
		sp.free.rekey(old, n.span)
		sp.freeBytes += n.size - old.size
	case nodeUnmapped:
		sp.unmapped.rekey(old, n.span)
	}
	return id
}

func (sp *space) mergeable(a, b int32) bool {
	x, y := &sp.nodes[a], &sp.nodes[b]
	return x.state == y.state && x.state != nodeUsed && x.tagged == y.tagged && x.stream == y.stream
}

// absorbNext appends node id's next node to it; both are detached.
func (sp *space) absorbNext(id int32) {
	n := &sp.nodes[id]
	nx := n.next
	n.size += sp.nodes[nx].size
	n.next = sp.nodes[nx].next
	if n.next != nilNode {
		sp.nodes[n.next].prev = id
	}
	sp.recycle(nx)
}

// ascendFree calls fn on the free spans of the given owner in (size, address) order, starting at
// the first one of at least size bytes, until fn returns false. fn must not change the space. A
// take of the first span's node then finds it without a search, as after bestFit.
func (sp *space) ascendFree(tagged bool, stream, size uint64, fn func(span) bool) {
	sp.fit.id = nilNode
	sp.free.ascend(span{tagged: tagged, stream: stream, size: size}, &sp.fit.at, func(s span) bool {
		if sp.fit.id == nilNode {
			sp.fit.id = s.node
		}
		return fn(s)
	})
}

// descendFreeBelow calls fn on the free spans of the given owner below size bytes, largest
// first, until fn returns false. fn must not change the space.
func (sp *space) descendFreeBelow(tagged bool, stream, size uint64, fn func(span) bool) {
	sp.free.descendBelow(span{tagged: tagged, stream: stream, size: size}, fn)
}

// freeSpans returns every free span in (owner, size, address) order.
func (sp *space) freeSpans() []span {
	out := make([]span, 0, sp.free.count)
	sp.free.each(func(s span) { out = append(out, s) })
	return out
}
