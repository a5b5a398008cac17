package pool

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// ArenaPaging backs PolicySizeClass's large-block arena with memory mapped page by page, as
// PyTorch's expandable segments and cudaMallocAsync's pools do, instead of one region: the
// arena is ArenaBytes of address space (Mapper.ReserveAddress) whose first BudgetBytes are mapped
// at New (one Map call, as a fixed arena reserves its region up front) and any other page when a
// block first needs it. A page no block uses stays mapped (it serves the next block placed there
// without a driver call) until mapping more would hold more than BudgetBytes: then idle pages,
// highest address first, are moved where the block needs them when the Mapper is a Remapper
// (else unmapped before new ones are mapped), until the budget is met or no idle page is left
// (the budget is a target; the pool never fails for it). So where a fixed arena's size is set by
// its worst fragmentation, a paged arena holds about its live pages: variable-shape workloads
// trade page operations for memory. A block is cut from the end of its best-fitting span that
// needs fewer new pages (the low end on a tie; ArenaFit still places blocks in arena regions
// added by growth). Needs an Upstream that is a Mapper.
type ArenaPaging struct {
	// PageBytes is the page size: a multiple of the alignment (on a GPU, the allocation
	// granularity, cuMemGetAllocationGranularity: 2 MiB on current devices).
	PageBytes uint64 `json:"page_bytes"`
	// BudgetBytes is the most bytes the arena keeps mapped before it moves or unmaps idle pages,
	// mapped at New; at most ArenaBytes (0 = unbounded: nothing mapped at New, pages never
	// unmapped).
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
	case c.BudgetBytes > arenaBytes:
		return fmt.Errorf("budget_bytes: %d is more than arena_bytes %d", c.BudgetBytes, arenaBytes)
	}
	return nil
}

// maxPages bounds a paged arena's pages (32 TiB in 2 MiB pages): the pager keeps 4 bytes and 2
// bits per page.
const maxPages = 1 << 24

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
	need    []uint64 // scratch: pages a block needs mapped
	victims []uint64 // scratch: idle pages to make room with
}

func newPager(m Mapper, up *tracked, base, size uint64, cfg *ArenaPaging) *pager {
	n := size / cfg.PageBytes
	words := (n + 63) / 64
	return &pager{m: m, up: up, base: base, page: cfg.PageBytes, budget: cfg.BudgetBytes / cfg.PageBytes,
		users: make([]uint32, n), mapped: make([]uint64, words), idle: make([]uint64, words)}
}

// premap maps the first budget pages, idle, in one call.
func (g *pager) premap() error {
	if g.budget == 0 {
		return nil
	}
	if err := g.up.mapPages(g.m, g.base, g.budget*g.page); err != nil {
		return err
	}
	for i := range g.budget {
		put(g.mapped, i)
		put(g.idle, i)
	}
	g.nMapped = g.budget
	return nil
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
// are mapped. When that would pass the budget, idle pages elsewhere make room first: moved onto
// the pages needed when the Mapper is a Remapper, else unmapped.
func (g *pager) cover(addr, size uint64) error {
	first, last := g.pages(addr, size)
	need := g.need[:0]
	for i := first; i <= last; i++ {
		if g.users[i]++; g.users[i] == 1 && has(g.mapped, i) {
			drop(g.idle, i)
		}
		if !has(g.mapped, i) {
			need = append(need, i)
		}
	}
	g.need = need
	if n := uint64(len(need)); g.budget > 0 && g.nMapped+n > g.budget {
		if err := g.makeRoom(need, g.nMapped+n-g.budget); err != nil {
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

// makeRoom frees up to n mapped pages for the pages in need (ascending, unmapped): the highest
// idle pages, moved onto need's first pages by a Remapper (those beyond len(need) unmapped), else
// unmapped.
func (g *pager) makeRoom(need []uint64, n uint64) error {
	victims := g.highestIdle(n)
	r, ok := g.m.(Remapper)
	if !ok {
		return g.unmapPages(victims)
	}
	if len(victims) > len(need) { // over the budget already: the rest is unmapped
		if err := g.unmapPages(victims[len(need):]); err != nil {
			return err
		}
		victims = victims[:len(need)]
	}
	for i := 0; i < len(victims); {
		j := i // victims[i..j] and need[i..j] both consecutive: one call
		for j+1 < len(victims) && victims[j+1] == victims[j]+1 && need[j+1] == need[j]+1 {
			j++
		}
		k := uint64(j - i + 1)
		if err := g.up.remapPages(r, g.base+victims[i]*g.page, g.base+need[i]*g.page, k*g.page); err != nil {
			return err
		}
		for x := i; x <= j; x++ {
			drop(g.idle, victims[x])
			drop(g.mapped, victims[x])
			put(g.mapped, need[x])
		}
		i = j + 1
	}
	return nil
}

// highestIdle returns up to n idle pages, the highest, in ascending order.
func (g *pager) highestIdle(n uint64) []uint64 {
	out := g.victims[:0]
	for w := len(g.idle) - 1; w >= 0 && uint64(len(out)) < n; w-- {
		for word := g.idle[w]; word != 0 && uint64(len(out)) < n; {
			b := 63 - bits.LeadingZeros64(word)
			out = append(out, uint64(w)*64+uint64(b))
			word &^= 1 << b
		}
	}
	slices.Reverse(out)
	g.victims = out
	return out
}

// unmapPages unmaps the given idle pages (ascending), a call per run of adjacent ones.
func (g *pager) unmapPages(pages []uint64) error {
	for i := 0; i < len(pages); {
		j := i
		for j+1 < len(pages) && pages[j+1] == pages[j]+1 {
			j++
		}
		if err := g.up.unmapPages(g.m, g.base+pages[i]*g.page, uint64(j-i+1)*g.page); err != nil {
			return err
		}
		for k := i; k <= j; k++ {
			drop(g.idle, pages[k])
			drop(g.mapped, pages[k])
		}
		g.nMapped -= uint64(j - i + 1)
		i = j + 1
	}
	return nil
}

// mapRun maps pages i..j; when the upstream is out of memory it unmaps every idle page and tries
// once more.
func (g *pager) mapRun(i, j uint64) error {
	err := g.up.mapPages(g.m, g.base+i*g.page, (j-i+1)*g.page)
	if err != nil && isOOM(err) && g.nIdle() > 0 {
		if err := g.unmapPages(g.highestIdle(g.nIdle())); err != nil {
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
