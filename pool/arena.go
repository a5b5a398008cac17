package pool

import (
	"errors"
	"fmt"
	"slices"

	"github.com/allocscope/allocscope/internal/addrindex"
	"github.com/allocscope/allocscope/internal/spans"
	"github.com/allocscope/allocscope/internal/upstreams"
)

// base holds what every policy shares: the lock, the counters, the counted Upstream.
type base struct {
	mu     upstreams.OptionalMutex
	c      counters
	up     tracked
	closed bool
}

func (b *base) init(up Upstream, o options) {
	b.up = tracked{up: up, c: &b.c}
	b.mu.Off = o.singleGoroutine
}

// closeOnce is every policy's Close: under the lock, the first call marks the allocator closed and
// runs release (which gives the regions back); later calls do nothing.
func (b *base) closeOnce(release func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return release()
}

// admit is every policy's first step of Alloc, with the lock held: it refuses a closed allocator and
// an impossible request (counted as a failure).
func (b *base) admit(size uint64) error {
	if b.closed {
		return errClosed("alloc")
	}
	if err := checkRequest(size); err != nil {
		b.c.failed()
		return err
	}
	return nil
}

// Stats returns the allocator's counters so far.
func (b *base) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.s
}

// PeakStats returns the counters as they were at the moment of peak reserved memory.
func (b *base) PeakStats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.peak
}

// block is a live block handed out from a space or straight from the Upstream.
type block struct {
	req, size uint64 // bytes requested; bytes of the block
	seg       uint64 // segment (Upstream region) the block lies in
	stream    uint64 // stream it was allocated on
	node      int32  // its node in the policy's space
	small     bool   // PolicyPyTorch: from the small pool
}

// liveBlock is what an arena keeps per live block: its space node and the bytes requested.
type liveBlock struct {
	req      uint64
	node     int32
	deferred bool // freed by FreeDeferred, not reusable yet
}

// errWouldGrow is returned while growth is forbidden (noGrow) by a request that needs it.
var errWouldGrow = errors.New("the pool would grow")

func errClosed(op string) error { return fmt.Errorf("%s: %w", op, ErrClosed) }

func errUnknown(addr uint64) error { return fmt.Errorf("free %#x: %w", addr, ErrUnknownAddress) }

// arena is a best-fit coalescing allocator over regions of address space: the large-block arena
// of PolicySizeClass and the whole of PolicyBestFit (the model of RMM's pool_memory_resource).
// Blocks are the request rounded up to the alignment, cut from the smallest free span that fits
// (lowest address among equals): from its low end, or with FitBestAged from the end next to the
// older neighbour. Freed blocks merge with free neighbours of the same region. When nothing fits it grows by a new region of max(block, growMin) bytes, capped
// so that its regions total at most maximum (0 = unbounded); each growth counts a Fallback.
// With perStream, a freed block is kept for the stream that freed it (fresh space is shared).
type arena struct {
	up        *tracked
	sp        *spans.Space
	blocks    *addrindex.Index[liveBlock] // live blocks: address → node and requested bytes
	owned     map[uint64]uint64           // regions it reserved itself: base → size
	segs      map[uint64]arenaSpace       // all its space, by base: the segments of sp
	align     uint64
	total     uint64 // bytes of all its space
	growMin   uint64
	maximum   uint64
	perStream bool
	fit       Fit
	born      []uint64 // with FitBestAged: per space node, the allocation count when it became a live block
	allocs    uint64
	pg        *pager // with ArenaPaging: maps the pages of the arena's address space
	noGrow    bool   // growth fails with errWouldGrow (uncounted)
	// releaseIdleAll, when set (PolicySizeClass), gives back the owner's idle regions, this arena's
	// among them, when the Upstream is out of memory for a growth; the growth then tries once more.
	releaseIdleAll func() (bytes uint64)
}

func newArena(up *tracked, align, growMin, maximum uint64, perStream bool, fit Fit) *arena {
	return &arena{
		fit:       fit.orDefault(),
		up:        up,
		sp:        spans.NewSpace(),
		blocks:    addrindex.New[liveBlock](),
		owned:     make(map[uint64]uint64),
		segs:      make(map[uint64]arenaSpace),
		align:     align,
		growMin:   AlignUp(growMin, align),
		maximum:   maximum,
		perStream: perStream,
	}
}

// arenaSpace is a segment of an arena's space: its size and its first node.
type arenaSpace struct {
	size uint64
	head int32
}

// addSpace gives the arena [addr, addr+size): a planned part of a region someone else owns, its
// paged address space, or a region it reserved.
func (a *arena) addSpace(addr, size uint64) {
	a.segs[addr] = arenaSpace{size: size, head: a.sp.AddSegment(addr, size, false, 0, spans.NodeFree)}
	a.total += size
}

// addPaged gives the arena size bytes of address space from m whose pages are mapped up to the
// budget at once and beyond it as blocks need them (ArenaPaging).
func (a *arena) addPaged(m Mapper, size uint64, cfg *ArenaPaging) error {
	addr, err := m.ReserveAddress(size)
	if err != nil {
		return fmt.Errorf("reserve %d bytes of address space for the paged arena: %w", size, err)
	}
	a.pg = newPager(m, a.up, addr, size, cfg)
	a.addSpace(addr, size)
	return a.pg.premap()
}

// reserveInitial reserves the arena's planned first region.
func (a *arena) reserveInitial(size uint64) error {
	addr, err := a.up.reserve(size)
	if err != nil {
		return err
	}
	a.owned[addr] = size
	a.addSpace(addr, size)
	return nil
}

// alloc returns the address of a block of at least size bytes for stream, and its size.
func (a *arena) alloc(size, stream uint64) (addr, blk uint64, err error) {
	blk = AlignUp(max(size, 1), a.align)
	id, ok := a.find(blk, stream)
	if !ok {
		if err := a.grow(blk); err != nil {
			return 0, 0, err
		}
		id, _ = a.find(blk, stream)
	}
	if a.cutHigh(id, blk) {
		id = a.sp.TakeHigh(id, blk)
	} else {
		a.sp.Take(id, blk)
	}
	addr = a.sp.Node(id).Addr
	if a.pg != nil && a.pg.owns(addr) {
		if err := a.pg.cover(addr, blk); err != nil {
			a.sp.Release(id, false, 0)
			return 0, 0, err
		}
	}
	a.noteBorn(id)
	a.blocks.Put(addr, liveBlock{req: size, node: id})
	return addr, blk, nil
}

// cutHigh reports whether a block of blk bytes is cut from the high end of free node id: in a
// paged arena the end that needs fewer pages mapped (the low end on a tie, which kept the page
// calls of the variable-shape CNN trace at about a quarter of following the fit on a tie; measured
// before the budget was mapped at New), else as the fit says.
func (a *arena) cutHigh(id int32, blk uint64) bool {
	if n := a.sp.Node(id); a.pg != nil && a.pg.owns(n.Addr) {
		low, high := a.pg.unmappedIn(n.Addr, blk), a.pg.unmappedIn(n.End()-blk, blk)
		return high < low
	}
	return a.fit == FitBestAged && a.high(id)
}

// high reports whether FitBestAged cuts the block from the high end of free node id: its low
// neighbour is younger than its high one.
func (a *arena) high(id int32) bool {
	n := a.sp.Node(id)
	return a.bornAt(n.Prev) > a.bornAt(n.Next)
}

// bornAt returns when node id became a live block; 0 (oldest) for a free node or none.
func (a *arena) bornAt(id int32) uint64 {
	if id == spans.NoNode || a.sp.Node(id).State != spans.NodeUsed {
		return 0
	}
	return a.born[id]
}

// noteBorn records, for FitBestAged, that node id became a live block now.
func (a *arena) noteBorn(id int32) {
	if a.fit != FitBestAged {
		return
	}
	a.allocs++
	for int(id) >= len(a.born) {
		a.born = append(a.born, 0)
	}
	a.born[id] = a.allocs
}

func (a *arena) find(blk, stream uint64) (int32, bool) {
	if a.perStream {
		if id, ok := a.sp.BestFit(true, stream, blk); ok {
			return id, true
		}
	}
	return a.sp.BestFit(false, 0, blk)
}

// free returns the block at addr, freed on stream, to the free space and returns the bytes
// requested for it and its size; ok is false when no block starts at addr.
func (a *arena) free(addr, stream uint64) (req, blk uint64, ok bool) {
	b, ok := a.blocks.Take(addr)
	if !ok {
		return 0, 0, false
	}
	id, req := b.node, b.req
	blk = a.sp.Node(id).Size
	if a.pg != nil && a.pg.owns(addr) {
		a.pg.uncover(addr, blk)
	}
	if a.perStream {
		a.sp.Release(id, true, stream)
	} else {
		a.sp.Release(id, false, 0)
	}
	return req, blk, true
}

// markDeferred marks the live block at addr as freed but not reusable yet.
func (a *arena) markDeferred(addr uint64) error {
	b := a.blocks.Get(addr)
	switch {
	case b == nil:
		return errUnknown(addr)
	case b.deferred:
		return fmt.Errorf("free %#x: %w", addr, ErrFreedTwice)
	}
	b.deferred = true
	return nil
}

// grow adds a region that can hold a block of blk bytes.
func (a *arena) grow(blk uint64) error {
	if a.noGrow {
		return errWouldGrow
	}
	n, err := a.growBytes(blk)
	if err != nil {
		return err
	}
	addr, err := a.up.reserve(n)
	if err != nil && isOOM(err) && a.releaseIdleAll != nil && a.releaseIdleAll() > 0 {
		n, _ = a.growBytes(blk) // the arena holds no more than before: within its maximum still
		addr, err = a.up.reserve(n)
	}
	if err != nil {
		return err
	}
	a.up.c.s.Fallbacks++
	a.owned[addr] = n
	a.addSpace(addr, n)
	return nil
}

// growBytes returns the size of a growth for a block of blk bytes: max(blk, growMin), capped so
// that the arena's space stays within its maximum; an error wrapping ErrOutOfMemory when the
// maximum leaves no room for the block.
func (a *arena) growBytes(blk uint64) (uint64, error) {
	n := max(blk, a.growMin)
	if a.maximum > 0 {
		if a.total >= a.maximum || a.maximum-a.total < blk {
			return 0, fmt.Errorf("arena of %d bytes at its maximum %d: %w", a.total, a.maximum, ErrOutOfMemory)
		}
		n = min(n, a.maximum-a.total)
	}
	return n, nil
}

// close releases the regions the arena reserved, in address order.
func (a *arena) close() error {
	var errs []error
	if a.pg != nil {
		errs = append(errs, a.pg.close())
		a.pg = nil
	}
	for _, addr := range sortedKeys(a.owned) {
		errs = append(errs, a.up.release(addr, a.owned[addr]))
	}
	a.owned = map[uint64]uint64{}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
