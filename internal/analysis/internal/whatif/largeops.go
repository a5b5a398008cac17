package whatif

import (
	"errors"
	"io"

	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// largeChunk is how many ops Serves feeds between two looks at the arena's failures.
const largeChunk = 4096

// LargeOps is what an arena serving only the requests above Threshold sees of a trace (the
// allocations above it and the frees of their blocks), as a log of its own: held in memory or
// spilled as its budget allows. Filtering them again by a higher threshold gives exactly what that
// threshold's arena sees of the whole trace: a block large for the higher threshold is large for
// the lower one, so none of its ops was dropped. Close it when done.
type LargeOps struct {
	Threshold uint64
	log       *requests.Log
}

// ExtractLarge reads log once and keeps the ops an arena serving the requests above threshold
// sees, in a log of their own made with budget in dir.
func ExtractLarge(log *requests.Log, threshold uint64, budget *requests.Budget, dir string,
	progress func(int)) (*LargeOps, error) {
	f := &largeFilter{threshold: threshold}
	large := requests.NewLog(budget, dir, false) // an arena needs no sites
	var appendErr error
	err := forEachBatch(log, 1, nil, func(_ int, b opBatch) {
		if appendErr == nil {
			appendErr = large.Append(f.filter(b.ops), nil)
		}
	}, progress)
	if err == nil {
		err = appendErr
	}
	if err == nil {
		err = large.Finish(log.Handles(), log.Slots())
	}
	if err != nil {
		_ = large.Close()
		return nil, err
	}
	return &LargeOps{Threshold: threshold, log: large}, nil
}

// Len returns the number of ops held.
func (l *LargeOps) Len() uint64 { return l.log.Len() }

// Close gives back what l holds.
func (l *LargeOps) Close() error { return l.log.Close() }

// Serves reports whether p's arena serves every request of l above p.Threshold (at or above
// l.Threshold) without failing one. It stops at the arena's first failure, and with false as soon
// as stop, when not nil, returns true (it asks every largeChunk ops). The error is the log's.
func (l *LargeOps) Serves(p ArenaProbe, stop func() bool) (bool, error) {
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit: &pool.BestFitConfig{InitialBytes: p.Bytes, MaximumBytes: p.Bytes, Fit: p.Fit}}
	r := newReplayer(Policy{Name: "arena", Config: cfg}, 0, nil, nil)
	f := &largeFilter{threshold: p.Threshold}
	rd := l.log.Reader()
	for {
		ops, _, err := rd.Next(false)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, err
		}
		for len(ops) > 0 { // a look at the failures every largeChunk ops
			k := min(len(ops), largeChunk)
			r.batch(opBatch{ops: f.filter(ops[:k]), handles: l.log.Handles()})
			ops = ops[k:]
			if r.alloc == nil || r.alloc.Stats().Failures > 0 || (stop != nil && stop()) {
				r.finish()
				return false, nil // failures only grow; a policy that panicked has its Err
			}
		}
	}
	o := r.finish()
	return o.Err == nil && o.Stats.Failures == 0, nil
}
