package sizeclass

import "slices"

// ClassSlots counts the slots each class of a size-class pool needs to serve a request stream
// without growing, by the pool's own reuse rule: a freed slot goes back to its class and serves the
// next request of that class, so a class needs as many slots as it has blocks live at once; when the
// pool keeps freed slots per stream (SizeClassConfig.PerStream), a slot freed on stream S serves
// only S again, and a request on a stream with none kept takes a slot never used before. analyze
// uses it to plan the classes of the pool it recommends.
type ClassSlots struct {
	sizes     []uint64
	threshold uint64
	live      []uint64
	need      []uint64
	perStream map[uint64][]uint64 // stream handle → free slots kept per class; nil unless per stream
}

// NewClassSlots returns a counter for the ascending class sizes; requests above threshold go to the
// arena and take no slot.
func NewClassSlots(sizes []uint64, threshold uint64, perStream bool) *ClassSlots {
	c := &ClassSlots{sizes: sizes, threshold: threshold, live: make([]uint64, len(sizes)),
		need: make([]uint64, len(sizes))}
	if perStream {
		c.perStream = map[uint64][]uint64{}
	}
	return c
}

// Alloc counts a request of size bytes on stream and returns its class, or -1 when it goes to the
// arena.
func (c *ClassSlots) Alloc(size, stream uint64) int {
	if size > c.threshold {
		return -1
	}
	cl := ClassOf(c.sizes, max(size, 1))
	if cl < 0 {
		return -1
	}
	c.live[cl]++
	switch kept := c.perStream[stream]; {
	case c.perStream == nil:
		c.need[cl] = max(c.need[cl], c.live[cl])
	case kept != nil && kept[cl] > 0:
		kept[cl]--
	default:
		c.need[cl]++
	}
	return cl
}

// Free counts the free, on stream, of a block of class cl (what Alloc returned; -1 is ignored).
func (c *ClassSlots) Free(cl int, stream uint64) {
	if cl < 0 {
		return
	}
	c.live[cl]--
	if c.perStream == nil {
		return
	}
	kept := c.perStream[stream]
	if kept == nil {
		kept = make([]uint64, len(c.sizes))
		c.perStream[stream] = kept
	}
	kept[cl]++
}

// Slots returns the slots each class needs so far.
func (c *ClassSlots) Slots() []uint64 { return c.need }

// ClassOf returns the index of the smallest of the ascending class sizes that holds size bytes, or
// -1 when none does: the size-class policy's class of a request (below its threshold).
func ClassOf(sizes []uint64, size uint64) int {
	i, _ := slices.BinarySearch(sizes, size)
	if i == len(sizes) {
		return -1
	}
	return i
}
