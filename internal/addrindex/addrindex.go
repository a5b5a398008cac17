// Package addrindex maps addresses to values with an open-addressing hash table: the index of
// live blocks and regions on the alloc/free paths of package pool's policies and simulated
// Upstream, where a Go map's generic hashing and probing cost a third of a free, and of the live
// blocks of allocscope's statistics pass (one index per process and device).
package addrindex

import (
	"math/bits"
	"slices"
)

// Index maps addresses (of live blocks, of regions) to values: an open-addressing hash table
// with linear probing and backward-shift deletion (no tombstones), kept at most half full. The
// zero value is an empty index.
type Index[V any] struct {
	slots []slot[V]
	mask  uint64
	shift uint8
	count int
}

// slot is one entry of an Index.
type slot[V any] struct {
	addr uint64
	val  V
	used bool
}

// minSlots is the table size of an index's first entry.
const minSlots = 64

// New returns an empty index, with room for its first entries.
func New[V any]() *Index[V] {
	x := &Index[V]{}
	x.resize(minSlots)
	return x
}

func (x *Index[V]) resize(n int) {
	old := x.slots
	x.slots = make([]slot[V], n)
	x.mask = uint64(n - 1)
	x.shift = uint8(64 - bits.TrailingZeros64(uint64(n)))
	x.count = 0
	for i := range old {
		if old[i].used {
			x.Put(old[i].addr, old[i].val)
		}
	}
}

// home is addr's preferred slot (Fibonacci hashing: block addresses share their low bits).
func (x *Index[V]) home(addr uint64) uint64 { return (addr * 0x9e3779b97f4a7c15) >> x.shift }

// Len returns the number of addresses in the index.
func (x *Index[V]) Len() int { return x.count }

// probe returns the slot holding addr (found) or else the free slot that ends addr's probe run.
// The index must have slots.
func (x *Index[V]) probe(addr uint64) (i uint64, found bool) {
	for i = x.home(addr); x.slots[i].used; i = (i + 1) & x.mask {
		if x.slots[i].addr == addr {
			return i, true
		}
	}
	return i, false
}

// Put records v at addr and returns the value it replaces, if addr was in the index.
func (x *Index[V]) Put(addr uint64, v V) (old V, replaced bool) {
	if 2*(x.count+1) > len(x.slots) {
		x.resize(max(minSlots, 2*len(x.slots)))
	}
	i, found := x.probe(addr)
	s := &x.slots[i]
	if found {
		old, s.val = s.val, v
		return old, true
	}
	*s = slot[V]{addr: addr, val: v, used: true}
	x.count++
	return old, false
}

// find returns the slot of addr, or -1.
func (x *Index[V]) find(addr uint64) int {
	if x.count == 0 {
		return -1
	}
	if i, found := x.probe(addr); found {
		return int(i)
	}
	return -1
}

// Get returns a pointer to the value at addr, valid until the next Put or Take, or nil.
func (x *Index[V]) Get(addr uint64) *V {
	if i := x.find(addr); i >= 0 {
		return &x.slots[i].val
	}
	return nil
}

// Take removes addr and returns its value; ok is false when addr is not in the index.
func (x *Index[V]) Take(addr uint64) (v V, ok bool) {
	i := x.find(addr)
	if i < 0 {
		return v, false
	}
	v = x.slots[i].val
	// Backward-shift deletion: move later entries of the probe run into the hole when their home
	// does not lie cyclically in (hole, j].
	hole := uint64(i)
	for j := (hole + 1) & x.mask; x.slots[j].used; j = (j + 1) & x.mask {
		h := x.home(x.slots[j].addr)
		if (j-h)&x.mask >= (j-hole)&x.mask {
			x.slots[hole] = x.slots[j]
			hole = j
		}
	}
	x.slots[hole] = slot[V]{}
	x.count--
	return v, true
}

// Each calls fn for every entry in the index, in no particular order. fn may change the value
// but not the index.
func (x *Index[V]) Each(fn func(addr uint64, v *V)) {
	for i := range x.slots {
		if x.slots[i].used {
			fn(x.slots[i].addr, &x.slots[i].val)
		}
	}
}

// SortedAddrs returns every address in the index in increasing order.
func (x *Index[V]) SortedAddrs() []uint64 {
	out := make([]uint64, 0, x.count)
	x.Each(func(addr uint64, _ *V) { out = append(out, addr) })
	slices.Sort(out)
	return out
}
