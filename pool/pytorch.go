package pool

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/allocscope/allocscope/internal/addrindex"
	"github.com/allocscope/allocscope/internal/spans"
)

// Constants of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp).
const (
	torchMinBlock      = 512      // kMinBlockSize: every size is rounded up to a multiple of this
	torchSmallSize     = 1 << 20  // kSmallSize: requests up to this go to the small pool
	torchSmallBuffer   = 2 << 20  // kSmallBuffer: small-pool segment size
	torchLargeBuffer   = 20 << 20 // kLargeBuffer: segment size for requests below kMinLargeAlloc
	torchMinLargeAlloc = 10 << 20 // kMinLargeAlloc: from here on segments are the request rounded to kRoundLarge
	torchRoundLarge    = 2 << 20  // kRoundLarge
	torchAddressSpace  = 1 << 40  // address space of one expandable segment when the capacity is unbounded
)

// torchPool is PolicyPyTorch, a model of PyTorch's CUDA caching allocator. Its rules:
//
//   - A request is rounded up to 512 B (roundup_power2_divisions: to the next of N equal steps
//     between two powers of two, for requests above 512·N B, N by the request's size range with
//     the range form, see RoundupRange). Rounded sizes up to 1 MiB use the small pool, larger
//     ones the large pool.
//   - Best fit within the pool among the free blocks of the request's stream: the smallest block
//     that fits, lowest address among equals. With max_split_size set, a request below it never
//     takes a block at or above it, and a request at or above it takes a block only if the block
//     is less than 20 MiB larger.
//   - No fit: with garbage_collection_threshold F and a capacity, when more than F × capacity is
//     reserved, cached segments are released first (collectGarbage); then a new segment
//     (cudaMalloc): 2 MiB for the small pool, 20 MiB for requests below 10 MiB, else the request
//     rounded up to 2 MiB.
//   - The block is cut at the low end when the rest is worth keeping: small pool (or expandable
//     segments) when the rest is at least 512 B; large pool when the request is below
//     max_split_size and the rest is above 1 MiB. The rest stays free on the same stream.
//   - A freed block returns to its allocation stream's pool and merges with free neighbours in
//     its segment. Segments are kept (cached), never returned, except on a failed cudaMalloc:
//     first the oversize cached blocks (≥ max_split_size) of the stream are released — the
//     smallest single one large enough, else the largest ones until enough — and the cudaMalloc
//     retried; then every cached segment that is entirely free, and the cudaMalloc retried.
//   - CapacityBytes makes cudaMalloc fail when reserved memory would exceed it.
//   - expandable_segments: each stream and pool has growing segments in a large reserved address
//     range, backed by pages of 2 MiB (small) or 20 MiB (large) mapped as needed (reserved =
//     mapped pages). With no fit, the free end of a segment is extended by mapping pages behind
//     it; releasing cached memory unmaps the whole pages inside free blocks.
type torchPool struct {
	base
	mapper     Mapper
	pools      [2]*spans.Space // [0] large pool, [1] small pool
	segments   map[uint64]*torchSegment
	blocks     *addrindex.Index[block]
	maxSplit   uint64 // math.MaxUint64 when unlimited
	divisions  [roundupBuckets]uint64
	expandable bool
	vaSize     uint64 // address space of one expandable segment
	gc         torchGC
}

// torchGC is the state of garbage_collection_threshold (PyTorch's garbage_collect_cached_blocks).
// A segment's age is the large pool's get_free_block calls since it became wholly free (PyTorch's
// gc_count: get_free_blocks_call_count minus gc_count_base).
type torchGC struct {
	limit uint64            // reserved bytes above which cached segments are collected; 0 = off
	calls uint64            // get_free_block calls on the large pool
	idle  map[uint64]uint64 // wholly free large segment (address) → calls when it became so
}

type torchSegment struct {
	size       uint64
	small      bool
	stream     uint64
	expandable bool
	head       int32 // its first node
}

func poolIndex(small bool) int {
	if small {
		return 1
	}
	return 0
}

func newPyTorch(cfg Config, up Upstream, o options) (*torchPool, error) {
	pc := PyTorchConfig{}
	if cfg.PyTorch != nil {
		pc = *cfg.PyTorch
	}
	p := &torchPool{
		segments:   make(map[uint64]*torchSegment),
		blocks:     addrindex.New[block](),
		maxSplit:   math.MaxUint64,
		divisions:  pc.divisionTable(),
		expandable: pc.ExpandableSegments,
	}
	p.init(up, o)
	p.up.limit = pc.CapacityBytes
	if pc.MaxSplitSizeMB > 0 {
		p.maxSplit = pc.MaxSplitSizeMB << 20
	}
	for i := range p.pools {
		p.pools[i] = spans.NewSpace()
	}
	if g := pc.GarbageCollectionThreshold; g > 0 && pc.CapacityBytes > 0 {
		p.gc = torchGC{limit: uint64(g * float64(pc.CapacityBytes)), idle: map[uint64]uint64{}}
	}
	if p.expandable {
		m, ok := up.(Mapper)
		if !ok {
			return nil, fmt.Errorf("expandable_segments needs an upstream that maps pages (a pool.Mapper); %T is not one", up)
		}
		p.mapper = m
		p.vaSize = AlignUp(torchAddressSpace, torchLargeBuffer)
		if pc.CapacityBytes > 0 {
			p.vaSize = AlignUp(pc.CapacityBytes+pc.CapacityBytes/8, torchLargeBuffer)
		}
	}
	return p, nil
}

// roundSize is PyTorch's round_size.
func (p *torchPool) roundSize(size uint64) uint64 {
	if size < torchMinBlock {
		return torchMinBlock
	}
	if d := p.divisions[roundupBucket(size)]; d > 1 && size > torchMinBlock*d {
		return roundupPower2Division(size, d)
	}
	return AlignUp(size, torchMinBlock)
}

// roundupPower2Division rounds size up to the next of divisions equal steps between the powers
// of two around it (divisions is a power of two).
func roundupPower2Division(size, divisions uint64) uint64 {
	if bits.OnesCount64(size) == 1 {
		return size
	}
	floor := uint64(1) << (63 - bits.LeadingZeros64(size))
	step := floor >> (63 - bits.LeadingZeros64(divisions))
	if step == 0 {
		return floor << 1
	}
	down := size &^ (step - 1)
	if down == size {
		return size
	}
	return down + step
}

// allocationSize is PyTorch's get_allocation_size: the segment for a rounded request.
func allocationSize(size uint64) uint64 {
	switch {
	case size <= torchSmallSize:
		return torchSmallBuffer
	case size < torchMinLargeAlloc:
		return torchLargeBuffer
	}
	return AlignUp(size, torchRoundLarge)
}

// Alloc follows PyTorch's malloc: search the pool, else allocate a segment, else free cached
// memory and retry.
func (p *torchPool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(size); err != nil {
		return 0, err
	}
	rs := p.roundSize(size)
	small := rs <= torchSmallSize
	id, ok := p.getFreeBlock(small, stream, rs)
	var err error
	if !ok {
		id, ok, err = p.allocWithRetry(small, stream, rs)
	}
	if err == nil && !ok {
		err = fmt.Errorf("no segment for %d bytes: %w", rs, ErrOutOfMemory)
	}
	if err != nil {
		p.c.failed()
		return 0, fmt.Errorf("alloc %d bytes on stream %#x: %w", size, stream, err)
	}
	sp := p.pools[poolIndex(small)]
	n := sp.Node(id)
	delete(p.gc.idle, n.Seg)
	keep := n.Size
	if p.shouldSplit(n.Size, rs, small) {
		keep = rs
	}
	sp.Take(id, keep)
	n = sp.Node(id)
	p.blocks.Put(n.Addr, block{req: size, size: keep, seg: n.Seg, stream: stream, node: id, small: small})
	p.c.allocated(size, keep)
	return n.Addr, nil
}

// shouldSplit is PyTorch's should_split.
func (p *torchPool) shouldSplit(blockSize, rs uint64, small bool) bool {
	rest := blockSize - rs
	if small || p.expandable {
		return rest >= torchMinBlock
	}
	return rs < p.maxSplit && rest > torchSmallSize
}

// getFreeBlock is PyTorch's get_free_block: best fit on the stream, with the oversize rules.
// It returns a free node, still in its tree.
func (p *torchPool) getFreeBlock(small bool, stream, rs uint64) (int32, bool) {
	if !small {
		p.gc.calls++
	}
	sp := p.pools[poolIndex(small)]
	var cand spans.Span
	found := false
	sp.AscendFree(true, stream, rs, func(s spans.Span) bool {
		if !found {
			cand, found = s, true
			return p.expandable
		}
		// Expandable segments: prefer a block that can grow less (keep a segment's growing end).
		if p.expandableSize(sp, s) < p.expandableSize(sp, cand) {
			cand = s
			return true
		}
		return false
	})
	if !found {
		return spans.NoNode, false
	}
	if rs < p.maxSplit && cand.Size >= p.maxSplit {
		return spans.NoNode, false
	}
	if rs >= p.maxSplit && cand.Size >= rs+torchLargeBuffer {
		return spans.NoNode, false
	}
	return cand.Node, true
}

// expandableSize is a free block's size plus the unmapped range right after it in its segment.
func (p *torchPool) expandableSize(sp *spans.Space, s spans.Span) uint64 {
	if nx := sp.Node(s.Node).Next; nx != spans.NoNode && sp.Node(nx).State == spans.NodeUnmapped {
		return s.Size + sp.Node(nx).Size
	}
	return s.Size
}

// allocWithRetry is the cudaMalloc part of PyTorch's malloc: garbage collection, then the
// cudaMalloc with its two retries. It returns a free node, still in its tree.
func (p *torchPool) allocWithRetry(small bool, stream, rs uint64) (int32, bool, error) {
	if err := p.collectGarbage(); err != nil {
		return spans.NoNode, false, err
	}
	id, ok, err := p.allocBlock(small, stream, rs)
	if ok || err != nil {
		return id, ok, err
	}
	released, err := p.releaseAvailable(small, stream, rs)
	if err != nil {
		return spans.NoNode, false, err
	}
	if released {
		if id, ok, err = p.allocBlock(small, stream, rs); ok || err != nil {
			return id, ok, err
		}
	}
	if err := p.releaseCached(); err != nil {
		return spans.NoNode, false, err
	}
	return p.allocBlock(small, stream, rs)
}

// allocBlock is PyTorch's alloc_block: a new segment, or with expandable segments, more pages.
// An out-of-memory Upstream gives ok == false and no error.
func (p *torchPool) allocBlock(small bool, stream, rs uint64) (int32, bool, error) {
	if p.expandable {
		return p.allocExpandable(small, stream, rs)
	}
	n := allocationSize(rs)
	addr, err := p.up.reserve(n)
	if err != nil {
		if isOOM(err) {
			return spans.NoNode, false, nil
		}
		return spans.NoNode, false, err
	}
	id := p.pools[poolIndex(small)].AddSegment(addr, n, true, stream, spans.NodeFree)
	p.segments[addr] = &torchSegment{size: n, small: small, stream: stream, head: id}
	return id, true, nil
}

// releaseAvailable is PyTorch's release_available_cached_blocks: with max_split_size set, free
// the stream's oversize cached segments, the smallest one that suffices or else the largest
// ones until enough. It reports whether enough was released.
func (p *torchPool) releaseAvailable(small bool, stream, rs uint64) (bool, error) {
	if p.maxSplit == math.MaxUint64 {
		return false, nil
	}
	sp := p.pools[poolIndex(small)]
	key := max(rs, p.maxSplit)
	if id, ok := sp.BestFit(true, stream, key); ok && !p.segments[sp.Node(id).Seg].expandable {
		return p.releaseWhole(sp, id)
	}
	var victims []int32
	total := uint64(0)
	sp.DescendFreeBelow(true, stream, key, func(s spans.Span) bool {
		if total >= key || s.Size < p.maxSplit {
			return false
		}
		if !p.segments[s.Seg].expandable && isWholeSegment(sp, s.Node) {
			victims = append(victims, s.Node)
			total += s.Size
		}
		return true
	})
	for _, id := range victims {
		if _, err := p.releaseWhole(sp, id); err != nil {
			return false, err
		}
	}
	return total >= key, nil
}

// isWholeSegment reports whether node id is all of its segment (PyTorch: no prev, no next).
func isWholeSegment(sp *spans.Space, id int32) bool {
	n := sp.Node(id)
	return n.Prev == spans.NoNode && n.Next == spans.NoNode
}

// releaseWhole returns the segment of free node id to the Upstream if the node is the whole segment.
func (p *torchPool) releaseWhole(sp *spans.Space, id int32) (bool, error) {
	if !isWholeSegment(sp, id) {
		return false, nil
	}
	n := *sp.Node(id)
	sp.DropSegment(id)
	delete(p.segments, n.Seg)
	delete(p.gc.idle, n.Seg)
	if err := p.up.release(n.Addr, n.Size); err != nil {
		return false, err
	}
	return true, nil
}

// collectGarbage is PyTorch's garbage_collect_cached_blocks, run before a segment is allocated:
// when more than gc.limit bytes are reserved, it releases wholly free large segments, those at
// least as old as the average of the rest in each round, until the bytes released reach what is
// reserved above the limit (a round does not stop at the target) or none is left. Segments of
// expandable segments are never whole (their unmapped rest follows them) and stay.
func (p *torchPool) collectGarbage() error {
	reserved := p.c.s.ReservedBytes
	if p.gc.limit == 0 || reserved <= p.gc.limit || len(p.gc.idle) == 0 {
		return nil
	}
	sp := p.pools[0]
	type aged struct {
		span spans.Span
		age  uint64
	}
	cands := make([]aged, 0, len(p.gc.idle))
	var total uint64
	for seg, since := range p.gc.idle {
		cands = append(cands, aged{span: sp.Node(p.segments[seg].head).Span, age: p.gc.calls - since})
		total += p.gc.calls - since
	}
	// PyTorch walks its free blocks by stream, size and address; the order only decides the
	// order of the releases.
	slices.SortFunc(cands, func(a, b aged) int {
		return cmp.Or(cmp.Compare(a.span.Stream, b.span.Stream), cmp.Compare(a.span.Size, b.span.Size),
			cmp.Compare(a.span.Addr, b.span.Addr))
	})
	target, reclaimed := reserved-p.gc.limit, uint64(0)
	for reclaimed < target && len(cands) > 0 {
		avg := float64(total) / float64(len(cands))
		kept := cands[:0]
		for _, c := range cands {
			if float64(c.age) < avg {
				kept = append(kept, c)
				continue
			}
			if _, err := p.releaseWhole(sp, c.span.Node); err != nil {
				return err
			}
			reclaimed += c.span.Size
			total -= c.age
		}
		cands = kept // the oldest is always at least the average: every round releases one
	}
	return nil
}

// releaseCached is PyTorch's release_cached_blocks: every cached segment that is entirely free
// goes back to the Upstream; in expandable segments the whole pages inside free blocks are
// unmapped, and a segment left with no page mapped gives its address space back.
func (p *torchPool) releaseCached() error {
	for i, sp := range p.pools {
		for _, s := range sp.FreeSpans() {
			var err error
			if p.segments[s.Seg].expandable {
				err = p.unmapAndRelease(i == 1, s)
			} else {
				_, err = p.releaseWhole(sp, s.Node)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Free returns the block to its allocation stream's pool, merged with free neighbours.
func (p *torchPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.takeLive(p.blocks, addr)
	if err != nil {
		return err
	}
	sp := p.pools[poolIndex(b.small)]
	id := sp.Release(b.node, true, b.stream)
	if p.gc.idle != nil && !b.small && isWholeSegment(sp, id) && !p.segments[b.seg].expandable {
		p.gc.idle[b.seg] = p.gc.calls
	}
	p.c.freed(b.req, b.size)
	return nil
}

// takeLive is the start of a Free, under the lock: an error on a closed allocator or an address
// that is not a live block of blocks, else the block, taken out of blocks.
func (b *base) takeLive(blocks *addrindex.Index[block], addr uint64) (block, error) {
	if b.closed {
		return block{}, errClosed("free")
	}
	blk, ok := blocks.Take(addr)
	if !ok {
		return block{}, errUnknown(addr)
	}
	return blk, nil
}

// Close returns every segment (and every mapped page) to the Upstream.
func (p *torchPool) Close() error {
	return p.closeOnce(func() error {
		var errs []error
		for _, addr := range sortedKeys(p.segments) {
			seg := p.segments[addr]
			if seg.expandable {
				errs = append(errs, p.closeExpandable(addr, seg))
				continue
			}
			errs = append(errs, p.up.release(addr, seg.size))
		}
		return errors.Join(errs...)
	})
}
