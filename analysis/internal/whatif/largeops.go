package whatif

import (
	"errors"
	"slices"
	"unsafe"

	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// ErrLargeOpsBudget is returned by ExtractLarge when the ops would take more than its budget.
var ErrLargeOpsBudget = errors.New("the large requests' ops exceed the memory budget")

// largeChunk is how many ops a chunk of LargeOps holds: Serves feeds a chunk between two looks at
// the arena's failures.
const largeChunk = 4096

// LargeOps is, held in memory, what an arena serving only the requests above Threshold sees of a
// trace (the allocations above it and the frees of their blocks, as FitArena filters them), with
// the stream handles the ops index. Filtering them again by a higher threshold gives exactly what
// that threshold's arena sees of the whole trace: a block large for the higher threshold is large
// for the lower one, so none of its ops was dropped.
type LargeOps struct {
	Threshold uint64
	Chunks    [][]requests.Op // the ops in order, largeChunk to a chunk (the last may hold fewer)
	Handles   []uint64
	n         uint64 // ops held
}

// add appends ops to l in chunks of largeChunk, so that holding them costs no spare capacity.
func (l *LargeOps) add(ops []requests.Op) {
	for len(ops) > 0 {
		if k := len(l.Chunks); k == 0 || len(l.Chunks[k-1]) == largeChunk {
			l.Chunks = append(l.Chunks, make([]requests.Op, 0, largeChunk))
		}
		last := &l.Chunks[len(l.Chunks)-1]
		n := min(len(ops), largeChunk-len(*last))
		*last = append(*last, ops[:n]...)
		ops, l.n = ops[n:], l.n+uint64(n)
	}
}

// ExtractLarge reads src once and keeps the ops an arena serving the requests above threshold
// sees. It returns ErrLargeOpsBudget, and keeps nothing, when they would take more than budget
// bytes; the source is read to its end all the same.
func ExtractLarge(src requests.Source, layer requests.Layer, threshold, budget uint64,
	progress func(int)) (*LargeOps, error) {
	f := &largeFilter{threshold: threshold}
	l := &LargeOps{Threshold: threshold}
	limit := budget / uint64(unsafe.Sizeof(requests.Op{}))
	over := false
	var handles []uint64
	err := forEachBatch(src, layer, 1, false, func(_ int, b opBatch) {
		handles = b.handles // later batches only append: the last has them all
		if over {
			return
		}
		l.add(f.filter(b.ops))
		if l.n > limit {
			over, l.Chunks = true, nil
		}
	}, progress)
	if err != nil {
		return nil, err
	}
	if over {
		return nil, ErrLargeOpsBudget
	}
	l.Handles = slices.Clone(handles)
	return l, nil
}

// Serves reports whether p's arena serves every request of l above p.Threshold (at or above
// l.Threshold): whether FitArena would find p's Failures 0. It stops at the arena's first failure.
func (l *LargeOps) Serves(p ArenaProbe) bool {
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit: &pool.BestFitConfig{InitialBytes: p.Bytes, MaximumBytes: p.Bytes, Fit: p.Fit}}
	r := newReplayer(Policy{Name: "arena", Config: cfg}, 0, nil)
	f := &largeFilter{threshold: p.Threshold}
	for _, ops := range l.Chunks {
		r.batch(opBatch{ops: f.filter(ops), handles: l.Handles})
		if r.alloc == nil || r.alloc.Stats().Failures > 0 {
			break // failures only grow; a policy that panicked has its Err
		}
	}
	o := r.finish()
	return o.Err == nil && o.Stats.Failures == 0
}
