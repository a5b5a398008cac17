package pool

import "math/bits"

// addrIndex maps the address of a live block to its node in a space and the bytes requested for
// it: an open-addressing hash table with linear probing and backward-shift deletion (no
// tombstones), kept at most half full. It replaces a Go map on the arena's alloc/free path, where
// the map's generic probing and 48-byte values cost a third of a free.
type addrIndex struct {
	slots []addrSlot
	mask  uint64
	shift uint8
	count int
}

// addrSlot is one entry; node is the space node + 1, 0 when the slot is empty.
type addrSlot struct {
	addr uint64
	req  uint64
	node int32
}

// addrIndexMinSlots is the table size of a new index.
const addrIndexMinSlots = 64

func newAddrIndex() *addrIndex {
	x := &addrIndex{}
	x.resize(addrIndexMinSlots)
	return x
}

func (x *addrIndex) resize(n int) {
	old := x.slots
	x.slots = make([]addrSlot, n)
	x.mask = uint64(n - 1)
	x.shift = uint8(64 - bits.TrailingZeros64(uint64(n)))
	x.count = 0
	for _, s := range old {
		if s.node != 0 {
			x.put(s.addr, s.node-1, s.req)
		}
	}
}

// home is addr's preferred slot (Fibonacci hashing: block addresses share their low bits).
func (x *addrIndex) home(addr uint64) uint64 { return (addr * 0x9e3779b97f4a7c15) >> x.shift }

// put records the block at addr, which must not be in the index.
func (x *addrIndex) put(addr uint64, node int32, req uint64) {
	if 2*(x.count+1) > len(x.slots) {
		x.resize(2 * len(x.slots))
	}
	i := x.home(addr)
	for x.slots[i].node != 0 {
		i = (i + 1) & x.mask
	}
	x.slots[i] = addrSlot{addr: addr, req: req, node: node + 1}
	x.count++
}

// take removes the block at addr and returns its node and requested bytes.
func (x *addrIndex) take(addr uint64) (node int32, req uint64, ok bool) {
	i := x.home(addr)
	for {
		s := &x.slots[i]
		if s.node == 0 {
			return 0, 0, false
		}
		if s.addr == addr {
			node, req = s.node-1, s.req
			break
		}
		i = (i + 1) & x.mask
	}
	// Backward-shift deletion: move later entries of the probe run into the hole when their home
	// does not lie cyclically in (hole, j].
	hole := i
	for j := (i + 1) & x.mask; x.slots[j].node != 0; j = (j + 1) & x.mask {
		h := x.home(x.slots[j].addr)
		if (j-h)&x.mask >= (j-hole)&x.mask {
			x.slots[hole] = x.slots[j]
			hole = j
		}
	}
	x.slots[hole] = addrSlot{}
	x.count--
	return node, req, true
}

// each calls fn for every block in the index, in no particular order.
func (x *addrIndex) each(fn func(addr uint64, node int32, req uint64)) {
	for _, s := range x.slots {
		if s.node != 0 {
			fn(s.addr, s.node-1, s.req)
		}
	}
}
