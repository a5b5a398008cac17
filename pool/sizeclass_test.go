package pool

import "testing"

func TestClassOf(t *testing.T) {
	classes := []uint64{512, 1024, 4096}
	for size, want := range map[uint64]int{1: 0, 512: 0, 513: 1, 1024: 1, 4000: 2, 4096: 2, 4097: -1} {
		if got := ClassOf(classes, size); got != want {
			t.Errorf("ClassOf(%d) = %d, want %d", size, got, want)
		}
	}
	if got := ClassOf(nil, 1); got != -1 {
		t.Errorf("ClassOf(no classes) = %d, want -1", got)
	}
}
