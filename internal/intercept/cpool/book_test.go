//go:build cgo

package cpool

import (
	"testing"

	"github.com/allocscope/allocscope/pool"
)

// The bookkeeping of the largest plan pool.Config.Validate passes stays under
// pool.MaxBookkeepingBytes: pool.MaxSlots slots spread so that every class's tables round up to
// nearly twice their size (2^16+1 slots a class), the worst case of cp_book_bytes.
func TestBookBytesOfTheLargestPlan(t *testing.T) {
	var classes []pool.Class
	left := uint64(pool.MaxSlots)
	for i := 0; i < 64; i++ {
		n := min(uint64(1<<16+1), left)
		classes = append(classes, pool.Class{Size: 512 * uint64(i+1), Slots: n})
		left -= n
	}
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass,
		SizeClass: &pool.SizeClassConfig{Classes: classes}}
	got, err := BookBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const want = 669213696 // 638 MiB
	if got != want || got >= pool.MaxBookkeepingBytes {
		t.Fatalf("book of %d slots = %d bytes, want %d (under %d)", pool.MaxSlots, got, uint64(want), uint64(pool.MaxBookkeepingBytes))
	}
	classes[63].Slots++
	if _, err := BookBytes(cfg); err == nil || err.Error() != "pool config: size_class.classes[63].slots: 4194305 slots in all "+
		"exceed the limit of 4194304 (the pool's bookkeeping must stay under 1 GiB of host memory)" {
		t.Fatalf("one slot more: %v", err)
	}
}
