//go:build cgo

package cpool

/*
#cgo CFLAGS: -O2
#include "cpool.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// Available reports whether this build has the C pool (it needs cgo).
const Available = true

// codeNone is the code of an op that asked nothing of the pool.
const codeNone = C.CPOOL_NONE

// Pool is the shim's C pool over a Go pool.Upstream. It is a pool.Allocator and, like package
// pool's allocators, safe for concurrent use (a lock around every call into C).
type Pool struct {
	mu sync.Mutex
	c  *C.struct_cpool // nil once closed
	h  cgo.Handle      // this Pool, for the upstream's calls back from C
	up pool.Upstream
	// upErrs are the upstream's errors during the current call into C, by the op being served (-1
	// outside Run).
	upErrs []opError
	// now and peak are the counters once closed.
	now, peak pool.Stats
}

type opError struct {
	op  int64
	err error
}

// New builds the C pool that cfg describes over up and reserves its plan there, as pool.New builds
// package pool's. It refuses a config the C pool does not implement with intercept.NewCPoolConfig's
// one-line error. Close gives everything back.
func New(cfg pool.Config, up pool.Upstream) (*Pool, error) {
	cc, err := intercept.NewCPoolConfig(cfg)
	if err != nil {
		return nil, err
	}
	ccfg := cConfig(cc)
	p := &Pool{up: up}
	p.h = cgo.NewHandle(p)
	var code C.int
	p.c = C.cpool_new(&ccfg, C.uintptr_t(p.h), &code)
	if p.c == nil {
		p.h.Delete()
		return nil, errors.New("build the C pool: no host memory for its state")
	}
	if code != C.CP_OK {
		err := p.requestError(Code(code), "reserve the pool's plan", -1)
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// BookBytes returns the host bytes the C pool's tables take for cfg's plan (cp_book_bytes of
// cpool/pool.c), or NewCPoolConfig's error.
func BookBytes(cfg pool.Config) (uint64, error) {
	cc, err := intercept.NewCPoolConfig(cfg)
	if err != nil {
		return 0, err
	}
	ccfg := cConfig(cc)
	return uint64(C.cp_book_bytes(&ccfg)), nil
}

// cConfig is c as struct cp_config.
func cConfig(c intercept.CPoolConfig) C.struct_cp_config {
	cc := C.struct_cp_config{align: C.uint64_t(c.Alignment), threshold: C.uint64_t(c.LargeThreshold),
		arena_bytes: C.uint64_t(c.ArenaBytes), grow_bytes: C.uint64_t(c.GrowBytes),
		maximum: C.uint64_t(c.MaximumBytes), grow_slots: C.uint64_t(c.GrowSlots),
		per_stream: cBool(c.PerStream), fit_aged: cBool(c.FitAged), nclasses: C.int(len(c.Classes))}
	for i, cl := range c.Classes {
		cc.class_size[i], cc.class_slots[i] = C.uint64_t(cl.Size), C.uint64_t(cl.Slots)
	}
	return cc
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Ops is an op sequence in the C pool's form, a flat array of struct cpool_op, converted once and
// run any number of times.
type Ops struct {
	ops     []C.struct_cpool_op
	handles []C.uint64_t
	slots   int // the size of the slot table: the highest slot + 1
}

// NewOps converts ops, whose stream indexes index handles (the recorded stream handles, as in
// requests.Trace).
func NewOps(ops []requests.Op, handles []uint64) (*Ops, error) {
	o := &Ops{ops: make([]C.struct_cpool_op, len(ops)), handles: make([]C.uint64_t, len(handles))}
	for i, h := range handles {
		o.handles[i] = C.uint64_t(h)
	}
	for i, op := range ops {
		s := op.StreamIndex()
		if op.IsAlloc() || op.IsFree() {
			if int(s) >= len(handles) || op.Slot == requests.NoSlot {
				return nil, fmt.Errorf("op %d: stream %d of %d, slot %d: not a request of this sequence", i, s, len(handles), op.Slot)
			}
			o.slots = max(o.slots, int(op.Slot)+1)
		}
		o.ops[i] = C.struct_cpool_op{size: C.uint64_t(op.Size), slot: C.uint32_t(op.Slot), stream: C.uint32_t(s)}
	}
	return o, nil
}

// Len returns the number of ops.
func (o *Ops) Len() int { return len(o.ops) }

// Run serves ops in order in one call into C, each allocation into its slot and each free of its
// slot's live block (skipped when that block's allocation failed), with a slot table of its own
// that starts empty. With perRequest, each request is timed on its own (Result.LatencyNs); the
// whole loop always is (Result.ElapsedNs). Blocks still live after the last op stay allocated:
// Free them, or Close the pool. An error means the run could not be made (a closed pool); the
// requests the pool did not serve are Result.Failures.
func (p *Pool) Run(ops *Ops, perRequest bool) (*Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return nil, fmt.Errorf("run: %w", pool.ErrClosed)
	}
	n := len(ops.ops)
	res := &Result{Addrs: make([]uint64, n)}
	codes, slots := make([]uint8, n), make([]C.uint64_t, ops.slots)
	var lat *C.int64_t
	if perRequest {
		res.LatencyNs = make([]int64, n)
		lat = (*C.int64_t)(unsafe.Pointer(first(res.LatencyNs)))
	}
	// Write every page of the buffers now: their first touches (page faults, when the Go heap got
	// the memory fresh) are not the pool's time.
	clear(res.Addrs)
	clear(codes)
	clear(slots)
	clear(res.LatencyNs)
	p.upErrs = p.upErrs[:0]
	var elapsed C.int64_t
	C.cpool_run(p.c, first(ops.ops), C.size_t(n), first(ops.handles), first(slots),
		(*C.uint64_t)(unsafe.Pointer(first(res.Addrs))), (*C.uint8_t)(unsafe.Pointer(first(codes))), lat, &elapsed)
	res.ElapsedNs = int64(elapsed)
	res.Failures = p.failures(ops, res.Addrs, codes)
	res.Stats, res.PeakStats = p.stats()
	return res, nil
}

// first returns the address of s's first element, nil for an empty s.
func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// failures lists the requests of a run that the pool did not serve.
func (p *Pool) failures(ops *Ops, addrs []uint64, codes []uint8) []Failure {
	var fs []Failure
	for i, c := range codes {
		if c == C.CP_OK || c == codeNone {
			continue
		}
		what := fmt.Sprintf("free %#x", addrs[i])
		if o := ops.ops[i]; o.size > 0 {
			what = fmt.Sprintf("alloc %d bytes", uint64(o.size))
		}
		fs = append(fs, Failure{Op: i, Code: Code(c), Err: p.requestError(Code(c), what, int64(i))})
	}
	return fs
}

// requestError is the error of a request (what) that the pool answered with code while serving
// op: the upstream's error of that op when it had one.
func (p *Pool) requestError(code Code, what string, op int64) error {
	var upErr error
	for _, e := range p.upErrs {
		if e.op == op {
			upErr = e.err
		}
	}
	switch {
	case upErr != nil:
		return fmt.Errorf("%s: %w", what, upErr)
	case code == CodeOutOfMemory:
		return fmt.Errorf("%s: arena at its maximum: %w", what, pool.ErrOutOfMemory)
	case code == CodeUnknownAddress:
		return fmt.Errorf("%s: %w", what, pool.ErrUnknownAddress)
	case code == CodeClosed:
		return fmt.Errorf("%s: %w", what, pool.ErrClosed)
	}
	return fmt.Errorf("%s: the C pool failed (%v)", what, code)
}

// upstreamFailed records err, returned by the upstream while serving op, and returns the code the
// C pool takes for it.
func (p *Pool) upstreamFailed(op int64, err error) C.int {
	p.upErrs = append(p.upErrs, opError{op, err})
	if errors.Is(err, pool.ErrOutOfMemory) {
		return C.CP_OOM
	}
	return C.CP_ERR
}

// Alloc serves one request of size bytes on stream: one call into C.
func (p *Pool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	what := fmt.Sprintf("alloc %d bytes", size)
	if p.c == nil {
		return 0, fmt.Errorf("%s: %w", what, pool.ErrClosed)
	}
	p.upErrs = p.upErrs[:0]
	var addr C.uint64_t
	if code := C.cpool_alloc(p.c, C.uint64_t(size), C.uint64_t(stream), &addr); code != C.CP_OK {
		return 0, p.requestError(Code(code), what, -1)
	}
	return uint64(addr), nil
}

// Free gives back the block at addr, freed on stream: one call into C.
func (p *Pool) Free(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	what := fmt.Sprintf("free %#x", addr)
	if p.c == nil {
		return fmt.Errorf("%s: %w", what, pool.ErrClosed)
	}
	if code := C.cpool_free(p.c, C.uint64_t(addr), C.uint64_t(stream)); code != C.CP_OK {
		return p.requestError(Code(code), what, -1)
	}
	return nil
}

// Stats returns the pool's counters (struct cp_stats) so far.
func (p *Pool) Stats() pool.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	now, _ := p.stats()
	return now
}

// PeakStats returns the counters as they were at the pool's peak reserved memory.
func (p *Pool) PeakStats() pool.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, peak := p.stats()
	return peak
}

func (p *Pool) stats() (now, peak pool.Stats) {
	if p.c == nil {
		return p.now, p.peak
	}
	var n, pk C.struct_cp_stats
	C.cpool_stats(p.c, &n, &pk)
	return statsOf(&n), statsOf(&pk)
}

func statsOf(s *C.struct_cp_stats) pool.Stats {
	return pool.Stats{Allocs: uint64(s.allocs), Frees: uint64(s.frees), Failures: uint64(s.failures),
		LiveBytes: uint64(s.live_bytes), PeakLiveBytes: uint64(s.peak_live_bytes), BlockBytes: uint64(s.block_bytes),
		PeakBlockBytes: uint64(s.peak_block_bytes), ReservedBytes: uint64(s.reserved_bytes),
		PeakReservedBytes: uint64(s.peak_reserved_bytes), UpstreamReserves: uint64(s.upstream_reserves),
		UpstreamReleases: uint64(s.upstream_releases), UpstreamFailures: uint64(s.upstream_failures),
		Fallbacks: uint64(s.fallbacks), Syncs: uint64(s.syncs), IdleReleases: uint64(s.idle_releases),
		IdleReleasedBytes: uint64(s.idle_released_bytes)}
}

// ReleaseIdle gives back the regions the pool grew by that hold no live or deferred block
// (pool.h's cp_release_idle, package pool's pool.IdleReleaser) and returns their bytes; 0 once
// closed.
func (p *Pool) ReleaseIdle() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return 0
	}
	p.upErrs = p.upErrs[:0]
	return uint64(C.cpool_release_idle(p.c))
}

// Close gives back every region the pool holds, live blocks or not, and the pool's own memory;
// the counters stay readable. Later calls do nothing.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return nil
	}
	p.upErrs = p.upErrs[:0]
	code := C.cpool_close(p.c)
	p.now, p.peak = p.stats()
	C.cpool_destroy(p.c)
	p.c = nil
	p.h.Delete()
	if code == C.CP_OK {
		return nil
	}
	errs := []error{errors.New("close the C pool: an upstream release failed")}
	for _, e := range p.upErrs {
		errs = append(errs, e.err)
	}
	return errors.Join(errs...)
}
