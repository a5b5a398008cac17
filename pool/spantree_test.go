package pool

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSpanTreeAgainstSortedSlice checks the AVL tree against a sorted slice on random inserts,
// deletes and queries, and checks its balance.
func TestSpanTreeAgainstSortedSlice(t *testing.T) {
	for _, bySize := range []bool{true, false} {
		tree := newSpanTree(bySize)
		var ref []span
		cmp := func(a, b span) int {
			if tree.less(&a, &b) {
				return -1
			}
			if tree.less(&b, &a) {
				return 1
			}
			return 0
		}
		rng := rand.New(rand.NewPCG(3, 4))
		randomSpan := func() span {
			return span{tagged: rng.IntN(3) > 0, stream: rng.Uint64N(3), size: rng.Uint64N(50), addr: rng.Uint64N(1000)}
		}
		for i := range 20000 {
			s := randomSpan()
			at, found := slices.BinarySearchFunc(ref, s, cmp)
			if rng.IntN(2) == 0 && !found {
				tree.insert(s)
				ref = slices.Insert(ref, at, s)
			} else if deleted := tree.delete(s); deleted != found {
				t.Fatalf("delete(%+v) = %v, present %v", s, deleted, found)
			} else if found {
				ref = slices.Delete(ref, at, at+1)
			}
			key := randomSpan()
			at, _ = slices.BinarySearchFunc(ref, key, cmp)
			if got, ok := tree.lowerBound(key); ok != (at < len(ref)) || (ok && got != ref[at]) {
				t.Fatalf("op %d: lowerBound(%+v) = %+v %v", i, key, got, ok)
			}
			if got, ok := tree.below(key); ok != (at > 0) || (ok && got != ref[at-1]) {
				t.Fatalf("op %d: below(%+v) = %+v %v", i, key, got, ok)
			}
			if tree.count != len(ref) {
				t.Fatalf("count %d, want %d", tree.count, len(ref))
			}
		}
		var inOrder []span
		tree.each(func(s span) { inOrder = append(inOrder, s) })
		if !slices.Equal(inOrder, ref) {
			t.Fatal("in-order walk differs from the sorted slice")
		}
		// An AVL tree of n nodes is at most 1.44·log2(n+2) high.
		if h, n := tree.height(tree.root), len(ref); n > 0 && float64(h) > 1.45*log2(float64(n+2)) {
			t.Fatalf("height %d for %d nodes", h, n)
		}
	}
}

func log2(x float64) float64 {
	n := 0.0
	for x >= 2 {
		x /= 2
		n++
	}
	return n + x - 1
}
