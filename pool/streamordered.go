package pool

import (
	"errors"
	"fmt"
	"slices"

	"github.com/allocscope/allocscope/pool/addrindex"
	"github.com/allocscope/allocscope/pool/internal/spans"
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
	sp        *spans.Space
	regions   *addrindex.Index[soRegion]
	blocks    *addrindex.Index[block]
	align     uint64
	threshold uint64
	empties   []uint64 // bases of regions that had no live block when last looked at (some may have one now)
	pending   []pendingFree
	skipped   []pendingFree // pending frees in regions being released
	drop      []spans.Span  // the regions a trim releases
	tagged    bool          // some free span may be on a stream's own list
}

// pendingFree is a block freed since the last Alloc or Sync, not yet put on its stream's free
// list: when a Sync comes first, it goes straight to the shared free memory. Either way the free
// spans end up as they would have, since merging free neighbours does not depend on the order.
type pendingFree struct {
	node   int32
	stream uint64
}

type soRegion struct {
	size     uint64
	live     int   // live blocks in it
	head     int32 // its first node
	dropping bool  // planned for release by the current trim
	listed   bool  // in empties
}

func newStreamOrdered(cfg Config, up Upstream, o options) *streamOrderedPool {
	p := &streamOrderedPool{
		sp:      spans.NewSpace(),
		regions: addrindex.New[soRegion](),
		blocks:  addrindex.New[block](),
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
	p.settlePending()
	id, ok := spans.NoNode, false
	if p.tagged {
		id, ok = p.sp.BestFit(true, stream, blk)
	}
	if !ok {
		id, ok = p.sp.BestFit(false, 0, blk)
	}
	if ok {
		p.sp.Take(id, blk)
		p.regions.Get(p.sp.Node(id).Seg).live++
	} else {
		var err error
		if id, err = p.grow(blk); err != nil {
			p.c.failed()
			return 0, fmt.Errorf("alloc %d bytes on stream %#x: %w", size, stream, err)
		}
	}
	n := p.sp.Node(id)
	p.blocks.Put(n.Addr, block{req: size, size: blk, seg: n.Seg, stream: stream, node: id})
	p.c.allocated(size, blk)
	return n.Addr, nil
}

// grow adds a region for a block of blk bytes and returns the block's node, trimming empty
// regions and retrying once when the Upstream is out of memory.
func (p *streamOrderedPool) grow(blk uint64) (int32, error) {
	n := roundUp(blk, streamOrderedChunk)
	addr, err := p.up.reserve(n)
	if err != nil && isOOM(err) {
		p.planTrim(0)
		if terr := p.trim(); terr != nil {
			return spans.NoNode, terr
		}
		addr, err = p.up.reserve(n)
	}
	if err != nil {
		return spans.NoNode, err
	}
	id := p.sp.AddSegmentTaken(addr, n, blk)
	p.regions.Put(addr, soRegion{size: n, head: id, live: 1})
	return id, nil
}

// Free puts the block on the freeing stream's free list.
func (p *streamOrderedPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.takeLive(p.blocks, addr)
	if err != nil {
		return err
	}
	r := p.regions.Get(b.seg)
	if r.live--; r.live == 0 && !r.listed {
		r.listed = true
		p.empties = append(p.empties, b.seg)
	}
	p.pending = append(p.pending, pendingFree{node: b.node, stream: stream})
	p.c.freed(b.req, b.size)
	return nil
}

// Sync makes freed blocks usable by every stream and releases unused memory above the threshold.
// Blocks freed in regions about to be released are not merged into the free memory first: the
// outcome is the same, since spans never merge across regions.
func (p *streamOrderedPool) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed("sync")
	}
	p.planTrim(p.threshold)
	p.settleShared()
	err := p.trim()
	if err != nil {
		p.settleSkipped()
	}
	// Tagged spans sort after untagged ones: take the first tagged span until none is left.
	for p.tagged {
		s, ok := p.sp.LowerBoundFree(spans.Span{Tagged: true})
		if !ok || !s.Tagged {
			break
		}
		p.sp.SetOwner(s.Node, false, 0)
	}
	p.tagged = false
	return err
}

// settlePending puts the blocks freed since the last call on their streams' free lists.
func (p *streamOrderedPool) settlePending() {
	for _, f := range p.pending {
		p.sp.Release(f.node, true, f.stream)
	}
	p.tagged = p.tagged || len(p.pending) > 0
	p.pending = p.pending[:0]
}

// settleShared puts the blocks freed since the last call into the free memory every stream
// shares, except those in regions planned for release, which wait in p.skipped.
func (p *streamOrderedPool) settleShared() {
	for _, f := range p.pending {
		if len(p.drop) > 0 && p.regions.Get(p.sp.Node(f.node).Seg).dropping {
			p.skipped = append(p.skipped, f)
			continue
		}
		p.sp.Release(f.node, false, 0)
	}
	p.pending = p.pending[:0]
}

// settleSkipped settles the skipped blocks whose region is still held (a release failed).
func (p *streamOrderedPool) settleSkipped() {
	for _, f := range p.skipped {
		if r := p.regions.Get(p.sp.Node(f.node).Seg); r != nil {
			r.dropping = false
			p.sp.Release(f.node, false, 0)
		}
	}
	p.skipped = p.skipped[:0]
}

// planTrim lists in p.drop the regions without live blocks to release, highest address first,
// while more than keep bytes would stay reserved, and marks them.
func (p *streamOrderedPool) planTrim(keep uint64) {
	p.drop = p.drop[:0]
	reserved := p.c.s.ReservedBytes
	if len(p.empties) == 0 || reserved <= keep {
		return
	}
	idle := p.empties[:0]
	for _, base := range p.empties {
		if r := p.regions.Get(base); r.live == 0 {
			idle = append(idle, base)
		} else {
			r.listed = false
		}
	}
	p.empties = idle
	if keep > 0 && len(idle) > 1 {
		slices.Sort(idle)
	}
	for i := len(idle) - 1; i >= 0 && reserved > keep; i-- {
		r := p.regions.Get(idle[i])
		r.dropping = true
		p.drop = append(p.drop, spans.Span{Addr: idle[i], Size: r.size})
		reserved -= r.size
	}
}

// trim releases the regions planTrim listed.
func (p *streamOrderedPool) trim() error {
	for i, e := range p.drop {
		r, _ := p.regions.Take(e.Addr)
		p.sp.DropSegment(r.head)
		if err := p.up.release(e.Addr, e.Size); err != nil {
			for _, rest := range p.drop[i+1:] {
				p.regions.Get(rest.Addr).dropping = false
			}
			p.forgetDropped()
			return err
		}
	}
	p.forgetDropped()
	p.skipped = p.skipped[:0]
	return nil
}

// forgetDropped takes the regions released by trim off the list of empty regions.
func (p *streamOrderedPool) forgetDropped() {
	kept := p.empties[:0]
	for _, base := range p.empties {
		if p.regions.Get(base) != nil {
			kept = append(kept, base)
		}
	}
	p.empties = kept
	p.drop = p.drop[:0]
}

// Close releases every region.
func (p *streamOrderedPool) Close() error {
	return p.closeOnce(func() error {
		var errs []error
		for _, addr := range p.regions.SortedAddrs() {
			errs = append(errs, p.up.release(addr, p.regions.Get(addr).size))
		}
		return errors.Join(errs...)
	})
}
