package pool

import (
	"math/bits"
	"slices"
)

// addrIndex maps addresses (of live blocks, of regions) to values: an open-addressing hash table
// with linear probing and backward-shift deletion (no tombstones), kept at most half full. It
// replaces Go maps on the policies' and the simulated Upstream's alloc/free paths, where the
// map's generic hashing and probing cost a third of a free.
type addrIndex[V any] struct {
	slots []addrSlot[V]
	mask  uint64
	shift uint8
	count int
}

// addrSlot is one entry of an addrIndex.
type addrSlot[V any] struct {
	addr uint64
	val  V
	used bool
}

// liveBlock is what an arena keeps per live block: its space node and the bytes requested.
type liveBlock struct {
	req  uint64
	node int32
}

// addrIndexMinSlots is the table size of a new index.
const addrIndexMinSlots = 64

func newAddrIndex[V any]() *addrIndex[V] {
	x := &addrIndex[V]{}
	x.resize(addrIndexMinSlots)
	return x
}

func (x *addrIndex[V]) resize(n int) {
	old := x.slots
	x.slots = make([]addrSlot[V], n)
	x.mask = uint64(n - 1)
	x.shift = uint8(64 - bits.TrailingZeros64(uint64(n)))
	x.count = 0
	for i := range old {
		if old[i].used {
			x.put(old[i].addr, old[i].val)
		}
	}
}

// home is addr's preferred slot (Fibonacci hashing: block addresses share their low bits).
func (x *addrIndex[V]) home(addr uint64) uint64 { return (addr * 0x9e3779b97f4a7c15) >> x.shift }

// put records v at addr, which must not be in the index.
func (x *addrIndex[V]) put(addr uint64, v V) {
	if 2*(x.count+1) > len(x.slots) {
		x.resize(2 * len(x.slots))
	}
	i := x.home(addr)
	for x.slots[i].used {
		i = (i + 1) & x.mask
	}
	x.slots[i] = addrSlot[V]{addr: addr, val: v, used: true}
	x.count++
}

// find returns the slot of addr, or -1.
func (x *addrIndex[V]) find(addr uint64) int {
	for i := x.home(addr); x.slots[i].used; i = (i + 1) & x.mask {
		if x.slots[i].addr == addr {
			return int(i)
		}
	}
	return -1
}

// get returns a pointer to the value at addr, valid until the next put or take, or nil.
func (x *addrIndex[V]) get(addr uint64) *V {
	if i := x.find(addr); i >= 0 {
		return &x.slots[i].val
	}
	return nil
}

// take removes addr and returns its value.
func (x *addrIndex[V]) take(addr uint64) (v V, ok bool) {
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
	x.slots[hole] = addrSlot[V]{}
	x.count--
	return v, true
}

// each calls fn for every entry in the index, in no particular order.
func (x *addrIndex[V]) each(fn func(addr uint64, v *V)) {
	for i := range x.slots {
		if x.slots[i].used {
			fn(x.slots[i].addr, &x.slots[i].val)
		}
	}
}

// sortedAddrs returns every address in the index in increasing order.
func (x *addrIndex[V]) sortedAddrs() []uint64 {
	out := make([]uint64, 0, x.count)
	x.each(func(addr uint64, _ *V) { out = append(out, addr) })
	slices.Sort(out)
	return out
}
