package pool

import (
	"errors"
	"fmt"
	"math/bits"
)

// ArenaPaging backs PolicySizeClass's large-block arena with memory mapped page by page, as
// PyTorch's expandable segments and cudaMallocAsync's pools do, instead of one region: the
// arena is ArenaBytes of address space (Mapper.ReserveAddress) in which a page is mapped when a
// block first needs it. A page no block uses stays mapped (it serves the next block placed there
// without a driver call) until mapping more would hold more than BudgetBytes: then idle pages
// are unmapped, highest address first, until the budget is met or no idle page is left (the
// budget is a target; the pool never fails for it). So where a fixed arena's size is set by its
// worst fragmentation, a paged arena holds about its live pages: variable-shape workloads
// trade a few map and unmap calls for memory. A block is cut from the end of its best-fitting
// span that needs fewer new pages (the low end on a tie; ArenaFit still places blocks in arena
// regions added by growth). Needs an Upstream that is a Mapper.
type ArenaPaging struct {
	// PageBytes is the page size: a multiple of the alignment (on a GPU, the allocation
	// granularity, cuMemGetAllocationGranularity: 2 MiB on current devices).
	PageBytes uint64 `json:"page_bytes"`
	// BudgetBytes is the most bytes the arena keeps mapped before it unmaps idle pages
	// (0 = unbounded: pages are never unmapped).
	BudgetBytes uint64 `json:"budget_bytes"`
}

func (c *ArenaPaging) validate(align, arenaBytes uint64) error {
	switch {
	case c.PageBytes == 0 || c.PageBytes%align != 0:
		return fmt.Errorf("page_bytes: %d is not a positive multiple of alignment_bytes %d", c.PageBytes, align)
	case arenaBytes == 0 || arenaBytes%c.PageBytes != 0:
		return fmt.Errorf("arena_bytes: %d is not a positive multiple of arena_paging.page_bytes %d", arenaBytes, c.PageBytes)
	case arenaBytes/c.PageBytes > maxPages:
		return fmt.Errorf("arena_bytes: %d bytes are more than %d pages of %d bytes", arenaBytes, maxPages, c.PageBytes)
	case c.BudgetBytes%c.PageBytes != 0:
		return fmt.Errorf("budget_bytes: %d is not a multiple of page_bytes %d", c.BudgetBytes, c.PageBytes)
	}
	return nil
}

// maxPages bounds a paged arena's pages: the pager keeps 4 bytes and 2 bits per page.
const maxPages = 1 << 28

// pager maps and unmaps the pages of a paged arena's address space [base, base+pages*page).
type pager struct {
	m       Mapper
	up      *tracked
	base    uint64
	page    uint64
	budget  uint64   // in pages; 0 = unbounded
	users   []uint32 // per page: live blocks on it
	mapped  []uint64 // bit set of mapped pages
	idle    []uint64 // bit set of mapped pages without users
	nMapped uint64
}

func newPager(m Mapper, up *tracked, base, size uint64, cfg *ArenaPaging) *pager {
	n := size / cfg.PageBytes
	words := (n + 63) / 64
	return &pager{m: m, up: up, base: base, page: cfg.PageBytes, budget: cfg.BudgetBytes / cfg.PageBytes,
		users: make([]uint32, n), mapped: make([]uint64, words), idle: make([]uint64, words)}
}

func has(set []uint64, i uint64) bool { return set[i/64]&(1<<(i%64)) != 0 }
func put(set []uint64, i uint64)      { set[i/64] |= 1 << (i % 64) }
func drop(set []uint64, i uint64)     { set[i/64] &^= 1 << (i % 64) }

// pages returns the first and last page of [addr, addr+size), which must lie in the arena.
func (g *pager) pages(addr, size uint64) (first, last uint64) {
	return (addr - g.base) / g.page, (addr + size - 1 - g.base) / g.page
}

// owns reports whether addr lies in the paged address space (not in a region the arena grew by).
func (g *pager) owns(addr uint64) bool {
	return addr >= g.base && addr-g.base < uint64(len(g.users))*g.page
}

// unmappedIn counts the pages of [addr, addr+size) that are not mapped.
func (g *pager) unmappedIn(addr, size uint64) uint64 {
	first, last := g.pages(addr, size)
	n := last - first + 1
	for i := first; i <= last; i++ {
		if has(g.mapped, i) {
			n--
		}
	}
	return n
}

// cover makes [addr, addr+size) usable by a new block: its pages gain a user and those not mapped
// are mapped, after unmapping idle pages elsewhere when the budget calls for it.
func (g *pager) cover(addr, size uint64) error {
	first, last := g.pages(addr, size)
	var need uint64
	for i := first; i <= last; i++ {
		if g.users[i]++; g.users[i] == 1 && has(g.mapped, i) {
			drop(g.idle, i)
		}
		if !has(g.mapped, i) {
			need++
		}
	}
	if g.budget > 0 && g.nMapped+need > g.budget {
		if err := g.evict(g.nMapped + need - g.budget); err != nil {
			g.uncover(addr, size)
			return err
		}
	}
	for i := first; i <= last; {
		if has(g.mapped, i) {
			i++
			continue
		}
		j := i
		for j+1 <= last && !has(g.mapped, j+1) {
			j++
		}
		if err := g.mapRun(i, j); err != nil {
			g.uncover(addr, size)
			return err
		}
		for k := i; k <= j; k++ {
			put(g.mapped, k)
		}
		g.nMapped += j - i + 1
		i = j + 1
	}
	return nil
}

// mapRun maps pages i..j; when the upstream is out of memory it unmaps every idle page and tries
// once more.
func (g *pager) mapRun(i, j uint64) error {
	err := g.up.mapPages(g.m, g.base+i*g.page, (j-i+1)*g.page)
	if err != nil && isOOM(err) && g.nIdle() > 0 {
		if err := g.evict(g.nIdle()); err != nil {
			return err
		}
		err = g.up.mapPages(g.m, g.base+i*g.page, (j-i+1)*g.page)
	}
	return err
}

// nIdle counts the idle pages.
func (g *pager) nIdle() uint64 {
	var n int
	for _, w := range g.idle {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// uncover ends a block's use of [addr, addr+size): pages left without users become idle.
func (g *pager) uncover(addr, size uint64) {
	first, last := g.pages(addr, size)
	for i := first; i <= last; i++ {
		if g.users[i]--; g.users[i] == 0 && has(g.mapped, i) {
			put(g.idle, i)
		}
	}
}

// evict unmaps up to n idle pages, highest first, in runs of adjacent pages.
func (g *pager) evict(n uint64) error {
	for w := len(g.idle) - 1; w >= 0 && n > 0; {
		if g.idle[w] == 0 {
			w--
			continue
		}
		hi := uint64(w)*64 + uint64(63-bits.LeadingZeros64(g.idle[w]))
		lo := hi
		for lo > 0 && hi-lo+1 < n && has(g.idle, lo-1) {
			lo--
		}
		if err := g.up.unmapPages(g.m, g.base+lo*g.page, (hi-lo+1)*g.page); err != nil {
			return err
		}
		for k := lo; k <= hi; k++ {
			drop(g.idle, k)
			drop(g.mapped, k)
		}
		g.nMapped -= hi - lo + 1
		n -= hi - lo + 1
	}
	return nil
}

// close unmaps every mapped page and gives the address space back.
func (g *pager) close() error {
	var errs []error
	n := uint64(len(g.users))
	for i := uint64(0); i < n; {
		if !has(g.mapped, i) {
			i++
			continue
		}
		j := i
		for j+1 < n && has(g.mapped, j+1) {
			j++
		}
		errs = append(errs, g.up.unmapPages(g.m, g.base+i*g.page, (j-i+1)*g.page))
		i = j + 1
	}
	clear(g.mapped)
	clear(g.idle)
	g.nMapped = 0
	return errors.Join(append(errs, g.m.ReleaseAddress(g.base, n*g.page))...)
}
