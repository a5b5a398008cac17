package stats

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

const (
	numOps    = 16
	numMemory = 4
	// groupSketchCap and overallSketchCap bound the samples kept for quantiles.
	groupSketchCap   = 8192
	overallSketchCap = 65536
	// waitedOctaves: a free waited for the device when its duration lies at least this many
	// log2 buckets above the median free duration's bucket (roughly ≥ 8× the median).
	waitedOctaves = 3
)

type opStat struct{ count, failed, bytes uint64 }

type bucketStat struct{ count, bytes uint64 }

// tally accumulates the statistics of one stream (all requests, or one process/device/stream).
type tally struct {
	pid        uint32
	device     int32
	stream     uint64
	ops        [numOps][numMemory]opStat
	allocs     uint64
	frees      uint64
	allocBytes uint64
	freedBytes uint64
	live       uint64
	liveBlocks uint64
	peak       uint64
	peakBlocks uint64
	peakSeq    uint64
	peakTime   int64
	first      int64
	last       int64
	seen       bool
	callNs     int64
	hist       [65]bucketStat
	sizeCount  []uint64 // requests per index of the tracker's size table
	lifetime   *Sketch
	freeDur    *Sketch // nil for a group: groups use the overall median
	freeLog2   [65]uint64
}

func newTally(sketchCap int) *tally {
	return &tally{lifetime: NewSketch(sketchCap)}
}

func (t *tally) countSize(i int32) {
	if t == nil {
		return
	}
	for int(i) >= len(t.sizeCount) {
		t.sizeCount = append(t.sizeCount, 0)
	}
	t.sizeCount[i]++
}

// log2Bucket returns 0 for 0, else 1 + ⌊log2 v⌋.
func log2Bucket(v uint64) int { return bits.Len64(v) }

func (t *tally) see(e *trace.Event) {
	if t == nil {
		return
	}
	if !t.seen || e.TimeNs < t.first {
		t.first = e.TimeNs
	}
	if end := e.TimeNs + max(e.DurationNs, 0); !t.seen || end > t.last {
		t.last = end
	}
	t.seen = true
	t.callNs += max(e.DurationNs, 0)
	s := &t.ops[e.Op&(numOps-1)][e.Memory&(numMemory-1)]
	s.count++
	s.bytes += e.Size
	if e.Result != 0 {
		s.failed++
	}
}

func (t *tally) alloc(e *trace.Event) {
	if t == nil {
		return
	}
	t.allocs++
	t.allocBytes += e.Size
	b := &t.hist[log2Bucket(e.Size)]
	b.count++
	b.bytes += e.Size
	t.live += e.Size
	t.liveBlocks++
	if t.live > t.peak {
		t.peak, t.peakBlocks, t.peakSeq, t.peakTime = t.live, t.liveBlocks, e.Seq, e.TimeNs
	}
}

func (t *tally) free(e *trace.Event, b *liveBlock) {
	if t == nil {
		return
	}
	t.frees++
	t.freedBytes += b.size
	t.live -= b.size
	t.liveBlocks--
	t.lifetime.Add(float64(e.TimeNs - b.time))
	if e.DurationNs > 0 {
		if t.freeDur != nil {
			t.freeDur.Add(float64(e.DurationNs))
		}
		t.freeLog2[log2Bucket(uint64(e.DurationNs))]++
	}
}

// result converts the tally into its report form; medianFree is the median free duration the
// waited-free rule compares with, sizes the tracker's size table.
func (t *tally) result(scope string, top int, medianFree int64, sizes *sizeTable) *schema.Stats {
	s := &schema.Stats{Scope: scope, PID: t.pid, Device: t.device, Stream: t.stream,
		Allocs: t.allocs, Frees: t.frees, AllocBytes: t.allocBytes, FreedBytes: t.freedBytes,
		PeakLiveBytes: t.peak, PeakLiveBlocks: t.peakBlocks, PeakSeq: t.peakSeq,
		PeakTimeNs: t.peakTime, EndLiveBytes: t.live, FirstTimeNs: t.first, CallNs: t.callNs}
	if t.seen {
		s.WallNs = t.last - t.first
	}
	if s.WallNs > 0 {
		sec := float64(s.WallNs) / 1e9
		s.AllocsPerSec = float64(t.allocs) / sec
		s.AllocBytesPerSec = float64(t.allocBytes) / sec
		s.CallPercent = 100 * float64(t.callNs) / float64(s.WallNs)
	}
	s.Ops = t.opCounts()
	s.Histogram = t.histogram()
	counts := t.sizeCount
	if counts == nil {
		counts = sizes.count
	}
	s.TopSizes = topSizes(sizes.sizes, counts, top)
	s.Lifetime = quantiles(t.lifetime)
	s.MedianFreeNs = medianFree
	s.WaitedFrees, s.WaitedFreeNs = t.waitedFrees(medianFree)
	return s
}

func (t *tally) opCounts() []schema.OpCount {
	var out []schema.OpCount
	for op := range numOps {
		for mem := range numMemory {
			if c := t.ops[op][mem]; c.count > 0 {
				out = append(out, schema.OpCount{Op: trace.Op(op).String(),
					Memory: trace.Memory(mem).String(), Count: c.count, Failed: c.failed, Bytes: c.bytes})
			}
		}
	}
	return out
}

func (t *tally) histogram() []schema.SizeBucket {
	var out []schema.SizeBucket
	for i, b := range t.hist {
		if b.count == 0 {
			continue
		}
		lo, hi := uint64(0), uint64(1)
		if i > 0 {
			lo = uint64(1) << (i - 1)
			hi = lo << 1
			if i == 64 {
				hi = ^uint64(0)
			}
		}
		out = append(out, schema.SizeBucket{Lo: lo, Hi: hi, Count: b.count, Bytes: b.bytes})
	}
	return out
}

// waitedFrees applies the waited-free rule: a free waited for the device when
// ⌊log2 duration⌋ ≥ ⌊log2 median⌋ + waitedOctaves, i.e. it took at least 8× the median free.
func (t *tally) waitedFrees(median int64) (waited uint64, threshold int64) {
	if median <= 0 {
		return 0, 0
	}
	first := log2Bucket(uint64(median)) + waitedOctaves
	if first > 64 {
		return 0, 0
	}
	threshold = int64(1) << (first - 1)
	for b := first; b <= 64; b++ {
		waited += t.freeLog2[b]
	}
	return waited, threshold
}

// topSizes lists the top most requested sizes (sizes[i] requested counts[i] times).
func topSizes(sizes, counts []uint64, top int) []schema.SizeCount {
	out := make([]schema.SizeCount, 0, len(sizes))
	for i, c := range counts {
		if c > 0 {
			out = append(out, schema.SizeCount{Size: sizes[i], Count: c})
		}
	}
	slices.SortFunc(out, func(a, b schema.SizeCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Size, b.Size)
	})
	if len(out) > top {
		out = out[:top]
	}
	return out
}

func quantiles(s *Sketch) schema.Quantiles {
	return schema.Quantiles{Count: s.Count(), Exact: s.Exact(), Min: s.Quantile(0), P50: s.Quantile(0.5),
		P90: s.Quantile(0.9), P99: s.Quantile(0.99), Max: s.Quantile(1)}
}

func scopeName(pid uint32, device int32, stream uint64) string {
	return fmt.Sprintf("pid %d dev %d stream %#x", pid, device, stream)
}
