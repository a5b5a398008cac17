package whatif

import (
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// mapLogOps bounds the ops a peakMapper keeps between its shadow and the policy (32 bytes each,
// with their sites): past it, or past 4 ops per block of the last layout taken when that is more,
// the shadow takes the layout at the peak so far and catches up, so that the mapper's memory does
// not grow with the trace and taking layouts costs less than serving the ops.
var mapLogOps = 1 << 14

// PeakMap is the layout of a policy's memory at its peak of reserved bytes: the moment of its
// PeakStats (reserved bytes at their maximum; among such moments, the first with the most live
// bytes), where the free bytes it holds are the external fragmentation the report shows. A
// pool.Syncer that the program synchronized right after that moment has none.
type PeakMap struct {
	// Calls is the allocator calls served up to that moment: PeakStats' Allocs + Frees + Failures.
	Calls uint64
	// Stats are the allocator's counters at that moment (its PeakStats).
	Stats pool.Stats
	// Regions is the allocator's layout at that moment (pool.Layouter).
	Regions []pool.Region
	// Sites maps the address of each live block to where its request came from.
	Sites map[uint64]requests.Site
}

// calls counts the calls an allocator served: the position of its Stats in the request stream.
func calls(s pool.Stats) uint64 { return s.Allocs + s.Frees + s.Failures }

// peakMapper takes a policy's layout at the moment of its PeakStats, which is known only after the
// policy served the ops that follow it: a second allocator of the policy (the shadow, which the
// same ops lead to the same states) serves the ops the policy served, from a log, up to the op
// after which the policy's PeakStats were taken, and stops there until the policy's peak moves on.
// The log holds the ops since that moment, up to mapLogOps (or 4 per block of the last layout):
// past that the shadow takes its layout there and catches up with the policy, so that the trace is
// read once and the memory is bounded.
type peakMapper struct {
	alloc   pool.Allocator
	layout  pool.Layouter
	feed    *requests.Feeder
	log     []requests.Op
	sites   []requests.Site // parallel to log
	next    int             // the first op of log the shadow has not served
	peak    pool.Stats      // the policy's PeakStats
	target  uint64          // the calls they count
	handles []uint64        // the stream handles so far
	slots   []requests.Site // the site of the shadow's block in each slot
	taken   *PeakMap        // the layout at target, once the shadow went past it
	blocks  int             // the blocks of the last layout taken
	lost    bool            // the shadow's state at target is not the policy's peak: no map for it
}

// newPeakMapper returns a mapper for a policy of cfg on a simulated device of capacity bytes, or nil
// when its allocator cannot list its layout (or cannot be built: the policy's replayer says why).
func newPeakMapper(cfg pool.Config, capacity uint64) *peakMapper {
	up := pool.NewSimUpstream(capacity, pool.DefaultAlignment, pool.SingleGoroutine())
	a, err := pool.New(cfg, up, pool.SingleGoroutine())
	if err != nil {
		return nil
	}
	l, ok := a.(pool.Layouter)
	if !ok {
		_ = a.Close()
		return nil
	}
	return &peakMapper{alloc: a, layout: l, feed: requests.NewFeeder(a)}
}

// batch logs the ops the policy has just served and moves the shadow to the policy's peak (peak:
// the policy's PeakStats now).
func (m *peakMapper) batch(b opBatch, peak pool.Stats) {
	m.log = append(m.log, b.ops...)
	m.sites = append(m.sites, b.sites...)
	for len(m.sites) < len(m.log) { // no sites were asked for: unknown
		m.sites = append(m.sites, requests.Site{})
	}
	m.handles = b.handles
	if t := calls(peak); t != m.target {
		m.target, m.taken, m.lost = t, nil, false
	}
	m.peak = peak
	m.advance(false)
	if len(m.log)-m.next > max(mapLogOps, 4*m.blocks) {
		if m.taken == nil {
			m.taken = m.take()
		}
		m.advance(true)
	}
	if m.next >= mapLogOps/2 && m.next >= len(m.log)/2 { // amortized: each op is moved at most once
		m.log = m.log[:copy(m.log, m.log[m.next:])]
		m.sites = m.sites[:copy(m.sites, m.sites[m.next:])]
		m.next = 0
	}
}

// served returns the calls the shadow has served.
func (m *peakMapper) served() uint64 { return calls(m.alloc.Stats()) }

// advance serves the logged ops with the shadow: all of them, or until it has served as many
// calls as the policy had at its peak.
func (m *peakMapper) advance(all bool) {
	for m.next < len(m.log) && (all || m.served() < m.target) {
		o := m.log[m.next]
		if o.IsAlloc() {
			m.slots = atSlot(m.slots, o.Slot)
			m.slots[o.Slot] = m.sites[m.next]
		}
		m.feed.Feed(m.log[m.next:m.next+1], m.handles)
		m.next++
	}
}

// take returns the shadow's layout, which must be at the policy's peak: its counters those of the
// policy's PeakStats (not so after a pool.Syncer synchronized right after the peak's op: no map).
func (m *peakMapper) take() *PeakMap {
	if m.lost = m.lost || m.alloc.Stats() != m.peak; m.lost {
		return nil
	}
	pm := &PeakMap{Calls: m.target, Stats: m.peak, Regions: m.layout.Layout(),
		Sites: make(map[uint64]requests.Site)}
	for slot, s := range m.slots {
		if a := m.feed.Live(uint32(slot)); a != 0 {
			pm.Sites[a] = s
		}
	}
	m.blocks = 0
	for _, r := range pm.Regions {
		m.blocks += len(r.Blocks)
	}
	return pm
}

// finish returns the layout at the policy's peak and closes the shadow.
func (m *peakMapper) finish() *PeakMap {
	if m.taken == nil {
		m.advance(false)
		m.taken = m.take()
	}
	_ = m.alloc.Close()
	if m.lost {
		return nil
	}
	return m.taken
}
