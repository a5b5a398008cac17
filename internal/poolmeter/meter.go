// Package poolmeter counts what an allocator of package pool asks of its pool.Upstream: the one
// counting Upstream decorator, which analyze's simulation and replay's engine both put between
// their allocators and their memory.
package poolmeter

import (
	"github.com/allocscope/allocscope/internal/upstreams"
	"github.com/allocscope/allocscope/pool"
)

// Call names a pool.Upstream call, for Options.Cost.
type Call int

// The calls a Meter charges.
const (
	CallReserve Call = iota // Reserve, or the Map of one page
	CallRelease             // Release, or the Unmap of one page
	CallRemap               // the Remap of one page
)

// Options configure a Meter.
type Options struct {
	// PageBytes is the page a Map, Unmap or Remap is counted (and charged) in: the granularity a
	// GPU maps memory in (2 MiB on an H200). 0 counts each call as one page.
	PageBytes uint64
	// Cost, when set, is told of every call passed on, as n calls of size bytes each: a Reserve or
	// Release is one call of its size; a Map, Unmap or Remap is one call per page, of at most
	// PageBytes each. analyze adds up estimated durations with it.
	Cost func(c Call, size, n uint64)
}

// Meter counts what an allocator asks of a pool.Upstream. Build it with New; give the allocator
// the Upstream that New returns, which is a pool.Mapper or a pool.Remapper when the wrapped
// Upstream is one.
type Meter struct {
	up     pool.Upstream
	m      pool.Mapper
	r      pool.Remapper
	opts   Options
	counts upstreams.Counts
}

// New wraps up and returns the Meter and the Upstream to hand to the allocator.
func New(up pool.Upstream, opts Options) (*Meter, pool.Upstream) {
	me := &Meter{up: up, opts: opts}
	m, ok := up.(pool.Mapper)
	if !ok {
		return me, meterUpstream{me}
	}
	me.m = m
	if r, ok := up.(pool.Remapper); ok {
		me.r = r
		return me, meterRemapper{meterMapper{meterUpstream{me}}}
	}
	return me, meterMapper{meterUpstream{me}}
}

// Counts returns the counts so far.
func (me *Meter) Counts() upstreams.Counts { return me.counts }

// charge charges one Reserve or Release of size bytes.
func (me *Meter) charge(c Call, size uint64) {
	if me.opts.Cost != nil {
		me.opts.Cost(c, size, 1)
	}
}

// chargePages counts and charges a Map, Unmap or Remap of size bytes, page by page.
func (me *Meter) chargePages(c Call, size uint64) {
	page := me.opts.PageBytes
	if page == 0 {
		page = max(size, 1)
	}
	n := (size + page - 1) / page
	me.counts.PageOps += n
	if me.opts.Cost != nil {
		me.opts.Cost(c, min(size, page), n)
	}
}

type meterUpstream struct{ me *Meter }

func (u meterUpstream) Reserve(size uint64) (uint64, error) {
	u.me.charge(CallReserve, size)
	addr, err := u.me.up.Reserve(size)
	if err == nil {
		u.me.counts.Gained(size)
	}
	return addr, err
}

func (u meterUpstream) Release(addr, size uint64) error {
	u.me.charge(CallRelease, size)
	if err := u.me.up.Release(addr, size); err != nil {
		return err
	}
	u.me.counts.Lost(size)
	return nil
}

type meterMapper struct{ meterUpstream }

func (u meterMapper) ReserveAddress(size uint64) (uint64, error) { return u.me.m.ReserveAddress(size) }

func (u meterMapper) ReleaseAddress(addr, size uint64) error {
	return u.me.m.ReleaseAddress(addr, size)
}

func (u meterMapper) Map(addr, size uint64) error {
	u.me.chargePages(CallReserve, size)
	if err := u.me.m.Map(addr, size); err != nil {
		return err
	}
	u.me.counts.Gained(size)
	return nil
}

func (u meterMapper) Unmap(addr, size uint64) error {
	u.me.chargePages(CallRelease, size)
	if err := u.me.m.Unmap(addr, size); err != nil {
		return err
	}
	u.me.counts.Lost(size)
	return nil
}

type meterRemapper struct{ meterMapper }

func (u meterRemapper) Remap(from, to, size uint64) error {
	u.me.chargePages(CallRemap, size)
	if err := u.me.r.Remap(from, to, size); err != nil {
		return err
	}
	u.me.counts.Remapped()
	return nil
}
