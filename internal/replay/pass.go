package replay

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/replay/internal/addrset"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// maxErrors is how many problem lines a mode keeps.
const maxErrors = 10

// progressEvery is how many requests pass between two Progress calls.
const progressEvery = 1 << 12

// modeAcc accumulates one mode's results over the repetitions.
type modeAcc struct {
	ModeResult
	allocLat, freeLat *latencyRecorder
	// clockedNs is each checked pass's sum of call latencies.
	clockedNs []int64
	// accounting lists where the pool's own Stats disagree with the engine's account.
	accounting []string
	// syncNs is each timed pass's time in Backend.Synchronize at the trace's sync points (async).
	syncNs []int64
}

func newModeAcc(m Mode) *modeAcc {
	return &modeAcc{ModeResult: ModeResult{Mode: m}, allocLat: newLatencyRecorder(), freeLat: newLatencyRecorder()}
}

func (a *modeAcc) problem(format string, args ...any) {
	if len(a.Errors) < maxErrors {
		a.Errors = append(a.Errors, fmt.Sprintf(format, args...))
	}
}

// passState is the state of one pass over the trace in one mode.
type passState struct {
	acc        *modeAcc
	rep        int
	timed      bool // a timed pass (no clock reading per call, no checks); else a checked pass
	d          driver
	alloc      pool.Allocator  // raw, pool and cpool
	syncer     pool.Syncer     // the allocator, when it acts on device synchronization
	devSync    bool            // async: synchronize the backend where the program did
	up         *engineUpstream // raw, pool and cpool
	played     *playback       // cpool: the run's outcomes, while the engine's loops go over them
	touch      bool            // --touch in this pass: a checked pass of a mode other than cpool
	streams    []Stream        // async
	live       *addrset.Set    // --verify: live blocks
	liveBytes  uint64
	peakLive   uint64
	memStart   uint64 // backend free memory at the start
	sampled    uint64 // own-accounting peak at the last MemGetInfo sample
	elapsed    int64  // time inside the allocator: the whole loop (timed), the calls' latencies summed (checked)
	syncNs     int64  // time in Backend.Synchronize at the trace's sync points (async), not in elapsed
	allocs     uint64
	frees      uint64
	failures   uint64
	finalFrees uint64
}

// pass replays the whole trace once in acc's mode. A checked pass reads the clock around every
// call (the latencies) and does the checks of --verify and --touch; a timed pass only calls the
// allocator and reads the clock once per progressEvery requests (the allocator time).
func (r *runner) pass(acc *modeAcc, rep int, timed bool) error {
	free, _, err := r.b.MemGetInfo()
	if err != nil {
		return fmt.Errorf("memory info: %w", err)
	}
	ps := &passState{acc: acc, rep: rep, timed: timed, memStart: free,
		touch: r.patterns != nil && !timed && acc.Mode != ModeCPool}
	if timed {
		// Collect the garbage of the passes before, so that no collection runs inside the timed loop.
		runtime.GC()
	}
	if r.opt.Verify && !timed {
		ps.live = addrset.New()
	}
	if err := r.begin(ps); err != nil {
		return err
	}
	switch {
	case acc.Mode == ModeCPool:
		err = r.runCPool(ps)
	case timed:
		r.timeOps(ps)
	default:
		r.replayOps(ps)
	}
	if err = errors.Join(err, r.finish(ps)); err != nil {
		return err
	}
	if timed {
		return nil
	}
	free, _, err = r.b.MemGetInfo()
	if err != nil {
		return fmt.Errorf("memory info: %w", err)
	}
	acc.FreeBytesAfterRepetition = append(acc.FreeBytesAfterRepetition, free)
	return nil
}

// begin builds the mode's driver.
func (r *runner) begin(ps *passState) error {
	if ps.acc.Mode == ModeAsync {
		if err := r.b.ResetAsyncPool(); err != nil {
			return fmt.Errorf("reset stream-ordered pool: %w", err)
		}
		for range r.t.Stats.Streams {
			s, err := r.b.CreateStream()
			if err != nil {
				return errors.Join(fmt.Errorf("create stream: %w", err), r.destroyStreams(ps))
			}
			ps.streams = append(ps.streams, s)
		}
		ps.d, ps.devSync = asyncDriver{b: r.b, streams: ps.streams}, true
		return nil
	}
	var up pool.Upstream
	ps.up, up = newEngineUpstream(r.b, ps.live != nil)
	a, err := r.newAllocator(ps.acc.Mode, up)
	if err != nil {
		return err
	}
	ps.alloc, ps.d = a, allocatorDriver{a: a, handles: r.t.Streams}
	ps.syncer, _ = a.(pool.Syncer)
	return nil
}

// newAllocator builds the allocator of mode m (raw, pool or cpool) over up.
func (r *runner) newAllocator(m Mode, up pool.Upstream) (pool.Allocator, error) {
	if m == ModeCPool {
		a, err := cpool.New(r.cfg, up)
		if err != nil {
			return nil, fmt.Errorf("build the C pool: %w", err)
		}
		return a, nil
	}
	cfg := r.cfg
	if m == ModeRaw {
		cfg = rawConfig(r.cfg)
	}
	a, err := r.opt.NewAllocator(cfg, up)
	if err != nil {
		return nil, fmt.Errorf("build %s allocator: %w", cfg.Policy, err)
	}
	return a, nil
}

func (r *runner) destroyStreams(ps *passState) error {
	var errs []error
	for _, s := range ps.streams {
		errs = append(errs, r.b.DestroyStream(s))
	}
	ps.streams = nil
	return errors.Join(errs...)
}

// replayOps runs every request, timing each call into the allocator (in cpool mode, it goes over
// the requests the C pool ran, with the times measured in C).
func (r *runner) replayOps(ps *passState) {
	clock, sinceProgress := r.opt.Clock, 0
	for i, o := range r.t.Ops {
		switch {
		case o.IsAlloc():
			t0 := clock()
			addr, err := ps.d.alloc(o.Size, o.StreamIndex())
			dt := ps.latency(clock() - t0)
			ps.elapsed += dt
			ps.acc.allocLat.record(dt)
			r.afterAlloc(ps, i, o, addr, err)
		case !o.IsFree(): // a sync point only
		case r.addrs[o.Slot] != 0:
			addr := r.addrs[o.Slot]
			r.beforeFree(ps, o.Slot, addr)
			t0 := clock()
			err := ps.d.free(addr, o.StreamIndex())
			dt := ps.latency(clock() - t0)
			ps.elapsed += dt
			ps.acc.freeLat.record(dt)
			r.afterFree(ps, i, o.Slot, err)
		default:
			ps.acc.SkippedFrees++
		}
		if o.Syncs() {
			r.syncPoint(ps, i)
		}
		if sinceProgress++; sinceProgress == progressEvery {
			r.opt.Progress(progressEvery)
			sinceProgress = 0
		}
	}
	r.opt.Progress(int64(sinceProgress))
}

// timeOps runs every request with no clock reading per call: the clock is read around each chunk
// of progressEvery requests (the progress report falls between two chunks, outside the time), and
// nothing but the calls, the address table and the counts runs inside. In async mode the clock is
// also read around each device synchronization at the trace's sync points, whose time is taken
// out of the chunk's: it is the program's waiting, not the allocator's.
func (r *runner) timeOps(ps *passState) {
	clock, ops := r.opt.Clock, r.t.Ops
	for start := 0; start < len(ops); start += progressEvery {
		end := min(start+progressEvery, len(ops))
		synced := ps.syncNs
		t0 := clock()
		r.timeChunk(ps, start, ops[start:end])
		ps.elapsed += clock() - t0 - (ps.syncNs - synced)
		r.opt.Progress(int64(end - start))
	}
}

// timeChunk runs ops, the requests from index start on, for timeOps.
func (r *runner) timeChunk(ps *passState, start int, ops []requests.Op) {
	d, addrs := ps.d, r.addrs
	for j, o := range ops {
		switch {
		case o.IsAlloc():
			addr, err := d.alloc(o.Size, o.StreamIndex())
			if err != nil || addr == 0 {
				r.timedAllocFailed(ps, start+j, o, addr, err)
			} else {
				addrs[o.Slot], r.sizes[o.Slot] = addr, o.Size
				ps.allocs++
			}
		case !o.IsFree(): // a sync point only
		case addrs[o.Slot] != 0:
			addr := addrs[o.Slot]
			if err := d.free(addr, o.StreamIndex()); err != nil {
				ps.acc.TimedFreeErrors++
				ps.acc.problem("timed repetition %d, request %d: free %#x: %v", ps.rep+1, start+j, addr, err)
			} else {
				ps.frees++
			}
			addrs[o.Slot] = 0
		}
		if o.Syncs() && (ps.syncer != nil || ps.devSync) {
			r.timedSync(ps, start+j)
		}
	}
}

// timedSync acts on a sync point in a timed pass: the allocator's Sync (its time is allocator
// time), or in async mode the device synchronization, whose time timeOps takes out.
func (r *runner) timedSync(ps *passState, i int) {
	var err error
	if ps.syncer != nil {
		err = ps.syncer.Sync()
	} else {
		err = r.syncDevice(ps)
	}
	if err != nil {
		ps.acc.TimedFreeErrors++
		ps.acc.problem("timed repetition %d, request %d: sync: %v", ps.rep+1, i, err)
	}
}

func (r *runner) timedAllocFailed(ps *passState, i int, o requests.Op, addr uint64, err error) {
	if err == nil && addr == 0 {
		err = errors.New("allocator returned address 0")
	}
	ps.failures++
	ps.acc.TimedFailures++
	ps.acc.problem("timed repetition %d, request %d: alloc %d bytes: %v", ps.rep+1, i, o.Size, err)
}

// syncPoint follows the program where it synchronized with the device, in a checked pass. A
// stream-ordered allocator is told (pool.Syncer.Sync): its time counts as allocator time, not as
// an alloc or free latency. In async mode the backend synchronizes, so that the stream-ordered
// pool reuses memory as it did in the program: that time is the program's own waiting and is kept
// out of the allocator time and the latencies.
func (r *runner) syncPoint(ps *passState, i int) {
	var err error
	switch {
	case ps.syncer != nil:
		t0 := r.opt.Clock()
		err = ps.syncer.Sync()
		ps.elapsed += r.opt.Clock() - t0
	case ps.devSync:
		err = r.syncDevice(ps)
	default:
		return
	}
	ps.acc.Syncs++
	if err != nil {
		ps.acc.FreeErrors++
		ps.acc.problem("repetition %d, request %d: sync: %v", ps.rep+1, i, err)
	}
}

// syncDevice synchronizes the backend at a sync point (async mode), its time into ps.syncNs.
func (r *runner) syncDevice(ps *passState) error {
	t0 := r.opt.Clock()
	err := r.b.Synchronize()
	ps.syncNs += r.opt.Clock() - t0
	return err
}

func (r *runner) afterAlloc(ps *passState, i int, o requests.Op, addr uint64, err error) {
	acc := ps.acc
	if err == nil && addr == 0 {
		err = errors.New("allocator returned address 0")
	}
	if err != nil {
		ps.failures++
		if errors.Is(err, pool.ErrOutOfMemory) {
			acc.OOMs++
		}
		acc.problem("repetition %d, request %d: alloc %d bytes: %v", ps.rep+1, i, o.Size, err)
		return
	}
	ps.allocs++
	r.addrs[o.Slot], r.sizes[o.Slot] = addr, o.Size
	ps.liveBytes += o.Size
	ps.peakLive = max(ps.peakLive, ps.liveBytes)
	if ps.live != nil {
		r.verifyAlloc(ps, i, addr, o.Size)
	}
	if ps.touch {
		pattern := byte(i%255) + 1
		r.patterns[o.Slot] = pattern
		acc.Touched++
		if err := r.b.Touch(addr, o.Size, pattern); err != nil {
			acc.TouchFailures++
			acc.problem("repetition %d, request %d: touch %d bytes at %#x: %v", ps.rep+1, i, o.Size, addr, err)
		}
	}
	r.sampleMemory(ps)
}

// verifyAlloc checks the new block against the live blocks and the reserved regions.
func (r *runner) verifyAlloc(ps *passState, i int, addr, size uint64) {
	acc := ps.acc
	acc.VerifyChecks++
	if other, ok := ps.live.Overlapping(addr, size); ok {
		acc.Overlaps++
		acc.problem("repetition %d, request %d: block [%#x, %#x) overlaps live block [%#x, %#x)",
			ps.rep+1, i, addr, addr+size, other.Addr, other.End())
	} else {
		ps.live.Insert(addrset.Span{Addr: addr, Size: size})
	}
	if ps.up != nil {
		if _, ok := ps.up.check.regions.Containing(addr, size); !ok {
			acc.OutsideReserved++
			acc.problem("repetition %d, request %d: block [%#x, %#x) is not inside memory reserved from the backend",
				ps.rep+1, i, addr, addr+size)
		}
	}
}

// sampleMemory reads the backend's free memory when the own account reaches a new peak.
func (r *runner) sampleMemory(ps *passState) {
	own := ps.peakLive
	if ps.up != nil {
		own = ps.up.counts().PeakReservedBytes
	}
	if own <= ps.sampled {
		return
	}
	ps.sampled = own
	free, _, err := r.b.MemGetInfo()
	if err != nil {
		ps.acc.problem("repetition %d: memory info: %v", ps.rep+1, err)
		return
	}
	if free < ps.memStart {
		ps.acc.PeakMemInfoBytes = max(ps.acc.PeakMemInfoBytes, ps.memStart-free)
	}
}

// beforeFree checks the block's pattern and takes it out of the live set.
func (r *runner) beforeFree(ps *passState, slot uint32, addr uint64) {
	size := r.sizes[slot]
	if ps.touch {
		if err := r.b.Check(addr, size, r.patterns[slot]); err != nil {
			ps.acc.TouchFailures++
			ps.acc.problem("repetition %d: block at %#x (%d bytes) changed while live: %v", ps.rep+1, addr, size, err)
		}
	}
	if ps.live != nil {
		if s, ok := ps.live.Get(addr); ok && s.Size == size {
			ps.live.Remove(addr)
		}
	}
}

func (r *runner) afterFree(ps *passState, i int, slot uint32, err error) {
	if err != nil {
		ps.acc.FreeErrors++
		ps.acc.problem("repetition %d, request %d: free %#x: %v", ps.rep+1, i, r.addrs[slot], err)
	} else {
		ps.frees++
	}
	ps.liveBytes -= r.sizes[slot]
	r.addrs[slot] = 0
}
