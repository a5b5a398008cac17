package pool

import "testing"

// TestClassOf: a request goes to the smallest class that holds it, none above the largest.
func TestClassOf(t *testing.T) {
	classes := []uint64{512, 1024, 4096}
	for size, want := range map[uint64]int{1: 0, 512: 0, 513: 1, 1024: 1, 4000: 2, 4096: 2, 4097: -1} {
		if got := classOf(classes, size); got != want {
			t.Errorf("classOf(%d) = %d, want %d", size, got, want)
		}
	}
	if got := classOf(nil, 1); got != -1 {
		t.Errorf("classOf(no classes) = %d, want -1", got)
	}
}
