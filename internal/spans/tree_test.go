package spans

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// spanCmp is the order of a Tree written out plainly: owner (untagged first, then by
// stream), then size (bySize), then address.
func spanCmp(bySize bool) func(a, b Span) int {
	return func(a, b Span) int {
		switch {
		case a.Tagged != b.Tagged:
			if !a.Tagged {
				return -1
			}
			return 1
		case a.Stream != b.Stream:
			return cmp.Compare(a.Stream, b.Stream)
		case bySize && a.Size != b.Size:
			return cmp.Compare(a.Size, b.Size)
		}
		return cmp.Compare(a.Addr, b.Addr)
	}
}

// treeModel drives a Tree and a sorted slice of the same spans side by side.
type treeModel struct {
	t    *testing.T
	tree *Tree
	ref  []Span
	cmp  func(a, b Span) int
}

func newTreeModel(t *testing.T, bySize bool) *treeModel {
	return &treeModel{t: t, tree: NewTree(Order(bySize)), cmp: spanCmp(bySize)}
}

func (m *treeModel) insert(s Span) {
	at, found := slices.BinarySearchFunc(m.ref, s, m.cmp)
	if found {
		return
	}
	m.tree.Insert(s)
	m.ref = slices.Insert(m.ref, at, s)
}

func (m *treeModel) delete(s Span) {
	at, found := slices.BinarySearchFunc(m.ref, s, m.cmp)
	if deleted := m.tree.Delete(s); deleted != found {
		m.t.Fatalf("delete(%+v) = %v, present %v", s, deleted, found)
	}
	if found {
		m.ref = slices.Delete(m.ref, at, at+1)
	}
}

// rekey replaces the i-th Span (of the sorted order) by s, unless s is already there.
func (m *treeModel) rekey(i int, s Span) {
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
func (m *treeModel) check(key Span, full bool) {
	m.t.Helper()
	at, found := slices.BinarySearchFunc(m.ref, key, m.cmp)
	if got, ok := m.tree.LowerBound(key); ok != (at < len(m.ref)) || (ok && got != m.ref[at]) {
		m.t.Fatalf("lowerBound(%+v) = %+v %v", key, got, ok)
	}
	if got, ok := m.tree.Below(key); ok != (at > 0) || (ok && got != m.ref[at-1]) {
		m.t.Fatalf("below(%+v) = %+v %v", key, got, ok)
	}
	up := at
	if found {
		up++
	}
	if got, ok := m.tree.Above(key); ok != (up < len(m.ref)) || (ok && got != m.ref[up]) {
		m.t.Fatalf("above(%+v) = %+v %v", key, got, ok)
	}
	if m.tree.count != len(m.ref) {
		m.t.Fatalf("count %d, want %d", m.tree.count, len(m.ref))
	}
	if full {
		var inOrder []Span
		m.tree.each(func(s Span) { inOrder = append(inOrder, s) })
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
			if want := neighbour(leaves, i-1); tr.nodes.At(l).prev != want {
				m.t.Fatalf("owner %d leaf %d: prev %d, want %d", o, l, tr.nodes.At(l).prev, want)
			}
			if want := neighbour(leaves, i+1); tr.nodes.At(l).next != want {
				m.t.Fatalf("owner %d leaf %d: next %d, want %d", o, l, tr.nodes.At(l).next, want)
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
	nd := m.tree.nodes.At(n)
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
			randomSpan := func() Span {
				return Span{Tagged: rng.IntN(3) > 0, Stream: rng.Uint64N(3), Size: rng.Uint64N(spread), Addr: rng.Uint64N(20 * spread)}
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
			m.check(Span{}, true)
		}
	}
}

// nearby returns a Span close to the i-th one in the tree (so that rekeys often stay in place), or a
// random one.
func nearby(rng *rand.Rand, m *treeModel, i int, random func() Span) Span {
	if len(m.ref) == 0 || rng.IntN(2) == 0 {
		return random()
	}
	i %= len(m.ref)
	s := m.ref[i]
	if i+1 < len(m.ref) && rng.IntN(2) == 0 {
		s = m.ref[i+1] // just below the next one, beyond a separator left behind by a delete
		s.Addr -= min(s.Addr, 1)
		return s
	}
	s.Size += rng.Uint64N(3)
	s.Addr += rng.Uint64N(3)
	return s
}

// TestSpanTreeHints checks the remembered position of lowerBoundHint: rekey in place or by delete
// and insert while the tree is unchanged, a search or a refusal after a change.
func TestSpanTreeHints(t *testing.T) {
	m := newTreeModel(t, bool(BySize))
	for i := range uint64(100) {
		m.insert(Span{Size: 10 * (i % 10), Addr: i})
	}
	var h treeHint
	s, ok := m.tree.lowerBoundHint(&Span{Size: 35}, &h)
	if !ok || s.Size != 40 || s.Addr != 4 {
		t.Fatalf("lowerBoundHint(35) = %+v %v, want size 40 addr 4", s, ok)
	}
	m.tree.rekeyHint(&h, true, *s, Span{Size: 31, Addr: 4}) // between (30, 93) and (40, 14): in place
	m.ref[40] = Span{Size: 31, Addr: 4}
	if *m.tree.items.At(m.tree.nodes.At(h.at.leaf).vals[h.at.pos]) != m.ref[40] {
		t.Fatal("rekeyHint did not replace (40, 4) in place by (31, 4)")
	}
	if m.tree.deleteHint(&h) {
		t.Fatal("deleteHint used a hint taken before a change")
	}
	m.check(Span{Size: 31}, true)
	if s, ok = m.tree.lowerBoundHint(&Span{Size: 31}, &h); !ok {
		t.Fatal("lowerBoundHint(31) found nothing")
	}
	m.tree.rekeyHint(&h, true, *s, Span{Size: 95, Addr: 1}) // moves to the end
	m.ref = append(slices.Delete(m.ref, 40, 41), Span{Size: 95, Addr: 1})
	m.check(Span{Size: 95}, true)
	m.tree.rekeyHint(&h, true, Span{Size: 95, Addr: 1}, Span{Size: 31, Addr: 4}) // stale hint: a search
	m.ref = slices.Insert(m.ref[:len(m.ref)-1], 40, Span{Size: 31, Addr: 4})
	m.check(Span{Size: 31}, true)
	if _, ok := m.tree.lowerBoundHint(&Span{Size: 31}, &h); !ok || !m.tree.deleteHint(&h) {
		t.Fatal("deleteHint refused a fresh hint")
	}
	m.ref = slices.Delete(m.ref, 40, 41)
	if _, ok := m.tree.lowerBoundHint(&Span{Size: 91}, &h); ok {
		t.Fatal("lowerBoundHint found a Span above the largest")
	}
	if _, ok := m.tree.lowerBoundHint(&Span{Tagged: true, Size: 1}, &h); ok {
		t.Fatal("lowerBoundHint found a Span of an owner with none")
	}
	m.check(Span{Size: 50}, true)
}

// TestSpanTreeOwners checks that queries cross from one owner to the next in owner order, and
// that walks of one owner stop at its ends.
func TestSpanTreeOwners(t *testing.T) {
	tree := NewTree(BySize)
	for _, s := range []Span{{Tagged: true, Stream: 7, Size: 1}, {Size: 5}, {Tagged: true, Stream: 2, Size: 9}} {
		tree.Insert(s)
	}
	if s, ok := tree.LowerBound(Span{Tagged: true}); !ok || s.Stream != 2 {
		t.Fatalf("lowerBound(tagged) = %+v %v, want stream 2", s, ok)
	}
	if s, ok := tree.Above(Span{Tagged: true, Stream: 2, Size: 9}); !ok || s.Stream != 7 {
		t.Fatalf("above(stream 2) = %+v %v, want stream 7", s, ok)
	}
	if s, ok := tree.Below(Span{Tagged: true, Stream: 2}); !ok || s.Tagged || s.Size != 5 {
		t.Fatalf("below(stream 2) = %+v %v, want the untagged Span", s, ok)
	}
	var sizes []uint64
	tree.ascend(Span{Tagged: true, Stream: 2}, &treeHint{}, func(s Span) bool { sizes = append(sizes, s.Size); return true })
	tree.descendBelow(Span{Tagged: true, Stream: 7, Size: 2}, func(s Span) bool { sizes = append(sizes, s.Size); return true })
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
			s := Span{Tagged: op&1 != 0, Stream: uint64(op>>1) & 1, Size: v >> 4, Addr: v & 15}
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
		m.check(Span{}, true)
	})
}
