package upstreams

import "testing"

// AlignUp rounds up to a power-of-two alignment and to any other granularity alike.
func TestAlignUp(t *testing.T) {
	for _, c := range []struct{ n, align, want uint64 }{
		{0, 512, 0}, {1, 512, 512}, {512, 512, 512}, {513, 512, 1024},
		{1, 3 << 20, 3 << 20}, {3<<20 + 1, 3 << 20, 6 << 20}, {7, 1, 7},
	} {
		if got := AlignUp(c.n, c.align); got != c.want {
			t.Errorf("AlignUp(%d, %d) = %d, want %d", c.n, c.align, got, c.want)
		}
	}
}
