package intercept

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortBySeq checks that sortBySeq orders records exactly as a stable sort by seq does, for nearly
// sorted segments (the insertion sort) and for reversed ones (the fallback), with repeated seqs.
func TestSortBySeq(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	nearly := make([]rawRecord, 8192)
	for i := range nearly {
		nearly[i] = rawRecord{Seq: uint64(i / 3), TimeNs: int64(i)}
	}
	for i := 0; i+4 <= len(nearly); i += 4 {
		rng.Shuffle(4, func(a, b int) { nearly[i+a], nearly[i+b] = nearly[i+b], nearly[i+a] })
	}
	reversed := make([]rawRecord, 8192)
	for i := range reversed {
		reversed[i] = rawRecord{Seq: uint64(len(reversed)-i) / 2, TimeNs: int64(i)}
	}
	for name, recs := range map[string][]rawRecord{"nearly sorted": nearly, "reversed": reversed} {
		want := slices.Clone(recs)
		slices.SortStableFunc(want, func(a, b rawRecord) int { return cmp.Compare(a.Seq, b.Seq) })
		sortBySeq(recs)
		if !slices.Equal(recs, want) {
			t.Errorf("%s: sortBySeq differs from a stable sort by seq", name)
		}
	}
}
