package spans

import (
	"math/bits"
	"slices"

	"github.com/allocscope/allocscope/internal/slots"
)

// Tree is an ordered set of spans: O(log n) insert, delete, lower bound and neighbour walks
// in the worst case. Spans are ordered by owner (untagged first, then tagged by stream), then
// size (bySize), then address. Each owner has its own B+tree, so that a key is two words: (size,
// address) by size, (address, 0) by address. All owners' nodes share one table, linked by index;
// leaves hold sorted keys and are chained per owner for walks to a neighbour; the spans live in
// items, the leaves hold their indexes.
type Tree struct {
	bySize  bool
	nodes   slots.Table[bnode, int32]
	items   slots.Table[Span, int32]
	owners  []treeOwner        // in first-seen order (owner 0 is untagged stream 0)
	sorted  []int32            // owner indexes by (tagged, stream)
	byOwner map[ownerKey]int32 // owner → index, for all but the cached one
	lastKey ownerKey           // the tagged owner found last
	lastIdx int32
	count   int
	mods    uint64 // changes so far: a hint taken before stays valid while it holds
}

// bkey is a span's place within its owner's tree.
type bkey struct{ hi, lo uint64 }

func (a bkey) less(b bkey) bool { return a.lessBit(b) == 1 }

// lessBit is 1 when a is below b, else 0: the borrow of the 128-bit a - b (less, as a number).
func (a bkey) lessBit(b bkey) int {
	_, borrow := bits.Sub64(a.lo, b.lo, 0)
	_, borrow = bits.Sub64(a.hi, b.hi, borrow)
	return int(borrow)
}

// next returns the key right after a, so that a key is below it exactly when it is not above a.
// Keys never reach the largest value: sizes and addresses stay below 2^64-1.
func (a bkey) next() bkey {
	lo, carry := bits.Add64(a.lo, 1, 0)
	return bkey{a.hi + carry, lo}
}

// bOrder is the most keys of a leaf and children of an inner node; all but the root hold at
// least bMinFill.
const (
	bOrder   = 16
	bMinFill = bOrder / 2
	maxDepth = 12 // inner levels: a fanout of at least 8 (2 at the root) bounds them by 11 for 2^31 spans
)

// bnode is a leaf (keys and item indexes) or an inner node (children in vals; keys[i], i ≥ 1,
// separates child i-1 from child i: above every key left of it, at most every key right of it).
type bnode struct {
	keys       [bOrder]bkey
	vals       [bOrder]int32
	n          int32
	leaf       bool
	prev, next int32 // leaf chain of the owner, treeNil at its ends
}

// treeNil marks the absence of a tree node.
const treeNil int32 = -1

type ownerKey struct {
	Tagged bool
	Stream uint64
}

func (a ownerKey) less(b ownerKey) bool {
	if a.Tagged != b.Tagged {
		return !a.Tagged
	}
	return a.Stream < b.Stream
}

// treeOwner is the B+tree of one owner's spans.
type treeOwner struct {
	ownerKey
	root   int32 // treeNil when empty
	height int32 // levels, the leaves being level 1
}

// NewTree returns an empty tree that keeps its spans in the given order.
func NewTree(order Order) *Tree {
	t := &Tree{bySize: bool(order), byOwner: map[ownerKey]int32{}}
	t.owners = []treeOwner{{root: treeNil}}
	t.sorted = []int32{0}
	t.byOwner[ownerKey{}] = 0
	return t
}

func (t *Tree) key(s *Span) bkey {
	if t.bySize {
		return bkey{s.Size, s.Addr}
	}
	return bkey{s.Addr, 0}
}

// owner returns the index of s's owner; with create, it adds one unknown so far (else -1).
func (t *Tree) owner(tagged bool, stream uint64, create bool) int32 {
	if !tagged && stream == 0 {
		return 0
	}
	k := ownerKey{tagged, stream}
	if k == t.lastKey {
		return t.lastIdx
	}
	i, ok := t.byOwner[k]
	if !ok {
		if !create {
			return -1
		}
		i = int32(len(t.owners))
		t.owners = append(t.owners, treeOwner{ownerKey: k, root: treeNil})
		t.byOwner[k] = i
		t.sorted = append(t.sorted, i)
		slices.SortFunc(t.sorted, func(a, b int32) int {
			if t.owners[a].less(t.owners[b].ownerKey) {
				return -1
			}
			return 1
		})
	}
	t.lastKey, t.lastIdx = k, i
	return i
}

func (t *Tree) newNode(leaf bool) int32 {
	return t.nodes.Put(bnode{leaf: leaf, prev: treeNil, next: treeNil})
}

// treePath is the way down from an owner's root to a leaf: the inner nodes passed and which
// child was taken in each.
type treePath struct {
	nodes [maxDepth]int32
	idx   [maxDepth]int32
	depth int
}

// childFor returns the child of inner node n whose range holds k: the number of separators ≤ k.
// Keys being sorted, those with a lower hi come first, then those with k's hi.
func (t *Tree) childFor(n int32, k bkey) int32 {
	nd := t.nodes.At(n)
	return below(nd.keys[1:nd.n], k.next())
}

// leafPos returns the number of keys of leaf n below k (strict: not above k).
func (t *Tree) leafPos(n int32, k bkey, strict bool) int32 {
	nd := t.nodes.At(n)
	if strict {
		k = k.next()
	}
	return below(nd.keys[:nd.n], k)
}

// below returns the number of keys below k. It compares every key, without a branch on the
// outcome: a node's keys are few, and where a scan would stop is unpredictable.
func below(keys []bkey, k bkey) int32 {
	n := 0
	for _, key := range keys {
		n += key.lessBit(k)
	}
	return int32(n)
}

// descend walks from owner o's root to the leaf whose range holds k, recording the path.
func (t *Tree) descend(o int32, k bkey, path *treePath) int32 {
	path.depth = 0
	n := t.owners[o].root
	for !t.nodes.At(n).leaf {
		i := t.childFor(n, k)
		path.nodes[path.depth], path.idx[path.depth] = n, i
		path.depth++
		n = t.nodes.At(n).vals[i]
	}
	return n
}

// cursor is a position in an owner's leaf chain; pos == n of the last leaf is the end.
type cursor struct{ leaf, pos int32 }

// seek returns the first position in owner o whose key is not below k (strict: above k).
func (t *Tree) seek(o int32, k bkey, strict bool, path *treePath) cursor {
	if t.owners[o].root == treeNil {
		return cursor{treeNil, 0}
	}
	leaf := t.descend(o, k, path)
	c := cursor{leaf, t.leafPos(leaf, k, strict)}
	if nd := t.nodes.At(leaf); c.pos == nd.n && nd.next != treeNil {
		c = cursor{nd.next, 0}
		path.depth = -1 // the path leads to the leaf before
	}
	return c
}

func (t *Tree) valid(c cursor) bool { return c.leaf != treeNil && c.pos < t.nodes.At(c.leaf).n }

func (t *Tree) at(c cursor) *Span { return t.items.At(t.nodes.At(c.leaf).vals[c.pos]) }

func (t *Tree) next(c cursor) cursor {
	if c.pos+1 < t.nodes.At(c.leaf).n {
		return cursor{c.leaf, c.pos + 1}
	}
	if nx := t.nodes.At(c.leaf).next; nx != treeNil {
		return cursor{nx, 0}
	}
	return cursor{c.leaf, c.pos + 1}
}

// prev returns the position before c; leaf treeNil when c is the first.
func (t *Tree) prev(c cursor) cursor {
	if c.leaf == treeNil {
		return c
	}
	if c.pos > 0 {
		return cursor{c.leaf, c.pos - 1}
	}
	if p := t.nodes.At(c.leaf).prev; p != treeNil {
		return cursor{p, t.nodes.At(p).n - 1}
	}
	return cursor{treeNil, 0}
}

// first and last return owner o's first and last positions (leaf treeNil when it is empty).
func (t *Tree) first(o int32) cursor { return t.edge(o, false) }

func (t *Tree) last(o int32) cursor { return t.edge(o, true) }

// edge walks down owner o's tree along its first children to its first position, or with last
// along its last children to its last one.
func (t *Tree) edge(o int32, last bool) cursor {
	n := t.owners[o].root
	if n == treeNil {
		return cursor{treeNil, 0}
	}
	for {
		nd := t.nodes.At(n)
		i := int32(0)
		if last {
			i = nd.n - 1
		}
		if nd.leaf {
			return cursor{n, i}
		}
		n = nd.vals[i]
	}
}

// Insert adds s, which must not be in the tree.
func (t *Tree) Insert(s Span) {
	o := t.owner(s.Tagged, s.Stream, true)
	t.mods++
	t.count++
	item := t.items.Put(s)
	k := t.key(&s)
	ow := &t.owners[o]
	if ow.root == treeNil {
		leaf := t.newNode(true)
		t.nodes.At(leaf).keys[0], t.nodes.At(leaf).vals[0], t.nodes.At(leaf).n = k, item, 1
		ow.root, ow.height = leaf, 1
		return
	}
	var path treePath
	leaf := t.descend(o, k, &path)
	t.insertAt(o, &path, leaf, t.leafPos(leaf, k, false), k, item)
}

// insertAt puts (k, v) at position pos of leaf, reached by path, splitting full nodes upwards.
func (t *Tree) insertAt(o int32, path *treePath, leaf, pos int32, k bkey, v int32) {
	nd := t.nodes.At(leaf)
	if nd.n < bOrder {
		copy(nd.keys[pos+1:nd.n+1], nd.keys[pos:nd.n])
		copy(nd.vals[pos+1:nd.n+1], nd.vals[pos:nd.n])
		nd.keys[pos], nd.vals[pos] = k, v
		nd.n++
		return
	}
	right := t.split(leaf, pos, k, v)
	sep := t.nodes.At(right).keys[0]
	for d := path.depth - 1; d >= 0; d-- {
		p, i := path.nodes[d], path.idx[d]+1
		if pn := t.nodes.At(p); pn.n < bOrder {
			copy(pn.keys[i+1:pn.n+1], pn.keys[i:pn.n])
			copy(pn.vals[i+1:pn.n+1], pn.vals[i:pn.n])
			pn.keys[i], pn.vals[i] = sep, right
			pn.n++
			return
		}
		right = t.split(p, i, sep, right)
		sep = t.nodes.At(right).keys[0]
	}
	root := t.newNode(false)
	rn := t.nodes.At(root)
	rn.vals[0], rn.vals[1], rn.keys[1], rn.n = t.owners[o].root, right, sep, 2
	t.owners[o].root = root
	t.owners[o].height++
}

// split divides full node n, with (k, v) added at position pos, into n and a new right node,
// returned. A leaf's right node starts with its first key; an inner one's keys[0] is the
// separator to put in the parent.
func (t *Tree) split(n, pos int32, k bkey, v int32) int32 {
	var keys [bOrder + 1]bkey
	var vals [bOrder + 1]int32
	nd := t.nodes.At(n)
	copy(keys[:pos], nd.keys[:pos])
	copy(vals[:pos], nd.vals[:pos])
	keys[pos], vals[pos] = k, v
	copy(keys[pos+1:], nd.keys[pos:])
	copy(vals[pos+1:], nd.vals[pos:])
	right := t.newNode(nd.leaf)
	nd = t.nodes.At(n)
	rn := t.nodes.At(right)
	const h = (bOrder + 1) / 2
	copy(nd.keys[:h], keys[:h])
	copy(nd.vals[:h], vals[:h])
	nd.n = h
	copy(rn.keys[:], keys[h:])
	copy(rn.vals[:], vals[h:])
	rn.n = bOrder + 1 - h
	if nd.leaf {
		rn.prev, rn.next = n, nd.next
		if nd.next != treeNil {
			t.nodes.At(nd.next).prev = right
		}
		nd.next = right
	}
	return right
}

// find returns the position of key k in owner o (leaf treeNil when absent) and the path to it.
func (t *Tree) find(o int32, k bkey, path *treePath) cursor {
	if o < 0 || t.owners[o].root == treeNil {
		return cursor{treeNil, 0}
	}
	leaf := t.descend(o, k, path)
	pos := t.leafPos(leaf, k, false)
	if pos == t.nodes.At(leaf).n || t.nodes.At(leaf).keys[pos] != k {
		return cursor{treeNil, 0}
	}
	return cursor{leaf, pos}
}

// Delete removes the span equal to s (same owner, size and address); it reports whether one was there.
func (t *Tree) Delete(s Span) bool {
	var path treePath
	o := t.owner(s.Tagged, s.Stream, false)
	c := t.find(o, t.key(&s), &path)
	if c.leaf == treeNil {
		return false
	}
	t.deleteAt(o, &path, c)
	return true
}

// deleteAt removes the entry at c of owner o, reached by path, merging or refilling nodes that
// fall below bMinFill on the way up.
func (t *Tree) deleteAt(o int32, path *treePath, c cursor) {
	t.mods++
	t.count--
	nd := t.nodes.At(c.leaf)
	t.items.Release(nd.vals[c.pos])
	copy(nd.keys[c.pos:nd.n-1], nd.keys[c.pos+1:nd.n])
	copy(nd.vals[c.pos:nd.n-1], nd.vals[c.pos+1:nd.n])
	nd.n--
	n := c.leaf
	for d := path.depth - 1; d >= 0 && t.nodes.At(n).n < bMinFill; d-- {
		if !t.refill(path.nodes[d], path.idx[d]) {
			return
		}
		n = path.nodes[d]
	}
	ow := &t.owners[o]
	if root := t.nodes.At(ow.root); root.n == 0 {
		t.nodes.Release(ow.root)
		ow.root, ow.height = treeNil, 0
	} else if !root.leaf && root.n == 1 {
		t.nodes.Release(ow.root)
		ow.root = root.vals[0]
		ow.height--
	}
}

// refill brings child i of inner node p back to bMinFill entries, from a sibling that can spare
// one or by merging with it. It reports whether p lost a child.
func (t *Tree) refill(p, i int32) bool {
	pn := t.nodes.At(p)
	l, r, sep := i-1, i, i // the siblings l and r and the separator between them
	if i == 0 {
		l, r, sep = 0, 1, 1
	}
	ln, rn := t.nodes.At(pn.vals[l]), t.nodes.At(pn.vals[r])
	switch {
	case ln.n+rn.n <= bOrder:
		t.merge(p, sep)
		return true
	case i == r:
		t.rotateRight(pn, ln, rn, sep)
	default:
		t.rotateLeft(pn, ln, rn, sep)
	}
	return false
}

// merge appends child sep of p to child sep-1 and removes it from p.
func (t *Tree) merge(p, sep int32) {
	pn := t.nodes.At(p)
	li, ri := pn.vals[sep-1], pn.vals[sep]
	ln, rn := t.nodes.At(li), t.nodes.At(ri)
	if ln.leaf {
		copy(ln.keys[ln.n:], rn.keys[:rn.n])
		ln.next = rn.next
		if rn.next != treeNil {
			t.nodes.At(rn.next).prev = li
		}
	} else {
		ln.keys[ln.n] = pn.keys[sep]
		copy(ln.keys[ln.n+1:], rn.keys[1:rn.n])
	}
	copy(ln.vals[ln.n:], rn.vals[:rn.n])
	ln.n += rn.n
	t.nodes.Release(ri)
	copy(pn.keys[sep:pn.n-1], pn.keys[sep+1:pn.n])
	copy(pn.vals[sep:pn.n-1], pn.vals[sep+1:pn.n])
	pn.n--
}

// rotateRight moves ln's last entry to the front of its right sibling rn (separator sep of pn).
func (t *Tree) rotateRight(pn, ln, rn *bnode, sep int32) {
	copy(rn.keys[1:rn.n+1], rn.keys[:rn.n])
	copy(rn.vals[1:rn.n+1], rn.vals[:rn.n])
	rn.vals[0] = ln.vals[ln.n-1]
	if rn.leaf {
		rn.keys[0] = ln.keys[ln.n-1]
		pn.keys[sep] = rn.keys[0]
	} else {
		rn.keys[1] = pn.keys[sep]
		pn.keys[sep] = ln.keys[ln.n-1]
	}
	rn.n++
	ln.n--
}

// rotateLeft moves rn's first entry to the end of its left sibling ln (separator sep of pn).
func (t *Tree) rotateLeft(pn, ln, rn *bnode, sep int32) {
	ln.vals[ln.n] = rn.vals[0]
	if ln.leaf {
		ln.keys[ln.n] = rn.keys[0]
		pn.keys[sep] = rn.keys[1]
	} else {
		ln.keys[ln.n] = pn.keys[sep]
		pn.keys[sep] = rn.keys[1]
	}
	ln.n++
	copy(rn.keys[:rn.n-1], rn.keys[1:rn.n])
	copy(rn.vals[:rn.n-1], rn.vals[1:rn.n])
	rn.n--
}

// fits reports whether key k may take the place of the entry at c: it lies strictly between
// the entries before and after it.
func (t *Tree) fits(c cursor, k bkey) bool {
	if p := t.prev(c); p.leaf != treeNil && !t.nodes.At(p.leaf).keys[p.pos].less(k) {
		return false
	}
	nx := t.next(c)
	return !t.valid(nx) || k.less(t.nodes.At(nx.leaf).keys[nx.pos])
}

// replace puts s (key k, same owner) at c, reached by path, where fits allows it. The separators
// on either side of the leaf bound its keys: a first key becomes the one on its left, and a last
// key moves the one on its right up to the next leaf's first key (a delete may have left it lower).
func (t *Tree) replace(path *treePath, c cursor, k bkey, s *Span) {
	t.mods++
	nd := t.nodes.At(c.leaf)
	nd.keys[c.pos] = k
	*t.items.At(nd.vals[c.pos]) = *s
	if c.pos == 0 {
		for d := path.depth - 1; d >= 0; d-- {
			if i := path.idx[d]; i > 0 {
				t.nodes.At(path.nodes[d]).keys[i] = k
				break
			}
		}
	}
	if c.pos == nd.n-1 && nd.next != treeNil {
		for d := path.depth - 1; d >= 0; d-- {
			if p, i := path.nodes[d], path.idx[d]; i+1 < t.nodes.At(p).n {
				t.nodes.At(p).keys[i+1] = t.nodes.At(nd.next).keys[0]
				break
			}
		}
	}
}

// rekey replaces old, which must be in the tree, by s. When s has old's owner and falls between
// old's neighbours it takes old's place (no rebalancing); otherwise it is a delete and an insert.
func (t *Tree) rekey(old, s Span) {
	var path treePath
	o := t.owner(old.Tagged, old.Stream, false)
	c := t.find(o, t.key(&old), &path)
	if c.leaf == treeNil {
		t.Insert(s)
		return
	}
	if k := t.key(&s); old.ownerKey() == s.ownerKey() && t.fits(c, k) {
		t.replace(&path, c, k, &s)
		return
	}
	t.deleteAt(o, &path, c)
	t.Insert(s)
}

func (s *Span) ownerKey() ownerKey { return ownerKey{s.Tagged, s.Stream} }

// treeHint is a position found by lowerBoundHint, usable while the tree's mods stay the same.
type treeHint struct {
	path  treePath
	at    cursor
	owner int32
	mods  uint64
}

// lowerBoundHint returns the smallest span of key's owner not below key, and records where it is.
func (t *Tree) lowerBoundHint(key *Span, h *treeHint) (*Span, bool) {
	o := t.owner(key.Tagged, key.Stream, false)
	if o < 0 {
		return nil, false
	}
	c := t.seek(o, t.key(key), false, &h.path)
	if !t.valid(c) {
		return nil, false
	}
	if h.path.depth < 0 { // it is the next leaf's first key: find the way to it
		t.descend(o, t.nodes.At(c.leaf).keys[0], &h.path)
	}
	h.at, h.owner, h.mods = c, o, t.mods
	return t.at(c), true
}

// deleteHint removes the span at h if the tree is unchanged since; it reports whether it did.
func (t *Tree) deleteHint(h *treeHint) bool {
	if t.mods != h.mods {
		return false
	}
	t.deleteAt(h.owner, &h.path, h.at)
	return true
}

// rekeyHint replaces the span at h, old, by s of the same owner: in place when the tree is
// unchanged since h was taken (use says h is about old) and s sits between old's neighbours,
// else without a second search when h is still good, else as rekey.
func (t *Tree) rekeyHint(h *treeHint, use bool, old, s Span) {
	if !use || t.mods != h.mods {
		t.rekey(old, s)
		return
	}
	if k := t.key(&s); t.fits(h.at, k) {
		t.replace(&h.path, h.at, k, &s)
		return
	}
	t.deleteAt(h.owner, &h.path, h.at)
	t.Insert(s)
}

// LowerBound returns the smallest span not below key.
func (t *Tree) LowerBound(key Span) (Span, bool) { return t.bound(key, false) }

// Above returns the smallest span greater than key.
func (t *Tree) Above(key Span) (Span, bool) { return t.bound(key, true) }

func (t *Tree) bound(key Span, strict bool) (Span, bool) {
	var path treePath
	ko := key.ownerKey()
	for _, o := range t.sorted {
		ow := &t.owners[o]
		var c cursor
		switch {
		case ow.less(ko):
			continue
		case ow.ownerKey == ko:
			c = t.seek(o, t.key(&key), strict, &path)
		default:
			c = t.first(o)
		}
		if t.valid(c) {
			return *t.at(c), true
		}
	}
	return Span{}, false
}

// Below returns the greatest span less than key.
func (t *Tree) Below(key Span) (Span, bool) {
	var path treePath
	ko := key.ownerKey()
	for j := len(t.sorted) - 1; j >= 0; j-- {
		o := t.sorted[j]
		ow := &t.owners[o]
		var c cursor
		switch {
		case ko.less(ow.ownerKey):
			continue
		case ow.ownerKey == ko:
			c = t.prev(t.seek(o, t.key(&key), false, &path))
		default:
			c = t.last(o)
		}
		if c.leaf != treeNil {
			return *t.at(c), true
		}
	}
	return Span{}, false
}

// ascend calls fn on the spans of the given owner from the first not below key, in order, until
// fn returns false, and records in h where the first one is. fn must not change the tree.
func (t *Tree) ascend(key Span, h *treeHint, fn func(Span) bool) {
	s, ok := t.lowerBoundHint(&key, h)
	if !ok {
		return
	}
	for c := h.at; fn(*s); s = t.at(c) {
		if c = t.next(c); !t.valid(c) {
			return
		}
	}
}

// descendBelow calls fn on the spans of the given owner below key, greatest first, until fn
// returns false. fn must not change the tree.
func (t *Tree) descendBelow(key Span, fn func(Span) bool) {
	o := t.owner(key.Tagged, key.Stream, false)
	if o < 0 {
		return
	}
	var path treePath
	for c := t.prev(t.seek(o, t.key(&key), false, &path)); c.leaf != treeNil && fn(*t.at(c)); c = t.prev(c) {
	}
}

// each calls fn on every span in order.
func (t *Tree) each(fn func(Span)) {
	for _, o := range t.sorted {
		for c := t.first(o); t.valid(c); c = t.next(c) {
			fn(*t.at(c))
		}
	}
}
