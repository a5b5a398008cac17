package requests

import (
	"errors"

	"github.com/allocscope/allocscope/pool"
)

// Feeder serves ops with an allocator: it keeps the address of every live block by slot, passes
// each request's recorded stream handle, and tells an allocator that acts on device
// synchronization (pool.Syncer) where the program synchronized. A block the allocator could not
// serve has no address; its free is skipped.
type Feeder struct {
	alloc    pool.Allocator
	syncer   pool.Syncer
	deferrer pool.Deferrer // with Deferred
	addrs    []uint64      // slot → address, 0 = not live
	// Only, when set, selects the allocations to serve (by size); the others and their frees are
	// skipped.
	Only func(size uint64) bool
}

// NewFeeder returns a Feeder serving ops with a.
func NewFeeder(a pool.Allocator) *Feeder {
	f := &Feeder{alloc: a}
	f.syncer, _ = a.(pool.Syncer)
	return f
}

// NewDeferredFeeder returns a Feeder that serves ops as `record --pool` serves the program's calls
// with a: the free of an op that synchronizes (cudaFree, cuMemFree_v2) is deferred, and no op is a
// synchronization, since the pool's calls no longer synchronize. ok is false when a is not a
// pool.Deferrer.
func NewDeferredFeeder(a pool.Allocator) (f *Feeder, ok bool) {
	d, ok := a.(pool.Deferrer)
	return &Feeder{alloc: a, deferrer: d}, ok
}

// Feed serves ops in order; handles maps their stream indexes to the recorded stream handles.
// Errors of the allocator are not returned: a failed allocation leaves its block without an address
// (the allocator counts its failures in its Stats).
func (f *Feeder) Feed(ops []Op, handles []uint64) {
	for _, o := range ops {
		switch {
		case o.IsAlloc():
			f.serve(o, handles)
		case o.IsFree():
			f.free(o, handles)
		}
		if o.Syncs() && f.syncer != nil {
			_ = f.syncer.Sync()
		}
	}
}

func (f *Feeder) free(o Op, handles []uint64) {
	if int(o.Slot) >= len(f.addrs) || f.addrs[o.Slot] == 0 {
		return
	}
	a := f.addrs[o.Slot]
	f.addrs[o.Slot] = 0
	if f.deferrer != nil && o.Syncs() {
		_ = f.deferrer.FreeDeferred(a, handles[o.StreamIndex()])
		return
	}
	_ = f.alloc.Free(a, handles[o.StreamIndex()])
}

func (f *Feeder) serve(o Op, handles []uint64) {
	if int(o.Slot) >= len(f.addrs) {
		f.addrs = append(f.addrs, make([]uint64, int(o.Slot)+1-len(f.addrs))...)
	}
	f.addrs[o.Slot] = 0
	if f.Only != nil && !f.Only(o.Size) {
		return
	}
	if a, err := f.alloc.Alloc(o.Size, handles[o.StreamIndex()]); err == nil {
		f.addrs[o.Slot] = a
	}
}

// Live returns the address of the block in slot, 0 when it has none.
func (f *Feeder) Live(slot uint32) uint64 {
	if int(slot) < len(f.addrs) {
		return f.addrs[slot]
	}
	return 0
}

// FreeLive frees every block still live, in slot order, on stream (a trace's blocks never freed, as
// replay frees them after the last op).
func (f *Feeder) FreeLive(stream uint64) error {
	var errs []error
	for slot, a := range f.addrs {
		if a != 0 {
			f.addrs[slot] = 0
			errs = append(errs, f.alloc.Free(a, stream))
		}
	}
	return errors.Join(errs...)
}
