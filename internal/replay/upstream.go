package replay

import (
	"fmt"

	"github.com/allocscope/allocscope/internal/poolmeter"
	"github.com/allocscope/allocscope/internal/replay/internal/addrset"
	"github.com/allocscope/allocscope/internal/upstreams"
	"github.com/allocscope/allocscope/pool"
)

// engineUpstream is what the engine puts between the raw and pool modes' allocator and the backend:
// poolmeter.Meter, the engine's own account of what the allocator asked of the backend (compared with
// the allocator's Stats), over, under --verify, a check of every region reserved and given back.
type engineUpstream struct {
	meter *poolmeter.Meter
	check *regionCheck // nil unless verifying
}

// counts returns what the allocator asked of the backend so far.
func (e *engineUpstream) counts() upstreams.Counts { return e.meter.Counts() }

// releaseError returns the first call that gave back memory the allocator did not hold so.
func (e *engineUpstream) releaseError() error {
	if e.check == nil {
		return nil
	}
	return e.check.releaseError
}

// newEngineUpstream wraps the backend for an allocator; the Upstream it returns is a pool.Mapper
// (pool.Remapper) when the backend is one, so that the allocator sees one too.
func newEngineUpstream(b Backend, verify bool) (*engineUpstream, pool.Upstream) {
	e := &engineUpstream{}
	var up pool.Upstream = b
	if verify {
		e.check, up = newRegionCheck(b)
	}
	e.meter, up = poolmeter.New(up, poolmeter.Options{})
	return e, up
}

// regionCheck keeps, under --verify, the regions the allocator holds from the backend (the
// reserved ones and, for a pool.Mapper, the mapped ranges merged within one address reservation):
// live blocks must lie inside them, and every release must give back a region held so.
type regionCheck struct {
	up           pool.Upstream
	regions      *addrset.Set
	addrs        *addrset.Set // address reservations (a pool.Mapper)
	releaseError error        // first Release (or Unmap) of memory that was not reserved (or mapped) so
}

func newRegionCheck(b Backend) (*regionCheck, pool.Upstream) {
	c := &regionCheck{up: b, regions: addrset.New(), addrs: addrset.New()}
	m, ok := b.(pool.Mapper)
	if !ok {
		return c, checkedUpstream{c}
	}
	cm := checkedMapper{checkedUpstream{c}, m}
	if r, ok := b.(pool.Remapper); ok {
		return c, checkedRemapper{cm, r}
	}
	return c, cm
}

// badRelease records the first call that gave back memory the allocator did not hold so.
func (c *regionCheck) badRelease(format string, args ...any) {
	if c.releaseError == nil {
		c.releaseError = fmt.Errorf(format, args...)
	}
}

type checkedUpstream struct{ c *regionCheck }

func (u checkedUpstream) Reserve(size uint64) (uint64, error) {
	addr, err := u.c.up.Reserve(size)
	if err == nil {
		u.c.regions.Insert(addrset.Span{Addr: addr, Size: size})
	}
	return addr, err
}

func (u checkedUpstream) Release(addr, size uint64) error {
	if r, ok := u.c.regions.Remove(addr); !ok || r.Size != size {
		u.c.badRelease("release of [%#x, +%d) that was not reserved so", addr, size)
	}
	return u.c.up.Release(addr, size)
}

type checkedMapper struct {
	checkedUpstream
	m pool.Mapper
}

func (u checkedMapper) ReserveAddress(size uint64) (uint64, error) {
	addr, err := u.m.ReserveAddress(size)
	if err == nil {
		u.c.addrs.Insert(addrset.Span{Addr: addr, Size: size})
	}
	return addr, err
}

func (u checkedMapper) ReleaseAddress(addr, size uint64) error {
	c := u.c
	if r, ok := c.addrs.Remove(addr); !ok || r.Size != size {
		c.badRelease("release of address space [%#x, +%d) that was not reserved so", addr, size)
	} else if m, ok := c.regions.Overlapping(addr, size); ok {
		c.badRelease("release of address space [%#x, +%d) with [%#x, %#x) still mapped", addr, size, m.Addr, m.End())
	}
	return u.m.ReleaseAddress(addr, size)
}

func (u checkedMapper) Map(addr, size uint64) error {
	if err := u.m.Map(addr, size); err != nil {
		return err
	}
	u.c.mapped(addr, size, "map")
	return nil
}

// mapped adds [addr, addr+size) to the regions, merged within its address reservation.
func (c *regionCheck) mapped(addr, size uint64, what string) {
	if r, ok := c.addrs.Containing(addr, size); ok {
		c.regions.InsertMerged(addrset.Span{Addr: addr, Size: size}, r.Addr, r.End())
	} else {
		c.badRelease("%s of [%#x, +%d) outside the address space reserved", what, addr, size)
	}
}

func (u checkedMapper) Unmap(addr, size uint64) error {
	if !u.c.regions.Cut(addr, size) {
		u.c.badRelease("unmap of [%#x, +%d) that was not mapped", addr, size)
	}
	return u.m.Unmap(addr, size)
}

type checkedRemapper struct {
	checkedMapper
	r pool.Remapper
}

func (u checkedRemapper) Remap(from, to, size uint64) error {
	if !u.c.regions.Cut(from, size) {
		u.c.badRelease("remap of [%#x, +%d) that was not mapped", from, size)
	}
	u.c.mapped(to, size, "remap to")
	return u.r.Remap(from, to, size)
}
