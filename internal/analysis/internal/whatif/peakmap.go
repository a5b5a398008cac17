package whatif

import (
	"errors"
	"fmt"
	"io"

	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

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
// same ops lead to the same states) reads the log with a reader of its own and serves its ops up
// to the op after which the policy's PeakStats were taken, and waits there until the policy's peak
// moves on. It never serves an op past the policy's last peak, and holds no ops: a trace whose
// peak comes early costs the shadow little, one whose peak comes last a replay of the trace.
type peakMapper struct {
	alloc   pool.Allocator
	layout  pool.Layouter
	feed    *requests.Feeder
	reader  *requests.LogReader
	handles []uint64        // the log's stream handles
	ops     []requests.Op   // the batch of the reader being served
	sites   []requests.Site // parallel to ops (nil: unknown)
	next    int             // the first op of ops the shadow has not served
	peak    pool.Stats      // the policy's PeakStats
	target  uint64          // the calls they count
	slots   []requests.Site // the site of the shadow's block in each slot
	err     error           // reading the log
}

// newPeakMapper returns a mapper for a policy of cfg on a simulated device of capacity bytes,
// reading log, or nil when its allocator cannot list its layout (or cannot be built: the policy's
// replayer says why).
func newPeakMapper(cfg pool.Config, capacity uint64, log *requests.Log) *peakMapper {
	up := poolsim.NewSingleGoroutineUpstream(capacity, pool.DefaultAlignment)
	a, err := pool.New(cfg, up, pool.SingleGoroutine())
	if err != nil {
		return nil
	}
	l, ok := a.(pool.Layouter)
	if !ok {
		_ = a.Close()
		return nil
	}
	return &peakMapper{alloc: a, layout: l, feed: requests.NewFeeder(a), reader: log.Reader(), handles: log.Handles()}
}

// follow moves the shadow to the policy's peak (peak: the policy's PeakStats now).
func (m *peakMapper) follow(peak pool.Stats) {
	m.peak, m.target = peak, calls(peak)
	m.advance()
}

// served returns the calls the shadow has served.
func (m *peakMapper) served() uint64 { return calls(m.alloc.Stats()) }

// advance serves the log's ops with the shadow until it has served as many calls as the policy
// had at its peak.
func (m *peakMapper) advance() {
	for m.err == nil && m.served() < m.target {
		if m.next == len(m.ops) {
			m.ops, m.sites, m.err = m.reader.Next(true)
			m.next = 0
			continue
		}
		if o := m.ops[m.next]; o.IsAlloc() && m.sites != nil {
			m.slots = atSlot(m.slots, o.Slot)
			m.slots[o.Slot] = m.sites[m.next]
		}
		m.feed.Feed(m.ops[m.next:m.next+1], m.handles)
		m.next++
	}
}

// finish returns the layout at the policy's peak and closes the shadow: nil when the shadow's
// counters there are not the policy's PeakStats (a pool.Syncer synchronized right after the
// peak's op), with the error of a log that could not be read.
func (m *peakMapper) finish() (*PeakMap, error) {
	m.advance()
	defer func() { _ = m.alloc.Close() }()
	if m.err != nil {
		if errors.Is(m.err, io.EOF) {
			return nil, nil // the shadow ran out of ops before the peak's calls
		}
		return nil, fmt.Errorf("memory map: %w", m.err)
	}
	if m.alloc.Stats() != m.peak {
		return nil, nil
	}
	pm := &PeakMap{Calls: m.target, Stats: m.peak, Regions: m.layout.Layout(), Sites: make(map[uint64]requests.Site)}
	for slot, s := range m.slots {
		if a := m.feed.Live(uint32(slot)); a != 0 {
			pm.Sites[a] = s
		}
	}
	return pm, nil
}
