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
	regions      *spans // nil unless verifying
	releaseError error  // first Release of a region that was not reserved
}

func (c *countingUpstream) Reserve(size uint64) (uint64, error) {
	addr, err := c.up.Reserve(size)
	if err != nil {
		return 0, err
	}
	c.reserves++
	c.reserved += size
	c.peak = max(c.peak, c.reserved)
	if c.regions != nil {
		c.regions.insert(span{addr: addr, size: size})
	}
	return addr, nil
}

func (c *countingUpstream) Release(addr, size uint64) error {
	if c.regions != nil {
		if r, ok := c.regions.remove(addr); (!ok || r.size != size) && c.releaseError == nil {
			c.releaseError = fmt.Errorf("release of [%#x, +%d) that was not reserved so", addr, size)
		}
	}
	if err := c.up.Release(addr, size); err != nil {
		return err
	}
	c.releases++
	c.reserved -= size
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
