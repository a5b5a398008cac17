package stats

import (
	"math/rand/v2"
	"testing"
)

// TestTableMatchesMap runs random puts, gets and deletes against a Go map.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tab Table[uint64]
	ref := map[Key]uint64{}
	for i := range 200000 {
		k := Key{PID: uint32(rng.IntN(3)), Device: int32(rng.IntN(2)) - 1, Addr: uint64(rng.IntN(5000)) * 512}
		switch rng.IntN(3) {
		case 0:
			old, replaced := tab.Put(k, uint64(i))
			want, had := ref[k]
			if replaced != had || replaced && old != want {
				t.Fatalf("put %v: old %d %v, want %d %v", k, old, replaced, want, had)
			}
			ref[k] = uint64(i)
		case 1:
			v, ok := tab.Delete(k)
			want, had := ref[k]
			if ok != had || ok && v != want {
				t.Fatalf("delete %v: %d %v, want %d %v", k, v, ok, want, had)
			}
			delete(ref, k)
		default:
			v, ok := tab.Get(k)
			want, had := ref[k]
			if ok != had || ok && v != want {
				t.Fatalf("get %v: %d %v, want %d %v", k, v, ok, want, had)
			}
		}
		if tab.Len() != len(ref) {
			t.Fatalf("len %d, want %d", tab.Len(), len(ref))
		}
	}
	n := 0
	tab.All(func(k Key, v uint64) {
		if ref[k] != v {
			t.Fatalf("All: %v = %d, want %d", k, v, ref[k])
		}
		n++
	})
	if n != len(ref) {
		t.Fatalf("All visited %d, want %d", n, len(ref))
	}
}

// BenchmarkTable measures the statistics pass's use of a Table: one Put and one Delete of block
// keys of one process and device (ns/op), with 128K blocks live.
func BenchmarkTable(b *testing.B) {
	const live, n = 1 << 17, 1 << 18
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = Key{PID: 7, Addr: 1<<32 + 512*uint64(rng.IntN(1<<26))}
	}
	var tab Table[int32]
	for i := range live {
		tab.Put(keys[i], int32(i))
	}
	for i := 0; b.Loop(); i++ {
		tab.Put(keys[(i+live)%n], int32(i))
		tab.Delete(keys[i%n])
	}
}
