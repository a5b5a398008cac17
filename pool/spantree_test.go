package pool

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// spanCmp is the order of a spanTree written out plainly: owner (untagged first, then by
// stream), then size (bySize), then address.
func spanCmp(bySize bool) func(a, b span) int {
	return func(a, b span) int {
		switch {
		case a.tagged != b.tagged:
			if !a.tagged {
				return -1
			}
			return 1
		case a.stream != b.stream:
			return cmpU64(a.stream, b.stream)
		case bySize && a.size != b.size:
			return cmpU64(a.size, b.size)
		}
		return cmpU64(a.addr, b.addr)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// treeModel drives a spanTree and a sorted slice of the same spans side by side.
type treeModel struct {
	t    *testing.T
	tree *spanTree
	ref  []span
	cmp  func(a, b span) int
}

func newTreeModel(t *testing.T, bySize bool) *treeModel {
	return &treeModel{t: t, tree: newSpanTree(bySize), cmp: spanCmp(bySize)}
}

func (m *treeModel) insert(s span) {
	at, found := slices.BinarySearchFunc(m.ref, s, m.cmp)
	if found {
		return
	}
	m.tree.insert(s)
	m.ref = slices.Insert(m.ref, at, s)
}

func (m *treeModel) delete(s span) {
	at, found := slices.BinarySearchFunc(m.ref, s, m.cmp)
	if deleted := m.tree.delete(s); deleted != found {
		m.t.Fatalf("delete(%+v) = %v, present %v", s, deleted, found)
	}
	if found {
		m.ref = slices.Delete(m.ref, at, at+1)
	}
}

// rekey replaces the i-th span (of the sorted order) by s, unless s is already there.
func (m *treeModel) rekey(i int, s span) {
	if len(m.ref) == 0 {
		return
	}
	i %= len(m.ref)
	old := m.ref[i]
	if _, found := slices.BinarySearchFunc(m.ref, s, m.cmp); found && m.cmp(old, s) != 0 {
		return
	}
	m.tree.rekey(old, s)
	m.ref = slices.Delete(m.ref, i, i+1)
	at, _ := slices.BinarySearchFunc(m.ref, s, m.cmp)
	m.ref = slices.Insert(m.ref, at, s)
}

// check compares the tree's queries for key with the sorted slice, and the whole content.
func (m *treeModel) check(key span, full bool) {
	m.t.Helper()
	at, found := slices.BinarySearchFunc(m.ref, key, m.cmp)
	if got, ok := m.tree.lowerBound(key); ok != (at < len(m.ref)) || (ok && got != m.ref[at]) {
		m.t.Fatalf("lowerBound(%+v) = %+v %v", key, got, ok)
	}
	if got, ok := m.tree.below(key); ok != (at > 0) || (ok && got != m.ref[at-1]) {
		m.t.Fatalf("below(%+v) = %+v %v", key, got, ok)
	}
	up := at
	if found {
		up++
	}
	if got, ok := m.tree.above(key); ok != (up < len(m.ref)) || (ok && got != m.ref[up]) {
		m.t.Fatalf("above(%+v) = %+v %v", key, got, ok)
	}
	if m.tree.count != len(m.ref) {
		m.t.Fatalf("count %d, want %d", m.tree.count, len(m.ref))
	}
	if full {
		var inOrder []span
		m.tree.each(func(s span) { inOrder = append(inOrder, s) })
		if !slices.Equal(inOrder, m.ref) {
			m.t.Fatalf("in-order walk differs from the sorted slice:\n%+v\n%+v", inOrder, m.ref)
		}
		m.checkShape()
	}
}

// checkShape checks every owner's B+tree: fill, separators, leaf chain and height.
func (m *treeModel) checkShape() {
	m.t.Helper()
	tr := m.tree
	for o := range tr.owners {
		ow := tr.owners[o]
		if ow.root == treeNil {
			continue
		}
		var leaves []int32
		m.checkNode(ow.root, ow.height, true, nil, nil, &leaves)
		for i, l := range leaves {
			if want := neighbour(leaves, i-1); tr.nodes[l].prev != want {
				m.t.Fatalf("owner %d leaf %d: prev %d, want %d", o, l, tr.nodes[l].prev, want)
			}
			if want := neighbour(leaves, i+1); tr.nodes[l].next != want {
				m.t.Fatalf("owner %d leaf %d: next %d, want %d", o, l, tr.nodes[l].next, want)
			}
		}
	}
}

func neighbour(leaves []int32, i int) int32 {
	if i < 0 || i >= len(leaves) {
		return treeNil
	}
	return leaves[i]
}

// checkNode checks the subtree at n, level levels high, whose keys must lie in [lo, hi).
func (m *treeModel) checkNode(n, level int32, root bool, lo, hi *bkey, leaves *[]int32) {
	m.t.Helper()
	nd := &m.tree.nodes[n]
	if nd.leaf != (level == 1) || nd.n > bOrder || (!root && nd.n < bMinFill) || nd.n == 0 || (!nd.leaf && nd.n < 2) {
		m.t.Fatalf("node %d: leaf %v at level %d with %d entries", n, nd.leaf, level, nd.n)
	}
	if nd.leaf {
		for i := range nd.n {
			k := nd.keys[i]
			if (lo != nil && k.less(*lo)) || (hi != nil && !k.less(*hi)) || (i > 0 && !nd.keys[i-1].less(k)) {
				m.t.Fatalf("leaf %d: key %d %+v out of order or range", n, i, k)
			}
		}
		*leaves = append(*leaves, n)
		return
	}
	for i := range nd.n {
		clo, chi := lo, hi
		if i > 0 {
			clo = &nd.keys[i]
		}
		if i+1 < nd.n {
			chi = &nd.keys[i+1]
		}
		m.checkNode(nd.vals[i], level-1, false, clo, chi, leaves)
	}
}

// TestSpanTreeAgainstSortedSlice checks the tree against a sorted slice on random inserts,
// deletes, rekeys and queries, for both orders and for few and many spans per owner.
func TestSpanTreeAgainstSortedSlice(t *testing.T) {
	for _, bySize := range []bool{true, false} {
		for _, spread := range []uint64{50, 5000} {
			m := newTreeModel(t, bySize)
			rng := rand.New(rand.NewPCG(3, spread))
			randomSpan := func() span {
				return span{tagged: rng.IntN(3) > 0, stream: rng.Uint64N(3), size: rng.Uint64N(spread), addr: rng.Uint64N(20 * spread)}
			}
			for i := range 30000 {
				switch r := rng.IntN(10); {
				case r < 4 || (i < 3000 && r < 7):
					m.insert(randomSpan())
				case r < 7:
					m.delete(randomSpan())
				case r < 8 && len(m.ref) > 0:
					m.delete(m.ref[rng.IntN(len(m.ref))])
				default:
					i := rng.IntN(1 << 20)
					m.rekey(i, nearby(rng, m, i, randomSpan))
				}
				m.check(randomSpan(), i%100 == 0)
			}
			m.check(span{}, true)
		}
	}
}

// nearby returns a span close to the i-th one in the tree (so that rekeys often stay in place), or a
// random one.
func nearby(rng *rand.Rand, m *treeModel, i int, random func() span) span {
	if len(m.ref) == 0 || rng.IntN(2) == 0 {
		return random()
	}
	i %= len(m.ref)
	s := m.ref[i]
	if i+1 < len(m.ref) && rng.IntN(2) == 0 {
		s = m.ref[i+1] // just below the next one, beyond a separator left behind by a delete
		s.addr -= min(s.addr, 1)
		return s
	}
	s.size += rng.Uint64N(3)
	s.addr += rng.Uint64N(3)
	return s
}

// TestSpanTreeHints checks the remembered position of lowerBoundHint: rekey in place or by delete
// and insert while the tree is unchanged, a search or a refusal after a change.
func TestSpanTreeHints(t *testing.T) {
	m := newTreeModel(t, bySizeOrder)
	for i := range uint64(100) {
		m.insert(span{size: 10 * (i % 10), addr: i})
	}
	var h treeHint
	s, ok := m.tree.lowerBoundHint(&span{size: 35}, &h)
	if !ok || s.size != 40 || s.addr != 4 {
		t.Fatalf("lowerBoundHint(35) = %+v %v, want size 40 addr 4", s, ok)
	}
	m.tree.rekeyHint(&h, true, *s, span{size: 31, addr: 4}) // between (30, 93) and (40, 14): in place
	m.ref[40] = span{size: 31, addr: 4}
	if m.tree.items[m.tree.nodes[h.at.leaf].vals[h.at.pos]] != m.ref[40] {
		t.Fatal("rekeyHint did not replace (40, 4) in place by (31, 4)")
	}
	if m.tree.deleteHint(&h) {
		t.Fatal("deleteHint used a hint taken before a change")
	}
	m.check(span{size: 31}, true)
	if s, ok = m.tree.lowerBoundHint(&span{size: 31}, &h); !ok {
		t.Fatal("lowerBoundHint(31) found nothing")
	}
	m.tree.rekeyHint(&h, true, *s, span{size: 95, addr: 1}) // moves to the end
	m.ref = append(slices.Delete(m.ref, 40, 41), span{size: 95, addr: 1})
	m.check(span{size: 95}, true)
	m.tree.rekeyHint(&h, true, span{size: 95, addr: 1}, span{size: 31, addr: 4}) // stale hint: a search
	m.ref = slices.Insert(m.ref[:len(m.ref)-1], 40, span{size: 31, addr: 4})
	m.check(span{size: 31}, true)
	if _, ok := m.tree.lowerBoundHint(&span{size: 31}, &h); !ok || !m.tree.deleteHint(&h) {
		t.Fatal("deleteHint refused a fresh hint")
	}
	m.ref = slices.Delete(m.ref, 40, 41)
	if _, ok := m.tree.lowerBoundHint(&span{size: 91}, &h); ok {
		t.Fatal("lowerBoundHint found a span above the largest")
	}
	if _, ok := m.tree.lowerBoundHint(&span{tagged: true, size: 1}, &h); ok {
		t.Fatal("lowerBoundHint found a span of an owner with none")
	}
	m.check(span{size: 50}, true)
}

// TestSpanTreeOwners checks that queries cross from one owner to the next in owner order, and
// that walks of one owner stop at its ends.
func TestSpanTreeOwners(t *testing.T) {
	tree := newSpanTree(bySizeOrder)
	for _, s := range []span{{tagged: true, stream: 7, size: 1}, {size: 5}, {tagged: true, stream: 2, size: 9}} {
		tree.insert(s)
	}
	if s, ok := tree.lowerBound(span{tagged: true}); !ok || s.stream != 2 {
		t.Fatalf("lowerBound(tagged) = %+v %v, want stream 2", s, ok)
	}
	if s, ok := tree.above(span{tagged: true, stream: 2, size: 9}); !ok || s.stream != 7 {
		t.Fatalf("above(stream 2) = %+v %v, want stream 7", s, ok)
	}
	if s, ok := tree.below(span{tagged: true, stream: 2}); !ok || s.tagged || s.size != 5 {
		t.Fatalf("below(stream 2) = %+v %v, want the untagged span", s, ok)
	}
	var sizes []uint64
	tree.ascend(span{tagged: true, stream: 2}, &treeHint{}, func(s span) bool { sizes = append(sizes, s.size); return true })
	tree.descendBelow(span{tagged: true, stream: 7, size: 2}, func(s span) bool { sizes = append(sizes, s.size); return true })
	if !slices.Equal(sizes, []uint64{9, 1}) {
		t.Fatalf("walks of streams 2 and 7 gave sizes %v, want [9 1]", sizes)
	}
}

// FuzzSpanTree replays byte strings as operations on a tree and a sorted slice.
func FuzzSpanTree(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 201, 202})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := newTreeModel(t, len(ops)%2 == 0)
		for i := 0; i+1 < len(ops); i += 2 {
			op, v := ops[i], uint64(ops[i+1])
			s := span{tagged: op&1 != 0, stream: uint64(op>>1) & 1, size: v >> 4, addr: v & 15}
			switch op >> 6 {
			case 0, 1:
				m.insert(s)
			case 2:
				m.delete(s)
			default:
				m.rekey(int(v), s)
			}
			m.check(s, false)
		}
		m.check(span{}, true)
	})
}
