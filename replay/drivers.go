package replay

import (
	"fmt"

	"github.com/allocscope/allocscope/pool"
)

// countingUpstream wraps the backend's Upstream for the raw and pool modes. It keeps the engine's
// own account of reserved memory and, under --verify, the set of reserved regions.
type countingUpstream struct {
	up           pool.Upstream
	reserved     uint64
	peak         uint64
	reserves     uint64
	releases     uint64
	remaps       uint64 // Remap calls (counted in reserves and releases too)
	regions      *spans // nil unless verifying
	releaseError error  // first Release (or Unmap) of memory that was not reserved (or mapped) so
}

func (c *countingUpstream) Reserve(size uint64) (uint64, error) {
	addr, err := c.up.Reserve(size)
	if err != nil {
		return 0, err
	}
	c.gained(size)
	if c.regions != nil {
		c.regions.insert(span{addr: addr, size: size})
	}
	return addr, nil
}

func (c *countingUpstream) Release(addr, size uint64) error {
	if c.regions != nil {
		if r, ok := c.regions.remove(addr); !ok || r.size != size {
			c.badRelease("release of [%#x, +%d) that was not reserved so", addr, size)
		}
	}
	if err := c.up.Release(addr, size); err != nil {
		return err
	}
	c.lost(size)
	return nil
}

// gained counts size bytes more held from the backend (a Reserve or a Map), as pool.Stats does.
func (c *countingUpstream) gained(size uint64) {
	c.reserves++
	c.reserved += size
	c.peak = max(c.peak, c.reserved)
}

// lost counts size bytes given back to the backend (a Release or an Unmap).
func (c *countingUpstream) lost(size uint64) {
	c.releases++
	c.reserved -= size
}

// badRelease records the first call that gave back memory the allocator did not hold so.
func (c *countingUpstream) badRelease(format string, args ...any) {
	if c.releaseError == nil {
		c.releaseError = fmt.Errorf(format, args...)
	}
}

// countingMapper is the countingUpstream of a backend that maps pages (a pool.Mapper, which
// PyTorch's expandable segments need). Mapped bytes count as reserved memory, Map as a reserve
// and Unmap as a release, as pool.Stats counts them; address space holds no memory and is not
// counted. Under --verify the mapped ranges, merged within one address reservation, are the
// reserved regions that live blocks must lie inside.
type countingMapper struct {
	*countingUpstream
	m     pool.Mapper
	addrs *spans // address reservations; nil unless verifying
}

// newCounting returns the engine's counting wrapper of the backend: a countingMapper when the
// backend is a pool.Mapper, so that the allocator sees one too.
func newCounting(b Backend, verify bool) (*countingUpstream, pool.Upstream) {
	c := &countingUpstream{up: b}
	if verify {
		c.regions = newSpans()
	}
	m, ok := b.(pool.Mapper)
	if !ok {
		return c, c
	}
	cm := &countingMapper{countingUpstream: c, m: m}
	if verify {
		cm.addrs = newSpans()
	}
	if r, ok := b.(pool.Remapper); ok {
		return c, &countingRemapper{countingMapper: cm, r: r}
	}
	return c, cm
}

// countingRemapper is the countingMapper of a backend that can move pages (a pool.Remapper, which
// the paged arena uses): a Remap counts as a reserve and a release, the bytes held unchanged, as
// pool.Stats counts it; under --verify the moved range leaves the reserved regions and the new one
// joins them.
type countingRemapper struct {
	*countingMapper
	r pool.Remapper
}

func (c *countingRemapper) Remap(from, to, size uint64) error {
	if c.regions != nil {
		if !c.regions.cut(from, size) {
			c.badRelease("remap of [%#x, +%d) that was not mapped", from, size)
		}
		if r, ok := c.addrs.containing(to, size); ok {
			c.regions.insertMerged(span{addr: to, size: size}, r.addr, r.end())
		} else {
			c.badRelease("remap to [%#x, +%d) outside the address space reserved", to, size)
		}
	}
	if err := c.r.Remap(from, to, size); err != nil {
		return err
	}
	c.reserves++
	c.releases++
	c.remaps++
	return nil
}

func (c *countingMapper) ReserveAddress(size uint64) (uint64, error) {
	addr, err := c.m.ReserveAddress(size)
	if err == nil && c.addrs != nil {
		c.addrs.insert(span{addr: addr, size: size})
	}
	return addr, err
}

func (c *countingMapper) ReleaseAddress(addr, size uint64) error {
	if c.addrs != nil {
		if r, ok := c.addrs.remove(addr); !ok || r.size != size {
			c.badRelease("release of address space [%#x, +%d) that was not reserved so", addr, size)
		} else if m, ok := c.regions.overlapping(addr, size); ok {
			c.badRelease("release of address space [%#x, +%d) with [%#x, %#x) still mapped", addr, size, m.addr, m.end())
		}
	}
	return c.m.ReleaseAddress(addr, size)
}

func (c *countingMapper) Map(addr, size uint64) error {
	if err := c.m.Map(addr, size); err != nil {
		return err
	}
	c.gained(size)
	if c.addrs != nil {
		if r, ok := c.addrs.containing(addr, size); ok {
			c.regions.insertMerged(span{addr: addr, size: size}, r.addr, r.end())
		} else {
			c.badRelease("map of [%#x, +%d) outside the address space reserved", addr, size)
		}
	}
	return nil
}

func (c *countingMapper) Unmap(addr, size uint64) error {
	if c.regions != nil && !c.regions.cut(addr, size) {
		c.badRelease("unmap of [%#x, +%d) that was not mapped", addr, size)
	}
	if err := c.m.Unmap(addr, size); err != nil {
		return err
	}
	c.lost(size)
	return nil
}

// driver is one mode's way to allocate and free.
type driver interface {
	alloc(size uint64, stream uint32) (uint64, error)
	free(addr uint64, stream uint32) error
}

// allocatorDriver serves the raw and pool modes: a pool.Allocator over the counting Upstream. It
// passes the recorded stream handles, as analyze's simulation does.
type allocatorDriver struct {
	a       pool.Allocator
	handles []uint64
}

func (d allocatorDriver) alloc(size uint64, stream uint32) (uint64, error) {
	return d.a.Alloc(size, d.handles[stream])
}

func (d allocatorDriver) free(addr uint64, stream uint32) error {
	return d.a.Free(addr, d.handles[stream])
}

// asyncDriver serves the async mode: the backend's stream-ordered allocator, one stream per
// recorded stream.
type asyncDriver struct {
	b       Backend
	streams []Stream
}

func (d asyncDriver) alloc(size uint64, stream uint32) (uint64, error) {
	return d.b.AllocAsync(size, d.streams[stream])
}

func (d asyncDriver) free(addr uint64, stream uint32) error {
	return d.b.FreeAsync(addr, d.streams[stream])
}

// rawConfig is the configuration of the raw mode: every request straight to the Upstream.
func rawConfig(cfg pool.Config) pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyRaw, Alignment: cfg.Alignment}
}
