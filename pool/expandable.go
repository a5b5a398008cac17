package pool

import "errors"

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
// and return it (a free node, in its tree).
func (p *torchPool) allocExpandable(small bool, stream, rs uint64) (int32, bool, error) {
	sp := p.pools[poolIndex(small)]
	c, err := p.findExpandable(small, stream, rs)
	if err != nil {
		if isOOM(err) {
			return nilNode, false, nil
		}
		return nilNode, false, err
	}
	ok := true
	if sp.node(c).state == nodeUnmapped {
		if c, ok, err = p.mapBlock(small, c, min(sp.node(c).size, rs)); !ok || err != nil {
			return nilNode, false, err
		}
	}
	for sp.node(c).size < rs {
		next := sp.node(c).next // unmapped: findExpandable saw enough room
		need := rs - sp.node(c).size
		if c, ok, err = p.mapBlock(small, next, min(need, sp.node(next).size)); !ok || err != nil {
			return nilNode, false, err
		}
	}
	return c, true, nil
}

// findExpandable is PyTorch's find_expandable_block: the lowest-addressed unmapped range of the
// stream (or the free block just before it) from which enough free and unmapped address space
// follows; else a new segment.
func (p *torchPool) findExpandable(small bool, stream, rs uint64) (int32, error) {
	sp := p.pools[poolIndex(small)]
	found := nilNode
	u, ok := sp.unmapped.lowerBound(span{tagged: true, stream: stream})
	for ; ok && u.tagged && u.stream == stream; u, ok = sp.unmapped.above(u) {
		c := u.node
		if prev := sp.node(c).prev; prev != nilNode && sp.node(prev).state == nodeFree {
			c = prev
		}
		if p.hasAddressSpace(sp, c, rs) {
			found = c
			break
		}
	}
	if found != nilNode {
		return found, nil
	}
	addr, err := p.mapper.ReserveAddress(p.vaSize)
	if err != nil {
		return nilNode, err
	}
	id := sp.addSegment(addr, p.vaSize, true, stream, nodeUnmapped)
	p.segments[addr] = &torchSegment{size: p.vaSize, small: small, stream: stream, expandable: true, head: id}
	return id, nil
}

// hasAddressSpace reports whether the free and unmapped nodes from c on add up to need bytes.
func (p *torchPool) hasAddressSpace(sp *space, c int32, need uint64) bool {
	total := uint64(0)
	for ; c != nilNode && sp.node(c).state != nodeUsed; c = sp.node(c).next {
		if total += sp.node(c).size; total >= need {
			return true
		}
	}
	return false
}

// mapBlock is PyTorch's map_block: map whole pages at the start of unmapped node u to cover
// size bytes, and return the free node they form with their free neighbours.
func (p *torchPool) mapBlock(small bool, u int32, size uint64) (int32, bool, error) {
	sp := p.pools[poolIndex(small)]
	un := *sp.node(u)
	n := min(roundUpAny(size, pageSize(small)), un.size)
	if err := p.up.mapPages(p.mapper, un.addr, n); err != nil {
		if isOOM(err) {
			return nilNode, false, nil
		}
		return nilNode, false, err
	}
	if n < un.size {
		sp.split(u, n)
	}
	return sp.setState(u, nodeFree), true, nil
}

// unmapBlock is PyTorch's unmap_block: unmap the whole pages inside free node id; the slivers
// before and after them stay free and mapped.
func (p *torchPool) unmapBlock(small bool, id int32) error {
	sp := p.pools[poolIndex(small)]
	s := sp.node(id).span
	page := pageSize(small)
	begin := s.seg + roundUpAny(s.addr-s.seg, page)
	end := s.seg + (s.end()-s.seg)/page*page
	if begin >= end {
		return nil
	}
	if err := p.up.unmapPages(p.mapper, begin, end-begin); err != nil {
		return err
	}
	mid := id
	if begin > s.addr {
		mid = sp.split(id, begin-s.addr)
	}
	if end < s.end() {
		sp.split(mid, end-begin)
	}
	sp.setState(mid, nodeUnmapped)
	return nil
}

// unmapAndRelease unmaps the pages inside free block s and, when its segment has no page mapped
// any more, releases the segment's address space (PyTorch's release_expandable_segment).
func (p *torchPool) unmapAndRelease(small bool, s span) error {
	if err := p.unmapBlock(small, s.node); err != nil {
		return err
	}
	sp, seg := p.pools[poolIndex(small)], p.segments[s.seg]
	if h := sp.node(seg.head); h.state != nodeUnmapped || h.next != nilNode {
		return nil
	}
	sp.dropSegment(seg.head)
	delete(p.segments, s.seg)
	return p.mapper.ReleaseAddress(s.seg, seg.size)
}

// closeExpandable unmaps every mapped range of a segment and releases its address space.
func (p *torchPool) closeExpandable(addr uint64, seg *torchSegment) error {
	sp := p.pools[poolIndex(seg.small)]
	var errs []error
	runStart, inRun := uint64(0), false
	for id := seg.head; id != nilNode; id = sp.node(id).next {
		n := sp.node(id)
		switch {
		case n.state != nodeUnmapped && !inRun:
			runStart, inRun = n.addr, true
		case n.state == nodeUnmapped && inRun:
			errs = append(errs, p.up.unmapPages(p.mapper, runStart, n.addr-runStart))
			inRun = false
		}
	}
	if inRun {
		errs = append(errs, p.up.unmapPages(p.mapper, runStart, addr+seg.size-runStart))
	}
	sp.dropSegment(seg.head)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return p.mapper.ReleaseAddress(addr, seg.size)
}
