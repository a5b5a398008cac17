package sim

import (
	"github.com/allocscope/allocscope/analysis/internal/stats"
	"github.com/allocscope/allocscope/trace"
)

// request is an event as the workers see it, classified once per batch for all of them: what it
// asks of an allocator and whether the program synchronized with the device there. It holds no
// pointers, so handing batches to the workers copies no strings.
type request struct {
	slot   int32 // the block's dense id (see classifier), noSlot on a free of an unknown block
	size   uint64
	stream uint64
	kind   int8 // +1 an allocation to serve, -1 a free, 0 none (a synchronization point only)
	sync   bool // a native call that synchronizes with the device (see syncCalls)
}

// noSlot is the slot of a request that names no live block.
const noSlot int32 = -1

// classifier turns batches of events into requests. It gives each live block (pid, device,
// address) a small dense id, its slot, reused once the block is freed: the workers keep what they
// know of a block in slices indexed by slot, so the one hash lookup per event is the
// classifier's, shared by every policy. An allocation at the address of a block never freed keeps
// that block's slot (the workers free the old block first). Slots stay below the most blocks live
// at once.
type classifier struct {
	stream Stream
	syncs  syncCalls
	slots  stats.Table[int32] // live block → slot
	free   []int32            // slots of freed blocks, to reuse
	next   int32              // slots handed out so far
}

// convert appends to out the requests of batch: every event that asks something of an allocator
// or synchronizes with the device, in order.
func (c *classifier) convert(batch []trace.Event, out []request) []request {
	for i := range batch {
		e := &batch[i]
		kind := int8(c.stream.request(e))
		sync := c.syncs.synchronizes(e)
		if kind == 0 && !sync {
			continue
		}
		slot := noSlot
		switch kind {
		case 1:
			slot = c.slotOf(stats.KeyOf(e))
		case -1:
			if s, ok := c.slots.Delete(stats.KeyOf(e)); ok {
				slot = s
				c.free = append(c.free, s)
			}
		}
		out = append(out, request{slot: slot, size: e.Size, stream: e.Stream, kind: kind, sync: sync})
	}
	return out
}

// slotOf returns the slot of the block allocated at k: the live block's there, else a free one.
func (c *classifier) slotOf(k stats.Key) int32 {
	if s, ok := c.slots.Get(k); ok {
		return s
	}
	var s int32
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		s = c.next
		c.next++
	}
	c.slots.Put(k, s)
	return s
}

// atSlot grows a per-slot slice so that it has an element at slot s.
func atSlot[T any](xs []T, s int32) []T {
	if int(s) < len(xs) {
		return xs
	}
	return append(xs, make([]T, int(s)+1-len(xs))...)
}
