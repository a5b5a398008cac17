package pool

import (
	"errors"
	"fmt"
	"math"
)

// streamOrderedChunk is the granularity in which the stream-ordered model takes memory from the
// Upstream: cudaMallocAsync's pools are backed by 2 MiB pages.
const streamOrderedChunk = 2 << 20

// streamOrderedPool is PolicyStreamOrdered, a model of a cudaMallocAsync memory pool:
//
//   - A request is rounded up to the alignment and cut best-fit first from the blocks freed on
//     its own stream (stream order makes them safe to reuse at once), then from free memory that
//     a synchronization has made usable by every stream.
//   - When nothing fits, the pool grows by a region of the block rounded up to 2 MiB.
//   - Free puts the block on the freeing stream's own free list, merged with free neighbours of
//     the same list and region.
//   - Sync (a synchronization point) makes every freed block usable by every stream, merges
//     them, and then returns regions that hold no live block to the Upstream, highest address
//     first, while more than ReleaseThresholdBytes are reserved.
//   - When the Upstream is out of memory, every region without a live block is released and the
//     growth is tried once more, as the driver trims a pool before failing.
type streamOrderedPool struct {
	base
	sp        *space
	regions   *addrIndex[soRegion]
	blocks    *addrIndex[block]
	align     uint64
	threshold uint64
	empty     *spanTree // regions without a live block, by base address (trim takes the highest first)
	pending   []pendingFree
	tagged    bool // some free span may be on a stream's own list
}

// pendingFree is a block freed since the last Alloc or Sync, not yet put on its stream's free
// list: when a Sync comes first, it goes straight to the shared free memory. Either way the free
// spans end up as they would have, since merging free neighbours does not depend on the order.
type pendingFree struct {
	node   int32
	stream uint64
}

type soRegion struct {
	size uint64
	live int   // live blocks in it
	head int32 // its first node
}

func newStreamOrdered(cfg Config, up Upstream, o options) *streamOrderedPool {
	p := &streamOrderedPool{
		sp:      newSpace(),
		regions: newAddrIndex[soRegion](),
		blocks:  newAddrIndex[block](),
		empty:   newSpanTree(byAddrOrder),
		align:   cfg.alignment(),
	}
	if cfg.StreamOrdered != nil {
		p.threshold = cfg.StreamOrdered.ReleaseThresholdBytes
	}
	p.init(up, o)
	return p
}

// Alloc returns a block from the stream's own freed blocks, the synchronized free memory, or a
// new region.
func (p *streamOrderedPool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(size); err != nil {
		return 0, err
	}
	blk := roundUp(max(size, 1), p.align)
	p.settlePending(true)
	id, ok := p.sp.bestFit(true, stream, blk)
	if !ok {
		id, ok = p.sp.bestFit(false, 0, blk)
	}
	if !ok {
		var err error
		if id, err = p.grow(blk); err != nil {
			p.c.failed()
			return 0, fmt.Errorf("alloc %d bytes on stream %#x: %w", size, stream, err)
		}
	}
	p.sp.take(id, blk)
	n := p.sp.node(id)
	if r := p.regions.get(n.seg); r.live == 0 {
		p.empty.delete(span{addr: n.seg})
		r.live++
	} else {
		r.live++
	}
	p.blocks.put(n.addr, block{req: size, size: blk, seg: n.seg, stream: stream, node: id})
	p.c.allocated(size, blk)
	return n.addr, nil
}

// grow adds a region for a block of blk bytes, trimming empty regions and retrying once when
// the Upstream is out of memory.
func (p *streamOrderedPool) grow(blk uint64) (int32, error) {
	n := roundUp(blk, streamOrderedChunk)
	addr, err := p.up.reserve(n)
	if err != nil && isOOM(err) {
		if terr := p.trim(0); terr != nil {
			return nilNode, terr
		}
		addr, err = p.up.reserve(n)
	}
	if err != nil {
		return nilNode, err
	}
	id := p.sp.addSegment(addr, n, false, 0, nodeFree)
	p.regions.put(addr, soRegion{size: n, head: id})
	p.empty.insert(span{addr: addr, size: n})
	return id, nil
}

// Free puts the block on the freeing stream's free list.
func (p *streamOrderedPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed("free")
	}
	b, ok := p.blocks.take(addr)
	if !ok {
		return errUnknown(addr)
	}
	if r := p.regions.get(b.seg); r.live == 1 {
		r.live = 0
		p.empty.insert(span{addr: b.seg, size: r.size})
	} else {
		r.live--
	}
	p.pending = append(p.pending, pendingFree{node: b.node, stream: stream})
	p.c.freed(b.req, b.size)
	return nil
}

// Sync makes freed blocks usable by every stream and releases unused memory above the threshold.
func (p *streamOrderedPool) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed("sync")
	}
	p.settlePending(false)
	// Tagged spans sort after untagged ones: take the first tagged span until none is left.
	for p.tagged {
		s, ok := p.sp.free.lowerBound(span{tagged: true})
		if !ok || !s.tagged {
			break
		}
		p.sp.setOwner(s.node, false, 0)
	}
	p.tagged = false
	return p.trim(p.threshold)
}

// settlePending puts the blocks freed since the last call on their streams' free lists
// (toStreams) or into the free memory every stream shares.
func (p *streamOrderedPool) settlePending(toStreams bool) {
	for _, f := range p.pending {
		if toStreams {
			p.sp.release(f.node, true, f.stream)
		} else {
			p.sp.release(f.node, false, 0)
		}
	}
	p.tagged = p.tagged || (toStreams && len(p.pending) > 0)
	p.pending = p.pending[:0]
}

// trim releases regions without live blocks, highest address first, while more than keep bytes
// are reserved.
func (p *streamOrderedPool) trim(keep uint64) error {
	for p.c.s.ReservedBytes > keep && p.empty.count > 0 {
		e, ok := p.empty.below(span{addr: math.MaxUint64})
		if !ok {
			return nil
		}
		p.empty.delete(e)
		r, _ := p.regions.take(e.addr)
		p.sp.dropSegment(r.head)
		if err := p.up.release(e.addr, e.size); err != nil {
			return err
		}
	}
	return nil
}

// Close releases every region.
func (p *streamOrderedPool) Close() error {
	return p.closeOnce(func() error {
		var errs []error
		for _, addr := range p.regions.sortedAddrs() {
			errs = append(errs, p.up.release(addr, p.regions.get(addr).size))
		}
		return errors.Join(errs...)
	})
}
