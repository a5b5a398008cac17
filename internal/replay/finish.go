package replay

import (
	"errors"
	"fmt"

	"github.com/allocscope/allocscope/pool"
)

// finish frees the blocks the trace left live (untimed), closes or trims the allocator and folds
// the repetition's figures into the mode's.
func (r *runner) finish(ps *passState) error {
	r.freeRemaining(ps)
	acc := ps.acc
	if ps.timed {
		acc.AllocatorTimeNsByRepetition = append(acc.AllocatorTimeNsByRepetition, ps.elapsed)
		acc.syncNs = append(acc.syncNs, ps.syncNs)
	} else {
		acc.Allocs += ps.allocs
		acc.Frees += ps.frees
		acc.FinalFrees += ps.finalFrees
		acc.Failures += ps.failures
		acc.PeakLiveBytes = max(acc.PeakLiveBytes, ps.peakLive)
		acc.clockedNs = append(acc.clockedNs, ps.elapsed)
	}
	if ps.alloc != nil {
		return r.finishAllocator(ps)
	}
	return r.finishAsync(ps)
}

func (r *runner) freeRemaining(ps *passState) {
	for slot, addr := range r.addrs {
		if addr == 0 {
			continue
		}
		r.beforeFree(ps, uint32(slot), addr)
		if err := ps.d.free(addr, 0); err != nil { // on the first stream the trace used
			ps.acc.FreeErrors++
			ps.acc.problem("%s, end of trace: free %#x: %v", ps.name(), addr, err)
		} else {
			ps.finalFrees++
		}
		ps.liveBytes -= r.sizes[slot]
		r.addrs[slot] = 0
	}
}

func (r *runner) finishAllocator(ps *passState) error {
	acc := ps.acc
	stats := ps.alloc.Stats()
	r.compareAccounting(ps, stats)
	if err := ps.alloc.Close(); err != nil {
		acc.problem("%s: close allocator: %v", ps.name(), err)
		acc.FreeErrors++
	}
	if err := ps.up.releaseError(); err != nil {
		acc.OutsideReserved++
		acc.problem("%s: %v", ps.name(), err)
	}
	up := ps.up.counts()
	if up.ReservedBytes != 0 {
		acc.problem("%s: allocator still holds %d bytes of the backend after Close", ps.name(), up.ReservedBytes)
	}
	acc.LeakedBytes = max(acc.LeakedBytes, up.ReservedBytes)
	acc.PeakReservedBytes = max(acc.PeakReservedBytes, up.PeakReservedBytes)
	if !ps.timed {
		acc.UpstreamReserves += up.Reserves
		acc.UpstreamReleases += up.Releases
		acc.Fallbacks += stats.Fallbacks
	}
	if acc.PoolStats == nil {
		peak := ps.alloc.PeakStats()
		acc.PoolStats, acc.PoolPeakStats = &stats, &peak
	} else if *acc.PoolStats != stats {
		acc.accounting = append(acc.accounting, fmt.Sprintf("%s: pool stats differ from the first pass", ps.name()))
	}
	return nil
}

// compareAccounting checks the allocator's own Stats against what the engine saw, before Close.
func (r *runner) compareAccounting(ps *passState, s pool.Stats) {
	up := ps.up.counts()
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"allocs", s.Allocs, ps.allocs},
		{"frees", s.Frees, ps.frees + ps.finalFrees},
		{"failures", s.Failures, ps.failures},
		{"live bytes at the end", s.LiveBytes, 0},
		{"peak live bytes", s.PeakLiveBytes, ps.peakLive},
		{"reserved bytes", s.ReservedBytes, up.ReservedBytes},
		{"peak reserved bytes", s.PeakReservedBytes, up.PeakReservedBytes},
		{"upstream reserves", s.UpstreamReserves, up.Reserves},
		{"upstream releases", s.UpstreamReleases, up.Releases},
	} {
		if c.got != c.want && !(ps.timed && c.name == "peak live bytes") { // a timed pass does not track live bytes
			ps.acc.accounting = append(ps.acc.accounting, fmt.Sprintf("%s: %s: pool says %d, engine counted %d",
				ps.name(), c.name, c.got, c.want))
		}
	}
}

// name names the pass in problem lines: "repetition N" (checked) or "timed repetition N".
func (ps *passState) name() string {
	if ps.timed {
		return fmt.Sprintf("timed repetition %d", ps.rep+1)
	}
	return fmt.Sprintf("repetition %d", ps.rep+1)
}

func (r *runner) finishAsync(ps *passState) error {
	acc, b := ps.acc, r.b
	if err := b.Synchronize(); err != nil {
		return errors.Join(fmt.Errorf("synchronize: %w", err), r.destroyStreams(ps))
	}
	_, high, err := b.AsyncPoolReserved()
	if err != nil {
		return errors.Join(fmt.Errorf("stream-ordered pool usage: %w", err), r.destroyStreams(ps))
	}
	acc.PeakReservedBytes = max(acc.PeakReservedBytes, high)
	if err := r.destroyStreams(ps); err != nil {
		return fmt.Errorf("destroy streams: %w", err)
	}
	if err := b.ResetAsyncPool(); err != nil {
		return fmt.Errorf("trim stream-ordered pool: %w", err)
	}
	current, _, err := b.AsyncPoolReserved()
	if err != nil {
		return fmt.Errorf("stream-ordered pool usage: %w", err)
	}
	if current != 0 {
		acc.problem("%s: stream-ordered pool still holds %d bytes after trimming", ps.name(), current)
	}
	acc.LeakedBytes = max(acc.LeakedBytes, current)
	return nil
}
