package pool

import (
	"math/rand/v2"
	"testing"
)

// TestAddrIndexMatchesMap puts and takes random block addresses (clustered, as in an arena) and
// checks every answer against a map, through several growths and deletions that shift entries.
func TestAddrIndexMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	x, ref := newAddrIndex(), map[uint64]addrSlot{}
	var live []uint64
	for i := range 200000 {
		if len(live) == 0 || rng.IntN(100) < 55 {
			addr := SimBase + 512*rng.Uint64N(1<<16)
			if _, ok := ref[addr]; ok {
				continue
			}
			x.put(addr, int32(i), uint64(i)*3)
			ref[addr] = addrSlot{addr: addr, req: uint64(i) * 3, node: int32(i)}
			live = append(live, addr)
			continue
		}
		k := rng.IntN(len(live))
		addr := live[k]
		live[k] = live[len(live)-1]
		live = live[:len(live)-1]
		node, req, ok := x.take(addr)
		if want := ref[addr]; !ok || node != want.node || req != want.req {
			t.Fatalf("take %#x = %d, %d, %v; want %d, %d", addr, node, req, ok, want.node, want.req)
		}
		delete(ref, addr)
		if _, _, ok := x.take(addr); ok {
			t.Fatalf("take %#x twice succeeded", addr)
		}
	}
	if x.count != len(ref) {
		t.Fatalf("count %d, want %d", x.count, len(ref))
	}
	n := 0
	x.each(func(addr uint64, node int32, req uint64) {
		n++
		if want := ref[addr]; node != want.node || req != want.req {
			t.Fatalf("entry %#x = %d, %d; want %d, %d", addr, node, req, want.node, want.req)
		}
	})
	if n != len(ref) {
		t.Fatalf("each visited %d, want %d", n, len(ref))
	}
}
