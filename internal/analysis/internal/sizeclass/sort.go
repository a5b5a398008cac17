package sizeclass

import (
	"cmp"
	"slices"
)

func sortSizes(s []Size) {
	slices.SortFunc(s, func(a, b Size) int { return cmp.Compare(a.Bytes, b.Bytes) })
}
