package addrindex

import (
	"math/rand/v2"
	"testing"
)

// TestIndexMatchesMap puts and takes random block addresses (clustered, as in an arena) and
// checks every answer against a map, through several growths and deletions that shift entries.
func TestIndexMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	x, ref := New[liveBlock](), map[uint64]liveBlock{}
	var live []uint64
	for i := range 200000 {
		if len(live) == 0 || rng.IntN(100) < 55 {
			addr := simBase + 512*rng.Uint64N(1<<16)
			if _, ok := ref[addr]; ok {
				continue
			}
			x.Put(addr, liveBlock{node: int32(i), req: uint64(i) * 3})
			ref[addr] = liveBlock{node: int32(i), req: uint64(i) * 3}
			live = append(live, addr)
			continue
		}
		k := rng.IntN(len(live))
		addr := live[k]
		live[k] = live[len(live)-1]
		live = live[:len(live)-1]
		if p := x.Get(addr); p == nil || *p != ref[addr] {
			t.Fatalf("get %#x = %v; want %v", addr, p, ref[addr])
		}
		got, ok := x.Take(addr)
		if want := ref[addr]; !ok || got != want {
			t.Fatalf("take %#x = %v, %v; want %v", addr, got, ok, want)
		}
		delete(ref, addr)
		if x.Get(addr) != nil {
			t.Fatalf("get %#x after take found it", addr)
		}
		if _, ok := x.Take(addr); ok {
			t.Fatalf("take %#x twice succeeded", addr)
		}
	}
	if x.Len() != len(ref) {
		t.Fatalf("count %d, want %d", x.Len(), len(ref))
	}
	n := 0
	x.Each(func(addr uint64, v *liveBlock) {
		n++
		if want := ref[addr]; *v != want {
			t.Fatalf("entry %#x = %v; want %v", addr, *v, want)
		}
	})
	if n != len(ref) {
		t.Fatalf("each visited %d, want %d", n, len(ref))
	}
}

// liveBlock is a value like those of package pool's index of live blocks.
type liveBlock struct {
	req  uint64
	node int32
}

// simBase is where package pool's simulated Upstream starts handing out addresses.
const simBase = 1 << 32

// TestZeroIndexPutReplaces checks that the zero Index is empty and usable, and that Put on an
// address already there replaces its value and returns the old one.
func TestZeroIndexPutReplaces(t *testing.T) {
	var x Index[int]
	if x.Get(simBase) != nil || x.Len() != 0 {
		t.Fatal("zero index not empty")
	}
	if _, ok := x.Take(simBase); ok {
		t.Fatal("take from the zero index succeeded")
	}
	if old, replaced := x.Put(simBase, 1); replaced {
		t.Fatalf("first put replaced %d", old)
	}
	if old, replaced := x.Put(simBase, 2); !replaced || old != 1 || x.Len() != 1 || *x.Get(simBase) != 2 {
		t.Fatalf("second put: old %d, replaced %v, len %d, value %d; want 1, true, 1, 2", old, replaced, x.Len(), *x.Get(simBase))
	}
}
