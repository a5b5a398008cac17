package replay

import (
	"errors"
	"fmt"

	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/requests"
)

// runCPool is a pass of the cpool mode: the C pool serves the whole trace in one call into C,
// timing each request itself in a checked pass; then the engine's own loops go over the outcomes
// (the playback driver hands them back in order), so that the address table, the counts, the
// latency histograms and --verify are the other modes' code. A timed pass's allocator time is
// the C loop's. Only --touch is impossible: the blocks cannot be written between the requests.
func (r *runner) runCPool(ps *passState) error {
	if r.cops == nil {
		ops, err := cpool.NewOps(r.t.Ops, r.t.Streams)
		if err != nil {
			return fmt.Errorf("convert the ops for the C pool: %w", err)
		}
		r.cops = ops
	}
	cp, ok := ps.alloc.(*cpool.Pool)
	if !ok {
		return errors.New("cpool mode without the C pool")
	}
	res, err := cp.Run(r.cops, !ps.timed)
	if err != nil {
		return fmt.Errorf("run the C pool: %w", err)
	}
	d := ps.d
	ps.played = newPlayback(r.t.Ops, res)
	ps.d = ps.played
	if ps.timed {
		r.timeChunk(ps, 0, r.t.Ops)
		ps.elapsed = res.ElapsedNs
		r.opt.Progress(int64(len(r.t.Ops)))
	} else {
		r.replayOps(ps)
	}
	ps.d, ps.played = d, nil // the blocks left live are freed through the pool, one call each
	return nil
}

// latency returns the latency of the request just made: clocked, the time the engine read around
// the call, or in cpool mode the time C measured.
func (ps *passState) latency(clocked int64) int64 {
	if ps.played != nil {
		return ps.played.lastNs
	}
	return clocked
}

// playback is the cpool mode's driver once the C pool has run: each call hands back the outcome
// of the next op that made a request (an allocation, or a free of a block the pool handed out, the
// same frees the engine makes), and lastNs its latency as measured in C.
type playback struct {
	ops    []requests.Op
	res    *cpool.Result
	errs   map[int]error // op → the error of a request the pool did not serve
	next   int           // the op to look at next
	lastNs int64
}

func newPlayback(ops []requests.Op, res *cpool.Result) *playback {
	p := &playback{ops: ops, res: res, errs: make(map[int]error, len(res.Failures))}
	for _, f := range res.Failures {
		p.errs[f.Op] = f.Err
	}
	return p
}

// step returns the index of the next op that made a request, which must be an allocation when
// alloc is set and a free otherwise.
func (p *playback) step(alloc bool) (int, error) {
	for ; p.next < len(p.ops); p.next++ {
		o := p.ops[p.next]
		if o.IsAlloc() || (o.IsFree() && p.res.Addrs[p.next] != 0) {
			break
		}
	}
	i := p.next
	if i == len(p.ops) || p.ops[i].IsAlloc() != alloc {
		return i, fmt.Errorf("the engine and the C pool's run disagree at op %d", i)
	}
	p.next++
	if p.res.LatencyNs != nil {
		p.lastNs = p.res.LatencyNs[i]
	}
	return i, p.errs[i]
}

func (p *playback) alloc(uint64, uint32) (uint64, error) {
	i, err := p.step(true)
	if err != nil {
		return 0, err
	}
	return p.res.Addrs[i], nil
}

func (p *playback) free(addr uint64, _ uint32) error {
	i, err := p.step(false)
	if err == nil && p.res.Addrs[i] != addr {
		err = fmt.Errorf("the engine frees %#x, the C pool freed %#x at op %d", addr, p.res.Addrs[i], i)
	}
	return err
}
