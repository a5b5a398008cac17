package pool

import (
	"cmp"
	"slices"

	"github.com/allocscope/allocscope/internal/addrindex"
	"github.com/allocscope/allocscope/internal/spans"
)

// Layouter is implemented by allocators that can say where their memory is: every policy of this
// package. analyze takes the layout of a simulated allocator at its peak of reserved bytes to show
// where the bytes it holds but does not use sit.
type Layouter interface {
	// Layout returns the regions the allocator holds from its Upstream now, by address (nil after
	// Close). Their sizes add up to Stats().ReservedBytes, the sizes of their live blocks to
	// BlockBytes and the bytes those blocks' requests asked for to LiveBytes; their free blocks
	// hold ReservedBytes − BlockBytes (Stats.ExternalFragmentation).
	Layout() []Region
}

// RegionKind says what part of an allocator a Region is.
type RegionKind string

// The kinds of regions.
const (
	// RegionPlan is PolicySizeClass's up-front region: every class's planned slots, then the
	// large-block arena's first space (unless the arena is paged).
	RegionPlan RegionKind = "plan"
	// RegionSlab is a region a PolicySizeClass class grew by: slots of that class.
	RegionSlab RegionKind = "slab"
	// RegionArena is best-fit space: a PolicyBestFit region, a region PolicySizeClass's arena
	// grew by or a run of its paged arena's mapped pages, a PolicyStreamOrdered region.
	RegionArena RegionKind = "arena"
	// RegionSmall is a segment of PolicyPyTorch's small pool (blocks up to 1 MiB).
	RegionSmall RegionKind = "small"
	// RegionLarge is a segment of PolicyPyTorch's large pool.
	RegionLarge RegionKind = "large"
	// RegionBlock is a PolicyRaw block, its own Upstream region.
	RegionBlock RegionKind = "block"
)

// Region is memory an allocator holds from its Upstream: one Reserve, or one run of mapped pages
// (PolicyPyTorch's expandable segments, PolicySizeClass's paged arena). Its blocks tile it: in
// address order, each starting where the one before ends, from offset 0 to Size.
type Region struct {
	Base, Size uint64
	Kind       RegionKind
	// Stream is, for PolicyPyTorch, the stream whose pool the segment belongs to (its free blocks
	// serve only that stream's requests); 0 elsewhere.
	Stream uint64
	// Expandable is true for a mapped run of a PolicyPyTorch expandable segment.
	Expandable bool
	Blocks     []Block
}

// Block is a piece of a Region: a live block, whose address Base+Offset is the one Alloc
// returned for it, or free memory the allocator keeps (cached).
type Block struct {
	Offset, Size uint64 // from the region's base; Size after the allocator's rounding
	Live         bool
	// Requested is, for a live block, the bytes its request asked for.
	Requested uint64
	// Class is, for PolicySizeClass's slots, the class's block size: adjacent free slots of one
	// slab are one free Block of a multiple of it. 0 for every other block.
	Class uint64
}

// layoutBuilder collects the regions of a Layout: the one implementation of layouts, which every
// policy feeds with its slots, its spans (nodes) or its blocks.
type layoutBuilder struct {
	regions []Region
}

// open appends region r and returns its index.
func (b *layoutBuilder) open(r Region) int {
	b.regions = append(b.regions, r)
	return len(b.regions) - 1
}

// add appends a block of size bytes at addr to region i; a free slot right after a free slot of
// the same class joins it.
func (b *layoutBuilder) add(i int, addr, size uint64, live bool, req, class uint64) {
	r := &b.regions[i]
	off := addr - r.Base
	if n := len(r.Blocks); n > 0 && !live && class > 0 {
		last := &r.Blocks[n-1]
		if !last.Live && last.Class == class && last.Offset+last.Size == off {
			last.Size += size
			return
		}
	}
	r.Blocks = append(r.Blocks, Block{Offset: off, Size: size, Live: live, Requested: req, Class: class})
}

// run is a range [addr, end) of a segment that lies in the builder's region `region`.
type run struct {
	addr, end uint64
	region    int
}

// liveFunc returns the bytes requested for the live block at addr, or false when no live block
// starts there (a block freed but not yet put back in its space: free memory).
type liveFunc func(addr uint64) (req uint64, ok bool)

// liveIn is the liveFunc of a policy's index of live blocks.
func liveIn[B interface{ requested() uint64 }](blocks *addrindex.Index[B]) liveFunc {
	return func(addr uint64) (uint64, bool) {
		if blk := blocks.Get(addr); blk != nil {
			return (*blk).requested(), true
		}
		return 0, false
	}
}

func (b block) requested() uint64     { return b.req }
func (b liveBlock) requested() uint64 { return b.req }

// nodes adds the nodes of the segment of sp whose first node is head to the regions of runs
// (ascending, disjoint, inside the segment), each node clipped to the runs it overlaps: used nodes
// as live blocks, free ones as free blocks. Unmapped nodes hold no memory and are left out.
func (b *layoutBuilder) nodes(sp *spans.Space, head int32, runs []run, live liveFunc) {
	ri := 0
	sp.Walk(head, func(n *spans.Node) bool {
		for ri < len(runs) {
			r := runs[ri]
			if lo, hi := max(n.Addr, r.addr), min(n.End(), r.end); lo < hi && n.State != spans.NodeUnmapped {
				var req uint64
				ok := false
				if n.State == spans.NodeUsed {
					req, ok = live(n.Addr)
				}
				b.add(r.region, lo, hi-lo, ok, req, 0)
			}
			if r.end > n.End() {
				return true // the run goes on past this node
			}
			ri++
		}
		return false
	})
}

// heldRuns returns the ranges of the segment of sp whose first node is head that hold memory: its
// nodes that are not unmapped, adjacent ones together.
func heldRuns(sp *spans.Space, head int32) [][2]uint64 {
	var out [][2]uint64
	sp.Walk(head, func(n *spans.Node) bool {
		switch k := len(out); {
		case n.State == spans.NodeUnmapped:
		case k > 0 && out[k-1][1] == n.Addr:
			out[k-1][1] = n.End()
		default:
			out = append(out, [2]uint64{n.Addr, n.End()})
		}
		return true
	})
	return out
}

// layout is every policy's Layout: under the lock, nil once the allocator is closed, else the
// regions fill adds, by address.
func (p *base) layout(fill func(b *layoutBuilder)) []Region {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	var b layoutBuilder
	fill(&b)
	return b.sorted()
}

// sorted returns the regions by base address.
func (b *layoutBuilder) sorted() []Region {
	slices.SortFunc(b.regions, func(x, y Region) int { return cmp.Compare(x.Base, y.Base) })
	return b.regions
}

// Layout lists the planned region (class slabs, then the arena's first space), the slabs classes
// grew by, and the arena's own regions or runs of mapped pages. A block freed by FreeDeferred is
// live until the next synchronization.
func (p *sizeClassPool) Layout() []Region {
	return p.layout(func(b *layoutBuilder) {
		host := -1
		for _, r := range p.regions {
			kind := RegionSlab
			if r.plan {
				kind = RegionPlan
			}
			i := b.open(Region{Base: r.addr, Size: r.size, Kind: kind})
			if r.plan {
				host = i
			}
			p.addSlots(b, i, r)
		}
		p.arena.layout(b, host)
	})
}

// addSlots adds the slots of the slabs in region r to the builder's region i.
func (p *sizeClassPool) addSlots(b *layoutBuilder, i int, r region) {
	k, _ := slices.BinarySearchFunc(p.slabs, r.addr, func(s *slab, a uint64) int { return cmp.Compare(s.base, a) })
	for ; k < len(p.slabs) && p.slabs[k].base < r.addr+r.size; k++ {
		sl := p.slabs[k]
		for slot, req := range sl.req {
			addr := sl.base + uint64(slot)*sl.size
			if req == 0 {
				b.add(i, addr, sl.size, false, 0, sl.size)
			} else {
				b.add(i, addr, sl.size, true, req&^deferredBit-1, sl.size)
			}
		}
	}
}

// layout adds the arena's space to b: space inside a region someone else owns (PolicySizeClass's
// plan) to the builder's region host, each region it reserved itself as a region, and its paged
// address space as a region per run of mapped pages.
func (a *arena) layout(b *layoutBuilder, host int) {
	live := liveIn(a.blocks)
	for _, base := range sortedKeys(a.segs) {
		s := a.segs[base]
		var runs []run
		switch size, owned := a.owned[base]; {
		case a.pg != nil && a.pg.owns(base):
			for _, r := range a.pg.mappedRuns() {
				runs = append(runs, run{r[0], r[1], b.open(Region{Base: r[0], Size: r[1] - r[0], Kind: RegionArena})})
			}
		case owned:
			runs = []run{{base, base + size, b.open(Region{Base: base, Size: size, Kind: RegionArena})}}
		case host >= 0:
			runs = []run{{base, base + s.size, host}}
		}
		b.nodes(a.sp, s.head, runs, live)
	}
}

// mappedRuns returns the runs of adjacent mapped pages, as address ranges, ascending.
func (g *pager) mappedRuns() [][2]uint64 {
	var out [][2]uint64
	n := uint64(len(g.users))
	for i := uint64(0); i < n; i++ {
		if !has(g.mapped, i) {
			continue
		}
		addr := g.base + i*g.page
		if k := len(out); k > 0 && out[k-1][1] == addr {
			out[k-1][1] += g.page
		} else {
			out = append(out, [2]uint64{addr, addr + g.page})
		}
	}
	return out
}

// Layout lists the arena's regions.
func (p *bestFitPool) Layout() []Region {
	return p.layout(func(b *layoutBuilder) {
		p.arena.layout(b, -1)
	})
}

// Layout lists the segments of both pools, an expandable segment by its runs of mapped pages, as
// torch.cuda.memory_snapshot() lists them.
func (p *torchPool) Layout() []Region {
	return p.layout(func(b *layoutBuilder) {
		live := liveIn(p.blocks)
		for _, addr := range sortedKeys(p.segments) {
			seg := p.segments[addr]
			sp := p.pools[poolIndex(seg.small)]
			meta := Region{Kind: RegionLarge, Stream: seg.stream, Expandable: seg.expandable}
			if seg.small {
				meta.Kind = RegionSmall
			}
			held := [][2]uint64{{addr, addr + seg.size}}
			if seg.expandable {
				held = heldRuns(sp, seg.head)
			}
			runs := make([]run, len(held))
			for i, h := range held {
				meta.Base, meta.Size = h[0], h[1]-h[0]
				runs[i] = run{h[0], h[1], b.open(meta)}
			}
			b.nodes(sp, seg.head, runs, live)
		}
	})
}

// Layout lists the pool's runs of mapped 32 MiB steps, one region each, with the blocks and free
// memory in them; unmapped address space is left out.
func (p *streamOrderedPool) Layout() []Region {
	return p.layout(func(b *layoutBuilder) {
		live := liveIn(p.blocks)
		for _, base := range sortedKeys(p.vas) {
			r := p.vas[base]
			var runs []run
			for _, m := range r.mappedRuns() {
				lo, hi := base+uint64(m[0])*streamOrderedStep, base+uint64(m[1])*streamOrderedStep
				runs = append(runs, run{lo, hi, b.open(Region{Base: lo, Size: hi - lo, Kind: RegionArena})})
			}
			b.nodes(p.sp, r.head, runs, live)
		}
	})
}

// Layout lists every live block as a region of its own.
func (p *rawPool) Layout() []Region {
	return p.layout(func(b *layoutBuilder) {
		for _, addr := range p.blocks.SortedAddrs() {
			blk := p.blocks.Get(addr)
			i := b.open(Region{Base: addr, Size: blk.size, Kind: RegionBlock})
			b.add(i, addr, blk.size, true, blk.req, 0)
		}
	})
}
