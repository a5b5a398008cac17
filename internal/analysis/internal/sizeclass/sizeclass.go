// Package sizeclass chooses the size classes of a pool: the optimal k classes for a trace's
// request sizes by dynamic programming, k chosen by a stated rule, and the large-request threshold.
package sizeclass

import (
	"fmt"
	"math"

	"github.com/allocscope/allocscope/pool"
)

const (
	// MaxThreshold is the largest large-request threshold tried: PyTorch's small/large split.
	MaxThreshold = 1 << 20
	// MaxK caps the number of classes.
	MaxK = 32
	// PeakWasteFraction and TotalWasteFraction are the k rule's bounds: the smallest k whose
	// rounding waste at the peak is ≤ 1% of the class-served bytes live at the peak and whose
	// waste over the run is ≤ 5% of the class-served bytes requested.
	PeakWasteFraction  = 0.01
	TotalWasteFraction = 0.05
	// PeakWeight is the mix of the DP objective: 0.75 × (waste per block at the peak) +
	// 0.25 × (waste per request over the run).
	PeakWeight = 0.75
)

// Thresholds are the candidate large-request thresholds, 4 KiB to 1 MiB in powers of 4. Requests
// above the threshold go to the best-fit arena, the others to a class. The analysis sizes the
// classes and the arena for each candidate by replaying the trace and keeps the one that reserves
// the least (ThresholdRule).
var Thresholds = []uint64{4 << 10, 16 << 10, 64 << 10, 256 << 10, MaxThreshold}

// ThresholdSlack is how much more memory than the least a larger threshold may reserve and still
// be chosen: a request served by a class is a free-list pop, one served by the arena a best-fit
// search, so a pool within 2 % of the smallest that serves more requests from classes is preferred.
const ThresholdSlack = 0.02

// SlackCeiling bounds ThresholdSlack: when the least reserves at most this many times the peak of
// live bytes, a larger threshold is not chosen for speed if it would reserve more.
const SlackCeiling = 1.05

// PageBytes is the page size of a paged arena: the allocation granularity of the H200
// (cuMemGetAllocationGranularity, 2 MiB, measured by the CUDA tests of replay) and of current GPUs.
const PageBytes = 2 << 20

// PagedAddressFactor sizes a paged arena's address space: this many times the peak live bytes
// of the requests it serves (address space costs no memory).
const PagedAddressFactor = 4

// MaxPageOpsShare bounds the page operations (maps, unmaps, moves) a paged arena may need while
// serving a trace: one per this many requests. A page costs about 50 µs on the H200
// (BenchmarkCUDAPageCalls: 36-59 µs to move one, 56-81 µs to map and unmap one; docs/benchmarks.md),
// so this keeps it near 100 ns per request, the pool's own cost.
const MaxPageOpsShare = 500

// ArenaRule states when the arena is paged.
var ArenaRule = fmt.Sprintf("one region of memory, which replay, record --pool and the Go library all run; "+
	"when the pool then reserves more than %.2f x peak live, a paged arena (%d MiB pages, its budget of "+
	"%.2f x peak live less the class slots mapped at start, idle pages moved where blocks need them beyond it) "+
	"is named beside it if the simulation keeps it within that with no fallbacks and at most one page "+
	"operation per %d requests (about 50 us each on an H200); --arena paged makes it the pool (with any "+
	"number of page operations), which replay and the Go library run and record --pool does not",
	SlackCeiling, PageBytes>>20, SlackCeiling, MaxPageOpsShare)

// ThresholdRule states how the threshold is chosen.
var ThresholdRule = fmt.Sprintf("the largest candidate (4 KiB, 16 KiB, 64 KiB, 256 KiB, 1 MiB) whose "+
	"replayed class slots plus simulated arena reserve at most %.0f%% more than the least (and not over "+
	"%.2f x peak live when the least is not): classes serve requests faster than the arena",
	100*ThresholdSlack, SlackCeiling)

// KRule states how k is chosen.
var KRule = fmt.Sprintf("smallest k with waste at peak <= %.0f%% of class-served live bytes at peak "+
	"and waste over the run <= %.0f%% of class-served requested bytes, at most %d",
	100*PeakWasteFraction, 100*TotalWasteFraction, MaxK)

// Size is one request size and its counts.
type Size struct {
	Bytes  uint64 // request size
	Count  uint64 // requests of this size over the run
	AtPeak uint64 // blocks of this size live at the moment of peak live bytes
}

// Waste is the rounding waste of the optimal classes for one k.
type Waste struct {
	K          int
	PeakWaste  uint64  // bytes lost to rounding among the blocks live at the peak
	TotalWaste uint64  // bytes lost to rounding over all requests
	Objective  float64 // the DP objective
}

// Plan is the chosen set of classes.
type Plan struct {
	Classes       []uint64 // class sizes, ascending; the last is the largest class-served size
	K             int
	Threshold     uint64  // requests above it go to the arena
	DistinctSizes int     // distinct aligned sizes at or below Threshold
	Curve         []Waste // every k tried
	Forced        bool    // k was given by the user
}

// aligned merges the class-served sizes into distinct aligned sizes, ascending.
func aligned(sizes []Size, threshold uint64) []Size {
	byAligned := map[uint64]int{}
	var out []Size
	for _, s := range sizes {
		if s.Bytes == 0 || s.Bytes > threshold {
			continue
		}
		a := pool.AlignUp(s.Bytes, pool.DefaultAlignment)
		i, ok := byAligned[a]
		if !ok {
			i = len(out)
			byAligned[a] = i
			out = append(out, Size{Bytes: a})
		}
		out[i].Count += s.Count
		out[i].AtPeak += s.AtPeak
	}
	sortSizes(out)
	return out
}

// Choose returns the optimal classes for the request sizes (any order, exact sizes) at or below
// threshold. forceK > 0 forces the number of classes (capped at the number of distinct aligned
// sizes).
func Choose(sizes []Size, threshold uint64, forceK int) Plan {
	a := aligned(sizes, threshold)
	n := len(a)
	p := Plan{DistinctSizes: n, Threshold: threshold}
	if n == 0 {
		return p
	}
	// Requested bytes per class-served size, for the k rule (waste is measured on aligned sizes,
	// against the exact request sizes).
	var peakBytes, totalBytes, peakBlocks, requests float64
	for _, s := range sizes {
		if s.Bytes == 0 || s.Bytes > threshold {
			continue
		}
		peakBytes += float64(s.AtPeak * s.Bytes)
		totalBytes += float64(s.Count * s.Bytes)
		peakBlocks += float64(s.AtPeak)
		requests += float64(s.Count)
	}
	w := weights(a, peakBlocks, requests)
	maxK := min(MaxK, n)
	if forceK > 0 {
		maxK = min(forceK, n)
	}
	parent := solve(a, w, maxK)
	for k := 1; k <= maxK; k++ {
		classes := reconstruct(a, parent, k)
		pw, tw := waste(sizes, classes, threshold)
		obj := objective(a, w, classes)
		p.Curve = append(p.Curve, Waste{K: k, PeakWaste: pw, TotalWaste: tw, Objective: obj})
		good := float64(pw) <= PeakWasteFraction*peakBytes && float64(tw) <= TotalWasteFraction*totalBytes
		if p.Classes == nil && (forceK <= 0 && (good || k == maxK) || forceK > 0 && k == maxK) {
			p.Classes, p.K = classes, k
		}
	}
	p.Forced = forceK > 0
	return p
}

// weights mixes each size's share of the blocks live at the peak and of all requests.
func weights(a []Size, peakBlocks, requests float64) []float64 {
	w := make([]float64, len(a))
	alpha := PeakWeight
	if peakBlocks == 0 {
		alpha = 0
	}
	for i, s := range a {
		w[i] = (1 - alpha) * float64(s.Count) / requests
		if alpha > 0 {
			w[i] += alpha * float64(s.AtPeak) / peakBlocks
		}
	}
	return w
}

// solve fills parent[k][j]: the index of the first size of the last class when sizes 0..j are
// served by k classes at minimum cost. The cost of serving sizes i..j by class a[j] is
// Σ w[t]·(a[j]−a[t]) = a[j]·W(i,j) − SW(i,j), from prefix sums; the DP is O(k·n²).
func solve(a []Size, w []float64, maxK int) [][]int32 {
	n := len(a)
	pw := make([]float64, n+1)  // Σ w
	psw := make([]float64, n+1) // Σ w·size
	for i, s := range a {
		pw[i+1] = pw[i] + w[i]
		psw[i+1] = psw[i] + w[i]*float64(s.Bytes)
	}
	cost := func(i, j int) float64 { // sizes i..j inclusive served by a[j]
		return float64(a[j].Bytes)*(pw[j+1]-pw[i]) - (psw[j+1] - psw[i])
	}
	prev := make([]float64, n)
	cur := make([]float64, n)
	parent := make([][]int32, maxK+1)
	parent[1] = make([]int32, n)
	for j := range n {
		prev[j] = cost(0, j)
	}
	for k := 2; k <= maxK; k++ {
		parent[k] = make([]int32, n)
		for j := range n {
			best, arg := math.Inf(1), int32(0)
			if j < k-1 {
				cur[j], parent[k][j] = math.Inf(1), 0
				continue
			}
			for i := k - 1; i <= j; i++ { // last class serves sizes i..j
				if c := prev[i-1] + cost(i, j); c < best {
					best, arg = c, int32(i)
				}
			}
			cur[j], parent[k][j] = best, arg
		}
		prev, cur = cur, prev
	}
	return parent
}

func reconstruct(a []Size, parent [][]int32, k int) []uint64 {
	classes := make([]uint64, k)
	j := len(a) - 1
	for kk := k; kk >= 1; kk-- {
		classes[kk-1] = a[j].Bytes
		if kk > 1 {
			j = int(parent[kk][j]) - 1
		}
	}
	return classes
}

// waste returns the rounding waste in bytes at the peak and over the run, exact request sizes
// against their classes.
func waste(sizes []Size, classes []uint64, threshold uint64) (peak, total uint64) {
	for _, s := range sizes {
		if s.Bytes == 0 || s.Bytes > threshold {
			continue
		}
		c := classes[ClassOf(classes, s.Bytes)]
		peak += s.AtPeak * (c - s.Bytes)
		total += s.Count * (c - s.Bytes)
	}
	return peak, total
}

func objective(a []Size, w []float64, classes []uint64) float64 {
	var obj float64
	for i, s := range a {
		obj += w[i] * float64(classes[ClassOf(classes, s.Bytes)]-s.Bytes)
	}
	return obj
}
