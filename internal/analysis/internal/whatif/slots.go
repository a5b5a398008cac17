package whatif

import (
	"github.com/allocscope/allocscope/internal/analysis/internal/sizeclass"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// Sizing is what replaying the trace through the chosen classes found.
type Sizing struct {
	Classes            []uint64 // the class sizes
	Slots              []uint64 // most blocks of each class live at once
	LargePeakLiveBytes uint64   // peak of live bytes of the requests above the threshold
	// ArenaPeakReservedBytes is the peak reserved memory of a best-fit arena (pool.PolicyBestFit,
	// first region = LargePeakLiveBytes) serving only the large requests: their peak live bytes
	// plus the fragmentation the arena really has on this trace.
	ArenaPeakReservedBytes uint64
	Err                    error // the arena could not be simulated (e.g. sizes beyond any memory)
}

// ClassBytes returns the bytes the classes' slots take.
func (s Sizing) ClassBytes() uint64 {
	var n uint64
	for i, slots := range s.Slots {
		n += slots * s.Classes[i] // class sizes are at most 1 MiB: no overflow below 2^44 slots
	}
	return n
}

// slotBlock is what the slot counter knows of a block: its class, or -1 and its size for a
// large one, while it is live.
type slotBlock struct {
	class int32
	live  bool
	size  uint64
}

// slotCounter counts the slots a candidate's classes need (sizeclass.ClassSlots: the pool's own reuse
// rule) and the peak live bytes of its large requests.
type slotCounter struct {
	classes []uint64
	slots   *sizeclass.ClassSlots
	blocks  []slotBlock // by the requests' slot
	large   uint64
	bigPeak uint64
}

func (c *slotCounter) batch(b opBatch) {
	handles := b.handles
	for _, o := range b.ops {
		switch {
		case o.IsAlloc():
			c.blocks = atSlot(c.blocks, o.Slot)
			cl := c.slots.Alloc(o.Size, handles[o.StreamIndex()])
			c.blocks[o.Slot] = slotBlock{class: int32(cl), live: true, size: o.Size}
			if cl < 0 {
				c.large += o.Size
				c.bigPeak = max(c.bigPeak, c.large)
			}
		case o.IsFree():
			if int(o.Slot) < len(c.blocks) && c.blocks[o.Slot].live {
				b := &c.blocks[o.Slot]
				b.live = false
				if b.class < 0 {
					c.large -= b.size
				}
				c.slots.Free(int(b.class), handles[o.StreamIndex()])
			}
		}
	}
}

// atSlot grows a per-slot slice so that it has an element at slot s.
func atSlot[T any](xs []T, s uint32) []T {
	if int(s) < len(xs) {
		return xs
	}
	return append(xs, make([]T, int(s)+1-len(xs))...)
}

// Candidate is one way to split the requests between classes and the arena.
type Candidate struct {
	Threshold          uint64   // requests above it go to the arena
	Classes            []uint64 // class sizes, ascending, all at or below Threshold
	LargePeakLiveBytes uint64   // peak live bytes of the requests above Threshold
	PerStream          bool     // the pool keeps freed slots per stream (pool.SizeClassConfig.PerStream)
}

// Size replays log through every candidate at once: it counts the slots each class needs and
// simulates each candidate's large-request arena. A candidate whose arena cannot be simulated has
// its Err set; the error returned is the log's.
func Size(log *requests.Log, cands []Candidate, progress func(int)) ([]Sizing, error) {
	var workers []func(opBatch)
	counters := make([]*slotCounter, len(cands))
	arenas := make([]*replayer, len(cands))
	for i, cand := range cands {
		c := &slotCounter{classes: cand.Classes, slots: sizeclass.NewClassSlots(cand.Classes, cand.Threshold, cand.PerStream)}
		arena := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
			BestFit: &pool.BestFitConfig{InitialBytes: pool.AlignUp(cand.LargePeakLiveBytes, pool.DefaultAlignment)}}
		r := newReplayer(Policy{Name: "arena", Config: arena}, 0, nil, nil)
		th := cand.Threshold
		if r.feed != nil {
			r.feed.Only = func(size uint64) bool { return size > th }
		}
		counters[i], arenas[i] = c, r
		workers = append(workers, c.batch, r.batch)
	}
	err := forEachBatch(log, len(workers), nil, func(i int, b opBatch) { workers[i](b) }, progress)
	out := make([]Sizing, len(cands))
	for i, c := range counters {
		o := arenas[i].finish()
		out[i] = Sizing{Classes: c.classes, Slots: c.slots.Slots(), LargePeakLiveBytes: c.bigPeak,
			ArenaPeakReservedBytes: o.Stats.PeakReservedBytes, Err: o.Err}
	}
	return out, err
}

// ArenaProbe is one fixed-size arena tried by LargeOps.Serves.
type ArenaProbe struct {
	Threshold uint64   // it serves the requests above this size
	Bytes     uint64   // the arena's one region, never grown
	Fit       pool.Fit // its placement strategy
}

// largeFilter keeps, of a trace's ops, the allocations above threshold and the frees of the
// blocks they made: all that an arena serving only those allocations sees (sync points are of no
// use to a best-fit arena).
type largeFilter struct {
	threshold uint64
	live      []bool // by slot: a block of a large allocation not freed yet
	out       []requests.Op
}

func (f *largeFilter) filter(b []requests.Op) []requests.Op {
	f.out = f.out[:0]
	for _, o := range b {
		switch {
		case o.IsAlloc() && o.Size > f.threshold:
			f.live = atSlot(f.live, o.Slot)
			f.live[o.Slot] = true
		case o.IsFree():
			if int(o.Slot) >= len(f.live) || !f.live[o.Slot] {
				continue
			}
			f.live[o.Slot] = false
		default:
			continue
		}
		f.out = append(f.out, o)
	}
	return f.out
}
