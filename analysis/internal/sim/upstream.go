// Package sim replays a trace's requests through allocator policies of package pool over a
// simulated address space, and through the recommended size classes to count their slots.
package sim

import "github.com/allocscope/allocscope/pool"

// Durations estimates how long the native calls behind upstream operations take, in ns.
type Durations interface {
	Alloc(size uint64) float64
	Free(size uint64) float64
}

// counting is a pool.Remapper over a pool.SimUpstream that counts what a policy asks of it and
// adds up the estimated duration of each call.
type counting struct {
	base          *pool.SimUpstream
	est           Durations
	predictedNs   float64
	reserves      uint64 // successful Reserve and Map calls
	reservedBytes uint64 // bytes of those calls
	pageOps       uint64 // granules mapped, unmapped or moved by Map, Unmap and Remap
}

func newCounting(capacity uint64, est Durations) *counting {
	// Each policy runs on one goroutine (forEachBatch): neither it nor its address space locks.
	return &counting{base: pool.NewSimUpstream(capacity, pool.DefaultAlignment, pool.SingleGoroutine()), est: est}
}

func (c *counting) charge(f func(uint64) float64, size uint64) {
	if c.est != nil {
		c.predictedNs += f(size)
	}
}

// Reserve implements pool.Upstream.
func (c *counting) Reserve(size uint64) (uint64, error) {
	c.charge(c.alloc, size)
	addr, err := c.base.Reserve(size)
	if err == nil {
		c.reserves++
		c.reservedBytes += size
	}
	return addr, err
}

// Release implements pool.Upstream.
func (c *counting) Release(addr, size uint64) error {
	c.charge(c.free, size)
	return c.base.Release(addr, size)
}

// ReserveAddress implements pool.Mapper.
func (c *counting) ReserveAddress(size uint64) (uint64, error) { return c.base.ReserveAddress(size) }

// ReleaseAddress implements pool.Mapper.
func (c *counting) ReleaseAddress(addr, size uint64) error { return c.base.ReleaseAddress(addr, size) }

// mapGranule is the unit the CUDA backend maps memory in: the device's allocation granularity
// (2 MiB on the H200), each granule its own cuMemCreate + cuMemMap + cuMemSetAccess (and
// cuMemUnmap + cuMemRelease to unmap it). A Map or Unmap is charged as that many calls of a
// granule's size.
const mapGranule = 2 << 20

// chargePages adds the estimated time of mapping or unmapping size bytes, granule by granule.
func (c *counting) chargePages(f func(uint64) float64, size uint64) {
	n := (size + mapGranule - 1) / mapGranule
	c.pageOps += n
	if c.est == nil {
		return
	}
	c.predictedNs += float64(n) * f(min(size, mapGranule))
}

// Map implements pool.Mapper.
func (c *counting) Map(addr, size uint64) error {
	c.chargePages(c.alloc, size)
	err := c.base.Map(addr, size)
	if err == nil {
		c.reserves++
		c.reservedBytes += size
	}
	return err
}

// Remap implements pool.Remapper. Each granule moved is charged as a map of one granule (a
// remap skips the cuMemCreate and cuMemRelease, so this errs high).
func (c *counting) Remap(from, to, size uint64) error {
	c.chargePages(c.alloc, size)
	return c.base.Remap(from, to, size)
}

// Unmap implements pool.Mapper.
func (c *counting) Unmap(addr, size uint64) error {
	c.chargePages(c.free, size)
	return c.base.Unmap(addr, size)
}

func (c *counting) alloc(size uint64) float64 { return c.est.Alloc(size) }
func (c *counting) free(size uint64) float64  { return c.est.Free(size) }
