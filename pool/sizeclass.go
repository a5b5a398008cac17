package pool

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// sizeClassPool is PolicySizeClass. Each class's planned slots form one slab, and all slabs plus
// the arena's initial space are carved from a single up-front Upstream region (one cudaMalloc,
// no per-class rounding waste). A class hands out slots from a LIFO free list (the block freed
// last is reused first, while it is warm in cache); when the list is empty the class grows by a
// further slab of GrowSlots slots (a Fallback). Requests above LargeThreshold, or above every
// class, go to a best-fit coalescing arena (the same arena as PolicyBestFit). A growth that finds
// the Upstream out of memory first gives back the idle grown slabs and arena segments and asks
// once more (ReleaseIdle, idle.go).
type sizeClassPool struct {
	base
	sizes     []uint64 // class sizes, ascending
	classes   []sizeClass
	threshold uint64
	slabs     []*slab // sorted by base address
	regions   []region
	arena     *arena
	perStream bool
	deferred  []deferredFree // blocks freed by FreeDeferred, in order
	noGrow    bool           // class growth fails with errWouldGrow (uncounted)
}

// deferredFree is a block freed while the device may still use it.
type deferredFree struct{ addr, stream uint64 }

// deferredBit marks a slot's requested-bytes word: freed by FreeDeferred, not reusable yet.
const deferredBit = 1 << 63

// sizeClass is one class's state.
type sizeClass struct {
	size      uint64
	growSlots uint64
	free      []slotRef             // freed slots, LIFO (unused with perStream)
	streams   map[uint64]*[]slotRef // with perStream: freed slots, LIFO per freeing stream
	fresh     *slab                 // the slab whose slots from fresh.used on were never handed out
}

// slotRef names one slot of a slab.
type slotRef struct {
	sl   *slab
	slot uint64
}

func (r slotRef) addr() uint64 { return r.sl.base + r.slot*r.sl.size }

// slab is a run of equal slots of one class.
type slab struct {
	base, end uint64
	size      uint64   // the class's block size
	class     int      // index into sizeClassPool.classes
	req       []uint64 // per slot: requested bytes + 1 while live, 0 while free
	used      uint64   // slots handed out at least once (they are handed out in address order)
}

// region is an Upstream region the pool owns: the planned one, or a slab a class grew by.
type region struct {
	addr, size uint64
	plan       bool
}

func newSizeClass(cfg Config, up Upstream, o options) (*sizeClassPool, error) {
	sc, align := cfg.SizeClass, cfg.alignment()
	p := &sizeClassPool{perStream: sc.PerStream}
	p.init(up, o)
	for _, cl := range sc.Classes {
		grow := sc.GrowSlots
		if grow == 0 {
			grow = max(1, DefaultGrowBytes/cl.Size)
		}
		p.sizes = append(p.sizes, cl.Size)
		p.classes = append(p.classes, sizeClass{size: cl.Size, growSlots: grow, streams: map[uint64]*[]slotRef{}})
	}
	p.threshold = sc.LargeThreshold
	if p.threshold == 0 && len(p.sizes) > 0 {
		p.threshold = p.sizes[len(p.sizes)-1]
	}
	var growMin, maximum uint64
	if cfg.BestFit != nil {
		growMin, maximum = cfg.BestFit.GrowBytes, cfg.BestFit.MaximumBytes
	}
	p.arena = newArena(&p.up, align, growMin, maximum, sc.PerStream, sc.ArenaFit)
	p.arena.releaseIdleAll = p.releaseIdle
	planned := AlignUp(sc.ArenaBytes, align)
	if sc.ArenaPaging != nil {
		m, ok := up.(Mapper)
		if !ok {
			return nil, fmt.Errorf("arena_paging needs an upstream that maps pages (a pool.Mapper); %T is not one", up)
		}
		if err := p.arena.addPaged(m, sc.ArenaBytes, sc.ArenaPaging); err != nil {
			return nil, errors.Join(err, p.arena.close())
		}
		planned = 0
	}
	if err := p.reservePlan(sc.Classes, planned); err != nil {
		return nil, errors.Join(err, p.arena.close())
	}
	p.c.notePeak()
	return p, nil
}

// reservePlan reserves one region for every class's planned slots followed by the arena.
func (p *sizeClassPool) reservePlan(classes []Class, arenaBytes uint64) error {
	total := arenaBytes
	for _, cl := range classes {
		total += cl.Size * cl.Slots
	}
	if total == 0 {
		return nil
	}
	addr, err := p.up.reserve(total)
	if err != nil {
		return fmt.Errorf("reserve the planned %d bytes: %w", total, err)
	}
	p.regions = append(p.regions, region{addr: addr, size: total, plan: true})
	off := addr
	for i, cl := range classes {
		if cl.Slots > 0 {
			p.addSlab(i, off, cl.Slots)
			off += cl.Size * cl.Slots
		}
	}
	if arenaBytes > 0 {
		p.arena.addSpace(off, arenaBytes)
	}
	return nil
}

// addSlab adds a slab of n slots of class ci at addr; its slots are handed out in address order
// once the class's freed slots are used up.
func (p *sizeClassPool) addSlab(ci int, addr, n uint64) {
	c := &p.classes[ci]
	sl := &slab{base: addr, end: addr + n*c.size, size: c.size, class: ci, req: make([]uint64, n)}
	i, _ := slices.BinarySearchFunc(p.slabs, addr, func(s *slab, a uint64) int {
		return cmp.Compare(s.base, a)
	})
	p.slabs = slices.Insert(p.slabs, i, sl)
	c.fresh = sl
}

// classFor returns the index of the smallest class that holds size bytes, or -1 for the arena.
func (p *sizeClassPool) classFor(size uint64) int {
	if size > p.threshold {
		return -1
	}
	return classOf(p.sizes, size)
}

// classOf returns the index of the smallest of the ascending class sizes that holds size bytes, or
// -1 when none does: the size-class policy's class of a request (below its threshold).
func classOf(sizes []uint64, size uint64) int {
	i, _ := slices.BinarySearch(sizes, size)
	if i == len(sizes) {
		return -1
	}
	return i
}

// Alloc serves size bytes from the smallest class that holds them, or from the arena.
func (p *sizeClassPool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	addr, err := p.alloc(size, stream)
	p.mu.Unlock()
	return addr, err
}

// alloc serves a request; with deferred blocks, one that would grow the pool first synchronizes
// the device once (a Synchronizer upstream) and reuses them all.
func (p *sizeClassPool) alloc(size, stream uint64) (uint64, error) {
	sy, ok := p.up.up.(Synchronizer)
	if len(p.deferred) == 0 || !ok {
		return p.allocNow(size, stream)
	}
	p.noGrow, p.arena.noGrow = true, true
	addr, err := p.allocNow(size, stream)
	p.noGrow, p.arena.noGrow = false, false
	if !errors.Is(err, errWouldGrow) {
		return addr, err
	}
	if sy.Synchronize() == nil {
		p.c.s.Syncs++
		p.releaseDeferred()
	}
	return p.allocNow(size, stream)
}

// allocNow serves a request with what is reusable now, growing the pool when that is not enough
// (unless noGrow: errWouldGrow).
func (p *sizeClassPool) allocNow(size, stream uint64) (uint64, error) {
	if err := p.admit(size); err != nil {
		return 0, err
	}
	ci := p.classFor(max(size, 1))
	if ci < 0 {
		return p.allocLarge(size, stream)
	}
	c := &p.classes[ci]
	ref, ok := p.pop(c, stream)
	if !ok {
		if err := p.grow(ci); err != nil {
			if errors.Is(err, errWouldGrow) {
				return 0, err
			}
			p.c.failed()
			return 0, fmt.Errorf("alloc %d bytes: grow class %d: %w", size, c.size, err)
		}
		ref, _ = p.pop(c, stream)
	}
	ref.sl.req[ref.slot] = size + 1
	p.c.allocated(size, c.size)
	return ref.addr(), nil
}

func (p *sizeClassPool) allocLarge(size, stream uint64) (uint64, error) {
	addr, blk, err := p.arena.alloc(size, stream)
	if errors.Is(err, errWouldGrow) {
		return 0, err
	}
	if err != nil {
		p.c.failed()
		return 0, fmt.Errorf("alloc %d bytes: %w", size, err)
	}
	p.c.allocated(size, blk)
	return addr, nil
}

// pop takes the most recently freed slot usable on stream, else the lowest never-used slot.
func (p *sizeClassPool) pop(c *sizeClass, stream uint64) (slotRef, bool) {
	if p.perStream {
		if l := c.streams[stream]; l != nil && len(*l) > 0 {
			ref := (*l)[len(*l)-1]
			*l = (*l)[:len(*l)-1]
			return ref, true
		}
	}
	if n := len(c.free); n > 0 {
		ref := c.free[n-1]
		c.free = c.free[:n-1]
		return ref, true
	}
	if f := c.fresh; f != nil && f.used < uint64(len(f.req)) {
		f.used++
		return slotRef{f, f.used - 1}, true
	}
	return slotRef{}, false
}

// grow adds a slab of growSlots slots to class ci: a Fallback.
func (p *sizeClassPool) grow(ci int) error {
	if p.noGrow {
		return errWouldGrow
	}
	c := &p.classes[ci]
	addr, err := p.reserveGrowth(c.growSlots * c.size)
	if err != nil {
		return err
	}
	p.c.s.Fallbacks++
	p.regions = append(p.regions, region{addr: addr, size: c.growSlots * c.size})
	p.addSlab(ci, addr, c.growSlots)
	return nil
}

// Free puts a class block on top of its free list, or returns an arena block to the arena.
func (p *sizeClassPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	err := p.free(addr, stream)
	p.mu.Unlock()
	return err
}

func (p *sizeClassPool) free(addr, stream uint64) error {
	if p.closed {
		return errClosed("free")
	}
	sl := p.slabFor(addr)
	if sl == nil {
		req, blk, ok := p.arena.free(addr, stream)
		if !ok {
			return errUnknown(addr)
		}
		p.c.freed(req, blk)
		return nil
	}
	off := addr - sl.base
	slot := off / sl.size
	if slot*sl.size != off || sl.req[slot] == 0 {
		return errUnknown(addr)
	}
	req := sl.req[slot]&^deferredBit - 1
	sl.req[slot] = 0
	c := &p.classes[sl.class]
	ref := slotRef{sl, slot}
	if p.perStream {
		l := c.streams[stream]
		if l == nil {
			l = new([]slotRef)
			c.streams[stream] = l
		}
		*l = append(*l, ref)
	} else {
		c.free = append(c.free, ref)
	}
	p.c.freed(req, sl.size)
	return nil
}

// FreeDeferred frees the block at addr on stream, reusable after the next synchronization.
func (p *sizeClassPool) FreeDeferred(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed("free")
	}
	if err := p.markDeferred(addr); err != nil {
		return err
	}
	p.deferred = append(p.deferred, deferredFree{addr, stream})
	return nil
}

func (p *sizeClassPool) markDeferred(addr uint64) error {
	sl := p.slabFor(addr)
	if sl == nil {
		return p.arena.markDeferred(addr)
	}
	off := addr - sl.base
	slot := off / sl.size
	switch {
	case slot*sl.size != off || sl.req[slot] == 0:
		return errUnknown(addr)
	case sl.req[slot]&deferredBit != 0:
		return fmt.Errorf("free %#x: %w", addr, ErrFreedTwice)
	}
	sl.req[slot] |= deferredBit
	return nil
}

// Synced makes every deferred block reusable: the device synchronized.
func (p *sizeClassPool) Synced() {
	p.mu.Lock()
	p.releaseDeferred()
	p.mu.Unlock()
}

// releaseDeferred frees the deferred blocks in the order they were deferred.
func (p *sizeClassPool) releaseDeferred() {
	for _, d := range p.deferred {
		_ = p.free(d.addr, d.stream) // a deferred block is live: its free cannot fail
	}
	p.deferred = p.deferred[:0]
}

// slabFor returns the slab that contains addr, or nil.
func (p *sizeClassPool) slabFor(addr uint64) *slab {
	lo, hi := 0, len(p.slabs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.slabs[mid].base <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || addr >= p.slabs[lo-1].end {
		return nil
	}
	return p.slabs[lo-1]
}

// Close releases the planned region, every grown slab and the arena's regions.
func (p *sizeClassPool) Close() error {
	return p.closeOnce(func() error {
		var errs []error
		for _, r := range p.regions {
			errs = append(errs, p.up.release(r.addr, r.size))
		}
		errs = append(errs, p.arena.close())
		return errors.Join(errs...)
	})
}
