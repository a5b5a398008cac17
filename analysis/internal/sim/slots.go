package sim

import (
	"github.com/allocscope/allocscope/analysis/internal/sizeclass"
	"github.com/allocscope/allocscope/analysis/internal/stats"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// Sizing is what replaying the trace through the chosen classes found.
type Sizing struct {
	Slots              []uint64 // most blocks of each class live at once
	LargePeakLiveBytes uint64   // peak of live bytes of the requests above the threshold
	// ArenaPeakReservedBytes is the peak reserved memory of a best-fit arena (pool.PolicyBestFit,
	// first region = LargePeakLiveBytes) serving only the large requests: their peak live bytes
	// plus the fragmentation the arena really has on this trace.
	ArenaPeakReservedBytes uint64
	Events                 uint64 // events read
}

type slotCounter struct {
	stream  Stream
	classes []uint64
	live    []uint64
	maxLive []uint64
	blocks  map[stats.Key]int32 // class of each live class-served block, -1 for large
	large   uint64
	bigPeak uint64
	events  uint64
}

func (c *slotCounter) batch(events []trace.Event) {
	for i := range events {
		e := &events[i]
		c.events++
		switch c.stream.request(e) {
		case 1:
			k := stats.KeyOf(e)
			if old, ok := c.blocks[k]; ok {
				c.drop(old, 0)
			}
			if sizeclass.IsLarge(e.Size) {
				c.blocks[k] = -1
				c.large += e.Size
				c.bigPeak = max(c.bigPeak, c.large)
				continue
			}
			cl := int32(sizeclass.ClassOf(c.classes, e.Size))
			c.blocks[k] = cl
			c.live[cl]++
			c.maxLive[cl] = max(c.maxLive[cl], c.live[cl])
		case -1:
			k := stats.KeyOf(e)
			if cl, ok := c.blocks[k]; ok {
				c.drop(cl, e.Size)
				delete(c.blocks, k)
			}
		}
	}
}

func (c *slotCounter) drop(cl int32, size uint64) {
	if cl >= 0 {
		c.live[cl]--
		return
	}
	c.large -= min(size, c.large)
}

// Size replays src through classes: it counts the slots each class needs and simulates the
// large-request arena. largePeak is the large requests' peak live bytes, from the statistics.
func Size(src Source, s Stream, classes []uint64, largePeak uint64, progress func(int)) (Sizing, error) {
	c := &slotCounter{stream: s, classes: classes, live: make([]uint64, len(classes)),
		maxLive: make([]uint64, len(classes)), blocks: make(map[stats.Key]int32)}
	arena := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit: &pool.BestFitConfig{InitialBytes: alignUp(largePeak, pool.DefaultAlignment)}}
	r := newReplayer(Policy{Name: "arena", Config: arena}, s, 0, nil)
	r.only = sizeclass.IsLarge
	workers := []func([]trace.Event){c.batch, r.batch}
	err := forEachBatch(src, 2, func(i int, b []trace.Event) { workers[i](b) }, progress)
	out := r.finish()
	if err == nil && out.Err != nil {
		err = out.Err
	}
	return Sizing{Slots: c.maxLive, LargePeakLiveBytes: c.bigPeak, Events: c.events,
		ArenaPeakReservedBytes: out.Stats.PeakReservedBytes}, err
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }
