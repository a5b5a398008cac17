package pool

import (
	"errors"
	"slices"
)

// This file models PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).

// pageSize is the size of the pages an expandable segment of the pool is mapped in.
func pageSize(small bool) uint64 {
	if small {
		return torchSmallBuffer
	}
	return torchLargeBuffer
}

// allocExpandable is PyTorch's try_allocate_expandable_block: find room in a segment of the
// stream (or start a new one), map pages until the free block at the candidate reaches rs bytes,
// and take it out of the pool.
func (p *torchPool) allocExpandable(small bool, stream, rs uint64) (span, bool, error) {
	c, isUnmapped, err := p.findExpandable(small, stream, rs)
	if err != nil {
		if isOOM(err) {
			return span{}, false, nil
		}
		return span{}, false, err
	}
	ok := true
	if isUnmapped {
		if c, ok, err = p.mapBlock(small, c, min(c.size, rs)); !ok || err != nil {
			return span{}, false, err
		}
	}
	for c.size < rs {
		next, _ := p.unmapped[poolIndex(small)].startingAt(c.end())
		if c, ok, err = p.mapBlock(small, next, min(rs-c.size, next.size)); !ok || err != nil {
			return span{}, false, err
		}
	}
	p.pools[poolIndex(small)].remove(c)
	return c, true, nil
}

// findExpandable is PyTorch's find_expandable_block: the lowest-addressed unmapped range of the
// stream (or the free block just before it) from which enough free and unmapped address space
// follows; else a new segment. isUnmapped tells which of the two indexes holds the result.
func (p *torchPool) findExpandable(small bool, stream, rs uint64) (c span, isUnmapped bool, err error) {
	pool, unmapped := p.pools[poolIndex(small)], p.unmapped[poolIndex(small)]
	found := false
	unmapped.ascendFrom(true, stream, 0, func(u span) bool {
		c, isUnmapped = u, true
		if prev, ok := pool.endingAt(u.addr); ok && prev.seg == u.seg {
			c, isUnmapped = prev, false
		}
		found = p.hasAddressSpace(small, c, rs)
		return !found
	})
	if found {
		return c, isUnmapped, nil
	}
	addr, err := p.mapper.ReserveAddress(p.vaSize)
	if err != nil {
		return span{}, false, err
	}
	p.segments[addr] = &torchSegment{size: p.vaSize, small: small, stream: stream, expandable: true}
	c = span{addr: addr, size: p.vaSize, seg: addr, tagged: true, stream: stream}
	unmapped.add(c)
	return c, true, nil
}

// hasAddressSpace reports whether free and unmapped ranges following c in its segment add up to
// need bytes.
func (p *torchPool) hasAddressSpace(small bool, c span, need uint64) bool {
	pool, unmapped := p.pools[poolIndex(small)], p.unmapped[poolIndex(small)]
	total := uint64(0)
	for {
		total += c.size
		if total >= need {
			return true
		}
		next, ok := pool.startingAt(c.end())
		if !ok {
			next, ok = unmapped.startingAt(c.end())
		}
		if !ok || next.seg != c.seg {
			return false
		}
		c = next
	}
}

// mapBlock is PyTorch's map_block: map whole pages at the start of unmapped range u to cover
// size bytes, and return the free block they form with their free neighbours.
func (p *torchPool) mapBlock(small bool, u span, size uint64) (span, bool, error) {
	n := min(roundUpAny(size, pageSize(small)), u.size)
	if err := p.up.mapPages(p.mapper, u.addr, n); err != nil {
		if isOOM(err) {
			return span{}, false, nil
		}
		return span{}, false, err
	}
	unmapped := p.unmapped[poolIndex(small)]
	unmapped.remove(u)
	if n < u.size {
		rest := u
		rest.addr, rest.size = u.addr+n, u.size-n
		unmapped.add(rest)
	}
	mapped := u
	mapped.size = n
	return p.pools[poolIndex(small)].insert(mapped), true, nil
}

// unmapBlock is PyTorch's unmap_block: unmap the whole pages inside free block s; the slivers
// before and after them stay free and mapped.
func (p *torchPool) unmapBlock(small bool, s span) error {
	page := pageSize(small)
	begin := s.seg + roundUpAny(s.addr-s.seg, page)
	end := s.seg + (s.end()-s.seg)/page*page
	if begin >= end {
		return nil
	}
	pool := p.pools[poolIndex(small)]
	pool.remove(s)
	if begin > s.addr {
		head := s
		head.size = begin - s.addr
		pool.add(head)
	}
	if end < s.end() {
		tail := s
		tail.addr, tail.size = end, s.end()-end
		pool.add(tail)
	}
	if err := p.up.unmapPages(p.mapper, begin, end-begin); err != nil {
		return err
	}
	gone := s
	gone.addr, gone.size = begin, end-begin
	p.unmapped[poolIndex(small)].insert(gone)
	return nil
}

// closeExpandable unmaps every mapped range of a segment and releases its address space.
func (p *torchPool) closeExpandable(addr uint64, seg *torchSegment) error {
	var holes []span
	for _, u := range p.unmapped[poolIndex(seg.small)].all() {
		if u.seg == addr {
			holes = append(holes, u)
		}
	}
	slices.SortFunc(holes, func(a, b span) int { return cmpUint(a.addr, b.addr) })
	var errs []error
	at := addr
	for _, h := range append(holes, span{addr: addr + seg.size}) {
		if h.addr > at {
			errs = append(errs, p.up.unmapPages(p.mapper, at, h.addr-at))
		}
		at = h.end()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return p.mapper.ReleaseAddress(addr, seg.size)
}
