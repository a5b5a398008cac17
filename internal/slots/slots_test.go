package slots

import "testing"

// Indexes come back last released first, and new ones follow the highest handed out.
func TestReuseOrder(t *testing.T) {
	var s Table[string, uint32]
	a, b, c := s.Put("a"), s.Put("b"), s.Put("c")
	s.Release(a)
	s.Release(c)
	d, e, f := s.Put("d"), s.Put("e"), s.Put("f")
	if a != 0 || b != 1 || c != 2 || d != 2 || e != 0 || f != 3 || s.Len() != 4 {
		t.Errorf("indexes %d %d %d, then %d %d %d, len %d; want 0 1 2, then 2 0 3, len 4", a, b, c, d, e, f, s.Len())
	}
	if *s.At(0) != "e" || *s.At(1) != "b" || *s.At(2) != "d" || *s.At(3) != "f" {
		t.Errorf("values %q %q %q %q, want e b d f", *s.At(0), *s.At(1), *s.At(2), *s.At(3))
	}
}
