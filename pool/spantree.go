package pool

// spanTree is an AVL tree of spans: O(log n) insert, delete, lower bound and predecessor in the
// worst case. It is written for spans alone (comparisons inline, nodes in one slice linked by
// index, freed nodes reused) because it sits on every arena allocation and free, where a generic
// B-tree with a comparison callback cost three times as much (see BenchmarkTraceThroughput).
type spanTree struct {
	nodes  []avlNode // nodes[0] is the nil sentinel (height 0)
	root   int32
	free   int32 // head of the list of unused nodes, linked through left
	count  int
	bySize bool   // order (owner, size, addr); else (owner, addr)
	mods   uint64 // changes so far: a node index and predecessor found before stay valid while it holds
}

type avlNode struct {
	s           span
	left, right int32
	height      int32
}

// nilNode marks the absence of a node in a space's links (treeNil is the tree's own nil).
const nilNode int32 = -1

const treeNil int32 = 0

func newSpanTree(bySize bool) *spanTree {
	return &spanTree{nodes: make([]avlNode, 1, 64), root: treeNil, free: treeNil, bySize: bySize}
}

// less orders spans by owner (untagged first, then by stream), then size (when bySize), then address.
func (t *spanTree) less(a, b *span) bool {
	if a.tagged != b.tagged {
		return !a.tagged
	}
	if a.stream != b.stream {
		return a.stream < b.stream
	}
	if t.bySize && a.size != b.size {
		return a.size < b.size
	}
	return a.addr < b.addr
}

func (t *spanTree) height(n int32) int32 { return t.nodes[n].height }

func (t *spanTree) fix(n int32) {
	nd := &t.nodes[n]
	nd.height = 1 + max(t.height(nd.left), t.height(nd.right))
}

func (t *spanTree) rotateRight(n int32) int32 {
	l := t.nodes[n].left
	t.nodes[n].left = t.nodes[l].right
	t.nodes[l].right = n
	t.fix(n)
	t.fix(l)
	return l
}

func (t *spanTree) rotateLeft(n int32) int32 {
	r := t.nodes[n].right
	t.nodes[n].right = t.nodes[r].left
	t.nodes[r].left = n
	t.fix(n)
	t.fix(r)
	return r
}

// balance restores the AVL property at n and returns the subtree's new root.
func (t *spanTree) balance(n int32) int32 {
	t.fix(n)
	nd := &t.nodes[n]
	switch bf := t.height(nd.left) - t.height(nd.right); {
	case bf > 1:
		if l := nd.left; t.height(t.nodes[l].left) < t.height(t.nodes[l].right) {
			nd.left = t.rotateLeft(l)
		}
		return t.rotateRight(n)
	case bf < -1:
		if r := nd.right; t.height(t.nodes[r].right) < t.height(t.nodes[r].left) {
			nd.right = t.rotateRight(r)
		}
		return t.rotateLeft(n)
	}
	return n
}

func (t *spanTree) newNode(s span) int32 {
	if n := t.free; n != treeNil {
		t.free = t.nodes[n].left
		t.nodes[n] = avlNode{s: s, height: 1}
		return n
	}
	t.nodes = append(t.nodes, avlNode{s: s, height: 1})
	return int32(len(t.nodes) - 1)
}

// maxTreeHeight bounds an AVL tree's height (1.44 log2 of 2^31 nodes is under 46).
const maxTreeHeight = 64

// insert adds s, which must not be in the tree. It walks down once, remembering the path, and
// rebalances on the way back up until a subtree's height is unchanged.
func (t *spanTree) insert(s span) {
	t.mods++
	t.count++
	var path [maxTreeHeight]int32
	var left [maxTreeHeight]bool
	depth := 0
	for n := t.root; n != treeNil; depth++ {
		path[depth] = n
		left[depth] = t.less(&s, &t.nodes[n].s)
		if left[depth] {
			n = t.nodes[n].left
		} else {
			n = t.nodes[n].right
		}
	}
	child := t.newNode(s)
	for i := depth - 1; i >= 0; i-- {
		n := path[i]
		if left[i] {
			t.nodes[n].left = child
		} else {
			t.nodes[n].right = child
		}
		var changed bool
		if child, changed = t.rebalance(n); !changed {
			if i > 0 {
				t.setChild(path[i-1], left[i-1], child)
				return
			}
			break
		}
	}
	t.root = child
}

// setChild makes c the left (or right) child of n.
func (t *spanTree) setChild(n int32, left bool, c int32) {
	if left {
		t.nodes[n].left = c
	} else {
		t.nodes[n].right = c
	}
}

// rebalance balances n and reports whether the subtree's height changed.
func (t *spanTree) rebalance(n int32) (int32, bool) {
	old := t.nodes[n].height
	n = t.balance(n)
	return n, t.nodes[n].height != old
}

// delete removes the span equal to s (same owner, size and address); it reports whether one was there.
func (t *spanTree) delete(s span) bool {
	t.mods++
	var path treePath
	n := t.find(&s, &path)
	if n == treeNil {
		return false
	}
	t.deleteNode(n, &path)
	return true
}

// treePath is the way down from the root to a node: the nodes passed and which child was taken.
type treePath struct {
	nodes [maxTreeHeight]int32
	left  [maxTreeHeight]bool
	depth int
}

func (p *treePath) push(n int32, left bool) {
	p.nodes[p.depth], p.left[p.depth] = n, left
	p.depth++
}

// find returns the node holding s (treeNil for none), recording in path the nodes above it.
func (t *spanTree) find(s *span, path *treePath) int32 {
	n := t.root
	for n != treeNil {
		nd := &t.nodes[n]
		if t.less(s, &nd.s) {
			path.push(n, true)
			n = nd.left
		} else if t.less(&nd.s, s) {
			path.push(n, false)
			n = nd.right
		} else {
			break
		}
	}
	return n
}

// deleteNode removes node n, reached from the root by path, and rebalances on the way back up
// until a subtree's height is unchanged.
func (t *spanTree) deleteNode(n int32, path *treePath) {
	t.count--
	left, right := t.nodes[n].left, t.nodes[n].right
	t.nodes[n].left, t.free = t.free, n
	child, changed := left, true
	switch {
	case left == treeNil:
		child = right
	case right == treeNil:
	default:
		// Replace n by its successor, the minimum of the right subtree.
		var m int32
		right, m = t.detachMin(right)
		t.nodes[m].left, t.nodes[m].right = left, right
		t.nodes[m].height = t.nodes[n].height
		child, changed = t.rebalance(m)
	}
	for i := path.depth - 1; i >= 0; i-- {
		p := path.nodes[i]
		t.setChild(p, path.left[i], child)
		if !changed {
			return
		}
		child, changed = t.rebalance(p)
	}
	t.root = child
}

// rekey replaces old, which must be in the tree, by s. When s falls between old's neighbours in
// the order it takes old's place in its node (no rebalancing); otherwise it is a delete and an
// insert. Either way the tree then holds the same set of spans.
func (t *spanTree) rekey(old, s span) {
	var path treePath
	n := t.find(&old, &path)
	pred, succ := treeNil, treeNil
	for i := path.depth - 1; i >= 0 && (pred == treeNil || succ == treeNil); i-- {
		if path.left[i] {
			if succ == treeNil {
				succ = path.nodes[i]
			}
		} else if pred == treeNil {
			pred = path.nodes[i]
		}
	}
	t.mods++
	if n == treeNil {
		t.insert(s)
		return
	}
	if t.fits(n, pred, succ, &s) {
		t.nodes[n].s = s
		return
	}
	t.deleteNode(n, &path)
	t.insert(s)
}

// fits reports whether s may replace node n's span in place: it lies between n's in-order
// predecessor and successor (pred and succ are the nearest ancestors below and above n).
func (t *spanTree) fits(n, pred, succ int32, s *span) bool {
	nd := &t.nodes[n]
	if t.less(s, &nd.s) {
		if l := nd.left; l != treeNil {
			for pred = l; t.nodes[pred].right != treeNil; pred = t.nodes[pred].right {
			}
		}
		return pred == treeNil || t.less(&t.nodes[pred].s, s)
	}
	if r := nd.right; r != treeNil {
		for succ = r; t.nodes[succ].left != treeNil; succ = t.nodes[succ].left {
		}
	}
	return succ == treeNil || t.less(s, &t.nodes[succ].s)
}

// detachMin removes the minimum node of subtree n and returns the new subtree and that node.
func (t *spanTree) detachMin(n int32) (rest, min int32) {
	var path [maxTreeHeight]int32
	depth := 0
	for t.nodes[n].left != treeNil {
		path[depth] = n
		depth++
		n = t.nodes[n].left
	}
	min, rest = n, t.nodes[n].right
	for i := depth - 1; i >= 0; i-- {
		p := path[i]
		t.nodes[p].left = rest
		rest = t.balance(p)
	}
	return rest, min
}

// lowerBoundNode returns the node of the smallest span not below key and the node of its
// in-order predecessor (the greatest span below key), treeNil for none.
func (t *spanTree) lowerBoundNode(key *span) (n, pred int32) {
	n, pred = treeNil, treeNil
	for c := t.root; c != treeNil; {
		nd := &t.nodes[c]
		if t.less(&nd.s, key) {
			pred, c = c, nd.right
		} else {
			n, c = c, nd.left
		}
	}
	return n, pred
}

// lowerBoundPath is lowerBoundNode that also records in path the way down to n (its depth is
// left 0 when n is treeNil).
func (t *spanTree) lowerBoundPath(key *span, path *treePath) (n, pred int32) {
	n, pred = treeNil, treeNil
	path.depth = 0
	depth := 0
	for c := t.root; c != treeNil; depth++ {
		nd := &t.nodes[c]
		if t.less(&nd.s, key) {
			path.nodes[depth], path.left[depth] = c, false
			pred, c = c, nd.right
		} else {
			path.nodes[depth], path.left[depth] = c, true
			n, c, path.depth = c, nd.left, depth
		}
	}
	return n, pred
}

// deleteAt removes node n, found with path by lowerBoundPath when the tree had mods changes, if
// the tree is unchanged since. It reports whether it did.
func (t *spanTree) deleteAt(n int32, path *treePath, mods uint64) bool {
	if t.mods != mods {
		return false
	}
	t.mods++
	t.deleteNode(n, path)
	return true
}

// replaceBelow puts s in node n, found with pred by lowerBoundNode when the tree had mods
// changes, if the tree is unchanged since and s, below n's span, is still above pred's. It
// reports whether it did.
func (t *spanTree) replaceBelow(n, pred int32, mods uint64, s *span) bool {
	if t.mods != mods || (pred != treeNil && !t.less(&t.nodes[pred].s, s)) {
		return false
	}
	t.nodes[n].s = *s
	t.mods++
	return true
}

// lowerBound returns the smallest span not below key.
func (t *spanTree) lowerBound(key span) (span, bool) {
	best, found := span{}, false
	for n := t.root; n != treeNil; {
		nd := &t.nodes[n]
		if t.less(&nd.s, &key) {
			n = nd.right
		} else {
			best, found = nd.s, true
			n = nd.left
		}
	}
	return best, found
}

// above returns the smallest span greater than key.
func (t *spanTree) above(key span) (span, bool) {
	best, found := span{}, false
	for n := t.root; n != treeNil; {
		nd := &t.nodes[n]
		if t.less(&key, &nd.s) {
			best, found = nd.s, true
			n = nd.left
		} else {
			n = nd.right
		}
	}
	return best, found
}

// below returns the greatest span less than key.
func (t *spanTree) below(key span) (span, bool) {
	best, found := span{}, false
	for n := t.root; n != treeNil; {
		nd := &t.nodes[n]
		if t.less(&nd.s, &key) {
			best, found = nd.s, true
			n = nd.right
		} else {
			n = nd.left
		}
	}
	return best, found
}

// each calls fn on every span in order.
func (t *spanTree) each(fn func(span)) { t.eachAt(t.root, fn) }

func (t *spanTree) eachAt(n int32, fn func(span)) {
	if n == treeNil {
		return
	}
	t.eachAt(t.nodes[n].left, fn)
	fn(t.nodes[n].s)
	t.eachAt(t.nodes[n].right, fn)
}
