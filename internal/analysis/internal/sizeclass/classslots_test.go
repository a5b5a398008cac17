package sizeclass

import "testing"

// TestClassOf: a request goes to the smallest class that holds it, none above the largest, as
// in pool's size-class policy.
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

// ClassSlots: shared free lists need the most blocks live at once per class; per-stream ones a new
// slot whenever a stream has none of its own; requests above the threshold take none.
func TestClassSlots(t *testing.T) {
	for _, perStream := range []bool{false, true} {
		c := NewClassSlots([]uint64{512, 4096}, 4096, perStream)
		a := c.Alloc(100, 1)  // class 0, stream 1
		b := c.Alloc(512, 2)  // class 0, stream 2
		c.Free(a, 1)          // kept for stream 1 (per stream)
		d := c.Alloc(300, 2)  // shared: reuses a's slot; per stream: stream 2 has none kept, a new slot
		e := c.Alloc(5000, 1) // the arena
		f := c.Alloc(4096, 1) // class 1
		c.Free(b, 2)
		c.Free(d, 2)
		c.Free(e, 1)
		g := c.Alloc(1, 2) // both: a slot kept for stream 2 (or the shared list)
		if a != 0 || b != 0 || d != 0 || e != -1 || f != 1 || g != 0 {
			t.Fatalf("perStream %v: classes %d %d %d %d %d %d", perStream, a, b, d, e, f, g)
		}
		want := []uint64{2, 1}
		if perStream {
			want = []uint64{3, 1}
		}
		if got := c.Slots(); got[0] != want[0] || got[1] != want[1] {
			t.Errorf("perStream %v: slots %v, want %v", perStream, got, want)
		}
	}
}
