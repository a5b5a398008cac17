package pool

import (
	"cmp"
	"slices"

	"github.com/allocscope/allocscope/internal/spans"
)

// IdleReleaser is implemented by allocators that can give back to their Upstream the regions they
// reserved beyond their plan that hold no block in use (PolicySizeClass): a program's own
// allocation that went to the device itself and found it out of memory may then try again, as
// PyTorch's caching allocator frees its cached blocks before it reports out of memory. The
// allocator does the same itself when its Upstream is out of memory while it grows.
type IdleReleaser interface {
	// ReleaseIdle gives back every idle region and returns the bytes given back (0 after Close).
	ReleaseIdle() (bytes uint64)
}

// ReleaseIdle gives back to the Upstream every slab a class grew by whose slots are all free and
// every segment the arena reserved that is entirely free; a block freed by FreeDeferred is in use
// until the next synchronization. The planned region stays (see releaseIdle). It returns the
// bytes given back, counted in Stats.IdleReleases and Stats.IdleReleasedBytes.
func (p *sizeClassPool) ReleaseIdle() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	return p.releaseIdle()
}

// releaseIdle gives back the idle grown slabs, in the order they were grown, then the arena's idle
// segments, in address order. The plan is kept even when nothing is live: giving it back would
// save memory only between a program's last free and its next request, whose first need would
// then be to reserve the whole plan again (or fail where the plan had succeeded), and a pool
// without its plan would serve every request from growths, as it was not sized to.
func (p *sizeClassPool) releaseIdle() uint64 {
	var bytes uint64
	kept := p.regions[:0]
	for _, r := range p.regions {
		if !r.plan && p.slabIdle(r.addr) && p.up.release(r.addr, r.size) == nil {
			p.dropSlab(r.addr)
			p.c.s.IdleReleases++
			p.c.s.IdleReleasedBytes += r.size
			bytes += r.size
			continue
		}
		kept = append(kept, r)
	}
	clear(p.regions[len(kept):])
	p.regions = kept
	return bytes + p.arena.releaseIdle()
}

// slabIdle reports whether the slab at addr has no live or deferred slot.
func (p *sizeClassPool) slabIdle(addr uint64) bool {
	sl := p.slabFor(addr)
	return sl != nil && !slices.ContainsFunc(sl.req, func(w uint64) bool { return w != 0 })
}

// dropSlab takes the idle slab at addr out of the slab index and out of its class's free lists
// (the other slots keep their order); the class has no fresh slab left if it was this one.
func (p *sizeClassPool) dropSlab(addr uint64) {
	sl := p.slabFor(addr)
	i, _ := slices.BinarySearchFunc(p.slabs, addr, func(s *slab, a uint64) int {
		return cmp.Compare(s.base, a)
	})
	p.slabs = slices.Delete(p.slabs, i, i+1)
	c := &p.classes[sl.class]
	inSlab := func(r slotRef) bool { return r.sl == sl }
	c.free = slices.DeleteFunc(c.free, inSlab)
	for _, l := range c.streams {
		*l = slices.DeleteFunc(*l, inSlab)
	}
	if c.fresh == sl {
		c.fresh = nil
	}
}

// releaseIdle gives back, in address order, every segment the arena reserved itself that is one
// free node, and returns their bytes. Planned space and a paged arena's address space stay.
func (a *arena) releaseIdle() uint64 {
	var bytes uint64
	for _, base := range sortedKeys(a.owned) {
		seg, size := a.segs[base], a.owned[base]
		n := a.sp.Node(seg.head)
		if n.State != spans.NodeFree || n.Next != spans.NoNode || a.up.release(base, size) != nil {
			continue
		}
		a.sp.DropSegment(seg.head)
		delete(a.segs, base)
		delete(a.owned, base)
		a.total -= size
		a.up.c.s.IdleReleases++
		a.up.c.s.IdleReleasedBytes += size
		bytes += size
	}
	return bytes
}

// reserveGrowth reserves size bytes for a growth of the pool; when the Upstream is out of memory
// it gives back the idle regions and, if that gave back any, asks once more.
func (p *sizeClassPool) reserveGrowth(size uint64) (uint64, error) {
	addr, err := p.up.reserve(size)
	if err == nil || !isOOM(err) || p.releaseIdle() == 0 {
		return addr, err
	}
	return p.up.reserve(size)
}
