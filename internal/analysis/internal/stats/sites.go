package stats

import (
	"cmp"
	"slices"
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// sitesShown is how many callsites the report lists, by bytes allocated and by bytes held at peak.
const sitesShown = 10

// site is one callsite of one process: the code that allocated.
type site struct {
	pid  uint32
	addr uint64
}

// siteTally is what one callsite allocated.
type siteTally struct {
	allocs, bytes, live, atPeak uint64
	frees                       uint64 // of blocks it allocated
	liveBlocks                  uint64
	firstSeq, maxSize           uint64
	fn                          uint16 // the function of its first allocation
	// Allocations whose size is not a multiple of 2 MiB, not of 512 B; of exactly 2 MiB, 20 MiB.
	not2MiB, not512, exact2MiB, exact20MiB uint64
	oldest                                 []schema.EventRef // its oldest blocks live at the end
}

// Sizes that tell a framework's segments (package framework).
const (
	twoMiB    = 2 << 20
	twentyMiB = 20 << 20
)

// sizeShape counts the shape of one allocation's size in t.
func (t *siteTally) sizeShape(size uint64) {
	if size%twoMiB != 0 {
		t.not2MiB++
	}
	if size%512 != 0 {
		t.not512++
	}
	switch size {
	case twoMiB:
		t.exact2MiB++
	case twentyMiB:
		t.exact20MiB++
	}
	t.maxSize = max(t.maxSize, size)
}

// siteTable tallies allocations by callsite, with the bytes each held at the overall peak: the
// changes since the last peak are journaled and applied when a new peak is reached, so each event
// costs O(1) (as sizeTable does for sizes).
type siteTable struct {
	cache    [256]siteCacheEntry // direct-mapped, in front of index: callsites repeat
	index    map[site]int32
	tallies  []siteTally
	journal  []siteChange
	overflow bool // the journal grew too long and was dropped: the next snapshot copies every site
}

// maxSiteJournal bounds the changes kept between two peaks: past it the next snapshot copies
// every site instead, which costs less than a long journal (sites are few, events many).
const maxSiteJournal = 4096

type siteCacheEntry struct {
	k   site
	i   int32
	set bool
}

type siteChange struct {
	i     int32
	delta int64
}

func newSiteTable() *siteTable {
	return &siteTable{index: map[site]int32{}, journal: make([]siteChange, 0, maxSiteJournal)}
}

// alloc counts an allocation (seq, function fn) of size bytes at callsite addr of pid and returns
// its site's index.
func (s *siteTable) alloc(pid uint32, addr, size, seq uint64, fn uint16) int32 {
	k := site{pid, addr}
	c := &s.cache[((addr^uint64(pid)<<40)*0x9e3779b97f4a7c15)>>56]
	i := c.i
	if !c.set || c.k != k {
		var ok bool
		if i, ok = s.index[k]; !ok {
			i = int32(len(s.tallies))
			s.index[k] = i
			s.tallies = append(s.tallies, siteTally{firstSeq: seq, fn: fn})
		}
		*c = siteCacheEntry{k, i, true}
	}
	t := &s.tallies[i]
	t.allocs++
	t.bytes += size
	t.live += size
	t.liveBlocks++
	t.sizeShape(size)
	s.note(i, int64(size))
	return i
}

// note journals a change of site i's live bytes, or gives the journal up when it is too long.
func (s *siteTable) note(i int32, delta int64) {
	if s.overflow {
		return
	}
	if len(s.journal) >= maxSiteJournal {
		s.overflow, s.journal = true, s.journal[:0]
		return
	}
	s.journal = append(s.journal, siteChange{i, delta})
}

// free counts the free of size bytes allocated at site i.
func (s *siteTable) free(i int32, size uint64) {
	t := &s.tallies[i]
	t.live -= size
	t.liveBlocks--
	t.frees++
	s.note(i, -int64(size))
}

// snapshot makes every site's atPeak its live bytes now (a new overall peak).
func (s *siteTable) snapshot() {
	if s.overflow {
		for i := range s.tallies {
			s.tallies[i].atPeak = s.tallies[i].live
		}
		s.overflow, s.journal = false, s.journal[:0]
		return
	}
	for _, c := range s.journal {
		s.tallies[c.i].atPeak = uint64(int64(s.tallies[c.i].atPeak) + c.delta)
	}
	s.journal = s.journal[:0]
}

// result lists the callsites that allocated the most bytes and those that held the most at peak,
// named by name; sites with the same name in a process (stacks that differ deeper down) count as
// one.
func (s *siteTable) result(name func(pid uint32, addr uint64) string) (byBytes, atPeak []schema.CallsiteTally) {
	type named struct {
		pid   uint32
		label string
	}
	merged := map[named]*schema.CallsiteTally{}
	var rows []*schema.CallsiteTally
	for k, i := range s.index {
		t := s.tallies[i]
		n := named{k.pid, name(k.pid, k.addr)}
		r := merged[n]
		if r == nil {
			r = &schema.CallsiteTally{Callsite: n.label, PID: n.pid}
			merged[n] = r
			rows = append(rows, r)
		}
		r.Allocs += t.allocs
		r.Bytes += t.bytes
		r.AtPeakBytes += t.atPeak
		r.EndLiveBytes += t.live
	}
	top := func(by func(*schema.CallsiteTally) uint64) []schema.CallsiteTally {
		order := slices.Clone(rows)
		slices.SortFunc(order, func(a, b *schema.CallsiteTally) int {
			return cmp.Or(cmp.Compare(by(b), by(a)), cmp.Compare(a.PID, b.PID), strings.Compare(a.Callsite, b.Callsite))
		})
		out := []schema.CallsiteTally{}
		for _, r := range order {
			if len(out) == sitesShown || by(r) == 0 {
				break
			}
			out = append(out, *r)
		}
		return out
	}
	return top(func(r *schema.CallsiteTally) uint64 { return r.Bytes }),
		top(func(r *schema.CallsiteTally) uint64 { return r.AtPeakBytes })
}

// SiteSummary is what one callsite of the requests allocated and still held at the end: the
// evidence package framework reads to tell a framework allocator's segments from leaks.
type SiteSummary struct {
	PID      uint32
	Callsite string // its name, or its address in hex
	Function string // the function of its first allocation
	FirstSeq uint64 // its first allocation's seq
	Allocs   uint64
	Frees    uint64 // of blocks it allocated
	Bytes    uint64 // allocated
	MaxSize  uint64
	// Allocations whose size is not a multiple of 2 MiB, not one of 512 B; of exactly 2 MiB, 20 MiB.
	Not2MiB, Not512, Exact2MiB, Exact20MiB uint64
	EndLiveBlocks, EndLiveBytes            uint64
	Oldest                                 []schema.EventRef // its oldest blocks live at the end, at most 5
}

// summaries lists every callsite, the first allocated first, named by name and fnName.
func (s *siteTable) summaries(name func(pid uint32, addr uint64) string, fnName func(uint16) string) []SiteSummary {
	out := make([]SiteSummary, 0, len(s.index))
	for k, i := range s.index {
		t := &s.tallies[i]
		out = append(out, SiteSummary{PID: k.pid, Callsite: name(k.pid, k.addr), Function: fnName(t.fn),
			FirstSeq: t.firstSeq, Allocs: t.allocs, Frees: t.frees, Bytes: t.bytes, MaxSize: t.maxSize,
			Not2MiB: t.not2MiB, Not512: t.not512, Exact2MiB: t.exact2MiB, Exact20MiB: t.exact20MiB,
			EndLiveBlocks: t.liveBlocks, EndLiveBytes: t.live, Oldest: append([]schema.EventRef{}, t.oldest...)})
	}
	slices.SortFunc(out, func(a, b SiteSummary) int {
		return cmp.Or(cmp.Compare(a.FirstSeq, b.FirstSeq), cmp.Compare(a.PID, b.PID), strings.Compare(a.Callsite, b.Callsite))
	})
	return out
}
