package pool

import (
	"errors"

	"github.com/allocscope/allocscope/internal/spans"
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
// and return it (a free node, in its tree).
func (p *torchPool) allocExpandable(small bool, stream, rs uint64) (int32, bool, error) {
	sp := p.pools[poolIndex(small)]
	c, err := p.findExpandable(small, stream, rs)
	if err != nil {
		if isOOM(err) {
			return spans.NoNode, false, nil
		}
		return spans.NoNode, false, err
	}
	ok := true
	if sp.Node(c).State == spans.NodeUnmapped {
		if c, ok, err = p.mapBlock(small, c, min(sp.Node(c).Size, rs)); !ok || err != nil {
			return spans.NoNode, false, err
		}
	}
	for sp.Node(c).Size < rs {
		next := sp.Node(c).Next // unmapped: findExpandable saw enough room
		need := rs - sp.Node(c).Size
		if c, ok, err = p.mapBlock(small, next, min(need, sp.Node(next).Size)); !ok || err != nil {
			return spans.NoNode, false, err
		}
	}
	return c, true, nil
}

// findExpandable is PyTorch's find_expandable_block: the lowest-addressed unmapped range of the
// stream (or the free block just before it) from which enough free and unmapped address space
// follows; else a new segment.
func (p *torchPool) findExpandable(small bool, stream, rs uint64) (int32, error) {
	sp := p.pools[poolIndex(small)]
	found := spans.NoNode
	u, ok := sp.LowerBoundUnmapped(spans.Span{Tagged: true, Stream: stream})
	for ; ok && u.Tagged && u.Stream == stream; u, ok = sp.AboveUnmapped(u) {
		c := u.Node
		if prev := sp.Node(c).Prev; prev != spans.NoNode && sp.Node(prev).State == spans.NodeFree {
			c = prev
		}
		if p.hasAddressSpace(sp, c, rs) {
			found = c
			break
		}
	}
	if found != spans.NoNode {
		return found, nil
	}
	addr, err := p.mapper.ReserveAddress(p.vaSize)
	if err != nil {
		return spans.NoNode, err
	}
	id := sp.AddSegment(addr, p.vaSize, true, stream, spans.NodeUnmapped)
	p.segments[addr] = &torchSegment{size: p.vaSize, small: small, stream: stream, expandable: true, head: id}
	return id, nil
}

// hasAddressSpace reports whether the free and unmapped nodes from c on add up to need bytes.
func (p *torchPool) hasAddressSpace(sp *spans.Space, c int32, need uint64) bool {
	total := uint64(0)
	for ; c != spans.NoNode && sp.Node(c).State != spans.NodeUsed; c = sp.Node(c).Next {
		if total += sp.Node(c).Size; total >= need {
			return true
		}
	}
	return false
}

// mapBlock is PyTorch's map_block: map whole pages at the start of unmapped node u to cover
// size bytes, and return the free node they form with their free neighbours.
func (p *torchPool) mapBlock(small bool, u int32, size uint64) (int32, bool, error) {
	sp := p.pools[poolIndex(small)]
	un := *sp.Node(u)
	n := min(AlignUp(size, pageSize(small)), un.Size)
	if err := p.up.mapPages(p.mapper, un.Addr, n); err != nil {
		if isOOM(err) {
			return spans.NoNode, false, nil
		}
		return spans.NoNode, false, err
	}
	if n < un.Size {
		sp.Split(u, n)
	}
	return sp.SetState(u, spans.NodeFree), true, nil
}

// unmapBlock is PyTorch's unmap_block: unmap the whole pages inside free node id; the slivers
// before and after them stay free and mapped.
func (p *torchPool) unmapBlock(small bool, id int32) error {
	sp := p.pools[poolIndex(small)]
	s := sp.Node(id).Span
	page := pageSize(small)
	begin := s.Seg + AlignUp(s.Addr-s.Seg, page)
	end := s.Seg + (s.End()-s.Seg)/page*page
	if begin >= end {
		return nil
	}
	if err := p.up.unmapPages(p.mapper, begin, end-begin); err != nil {
		return err
	}
	mid := id
	if begin > s.Addr {
		mid = sp.Split(id, begin-s.Addr)
	}
	if end < s.End() {
		sp.Split(mid, end-begin)
	}
	sp.SetState(mid, spans.NodeUnmapped)
	return nil
}

// unmapAndRelease unmaps the pages inside free block s and, when its segment has no page mapped
// any more, releases the segment's address space (PyTorch's release_expandable_segment).
func (p *torchPool) unmapAndRelease(small bool, s spans.Span) error {
	if err := p.unmapBlock(small, s.Node); err != nil {
		return err
	}
	sp, seg := p.pools[poolIndex(small)], p.segments[s.Seg]
	if h := sp.Node(seg.head); h.State != spans.NodeUnmapped || h.Next != spans.NoNode {
		return nil
	}
	sp.DropSegment(seg.head)
	delete(p.segments, s.Seg)
	return p.mapper.ReleaseAddress(s.Seg, seg.size)
}

// closeExpandable unmaps every mapped range of a segment and releases its address space.
func (p *torchPool) closeExpandable(addr uint64, seg *torchSegment) error {
	sp := p.pools[poolIndex(seg.small)]
	var errs []error
	runStart, inRun := uint64(0), false
	for id := seg.head; id != spans.NoNode; id = sp.Node(id).Next {
		n := sp.Node(id)
		switch {
		case n.State != spans.NodeUnmapped && !inRun:
			runStart, inRun = n.Addr, true
		case n.State == spans.NodeUnmapped && inRun:
			errs = append(errs, p.up.unmapPages(p.mapper, runStart, n.Addr-runStart))
			inRun = false
		}
	}
	if inRun {
		errs = append(errs, p.up.unmapPages(p.mapper, runStart, addr+seg.size-runStart))
	}
	sp.DropSegment(seg.head)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return p.mapper.ReleaseAddress(addr, seg.size)
}
