package pool

import (
	"errors"
	"fmt"

	"github.com/allocscope/allocscope/internal/upstreams"
)

// counters keeps an allocator's Stats and the snapshot taken at peak reserved memory.
type counters struct {
	s    Stats
	peak Stats
}

// allocated records a successful Alloc of req bytes served by a block of blk bytes.
func (c *counters) allocated(req, blk uint64) {
	c.s.Allocs++
	c.s.LiveBytes += req
	c.s.PeakLiveBytes = max(c.s.PeakLiveBytes, c.s.LiveBytes)
	c.s.BlockBytes += blk
	c.s.PeakBlockBytes = max(c.s.PeakBlockBytes, c.s.BlockBytes)
	c.notePeak()
}

// freed records a successful Free of a block of blk bytes that served req bytes.
func (c *counters) freed(req, blk uint64) {
	c.s.Frees++
	c.s.LiveBytes -= req
	c.s.BlockBytes -= blk
}

// failed records an Alloc that returned an error.
func (c *counters) failed() {
	c.s.Failures++
	c.notePeak()
}

// notePeak takes the peak snapshot when reserved memory is at a new maximum, or at the maximum
// with more live bytes than the snapshot has.
func (c *counters) notePeak() {
	if c.s.ReservedBytes > c.peak.ReservedBytes ||
		(c.s.ReservedBytes == c.peak.ReservedBytes && c.s.LiveBytes > c.peak.LiveBytes) {
		c.peak = c.s
	}
}

// tracked wraps an Upstream for a policy: it passes the calls on with their context added to
// errors, counts the failed ones, and counts the successful ones by upstreams.Counts (the rule
// internal/poolmeter's Meter counts by), keeping the allocator's Stats equal to those counts. A non-zero limit makes reservations that
// would take ReservedBytes above it fail like an out-of-memory Upstream (a device of that
// capacity), counted as failed upstream calls.
type tracked struct {
	up     Upstream
	c      *counters
	limit  uint64
	counts upstreams.Counts
}

// errLimit is wrapped by reservations refused because of tracked.limit.
func (t *tracked) errLimit(size uint64) error {
	return fmt.Errorf("reserve %d bytes with %d of %d reserved: %w", size, t.c.s.ReservedBytes, t.limit, ErrOutOfMemory)
}

func (t *tracked) overLimit(size uint64) bool {
	return t.limit > 0 && t.c.s.ReservedBytes+size > t.limit
}

func (t *tracked) reserve(size uint64) (uint64, error) {
	if t.overLimit(size) {
		t.c.s.UpstreamFailures++
		return 0, t.errLimit(size)
	}
	addr, err := t.up.Reserve(size)
	if err != nil {
		t.c.s.UpstreamFailures++
		return 0, fmt.Errorf("reserve %d bytes from upstream: %w", size, err)
	}
	t.gained(size)
	return addr, nil
}

func (t *tracked) release(addr, size uint64) error {
	if err := t.up.Release(addr, size); err != nil {
		return fmt.Errorf("release %d bytes at %#x to upstream: %w", size, addr, err)
	}
	t.lost(size)
	return nil
}

func (t *tracked) gained(size uint64) {
	t.counts.Gained(size)
	t.toStats()
}

func (t *tracked) lost(size uint64) {
	t.counts.Lost(size)
	t.toStats()
}

// toStats copies the counts into the allocator's Stats.
func (t *tracked) toStats() {
	s := &t.c.s
	s.UpstreamReserves, s.UpstreamReleases = t.counts.Reserves, t.counts.Releases
	s.ReservedBytes, s.PeakReservedBytes = t.counts.ReservedBytes, t.counts.PeakReservedBytes
}

// mapPages backs [addr, addr+size) of reserved address space with memory through a Mapper.
func (t *tracked) mapPages(m Mapper, addr, size uint64) error {
	if t.overLimit(size) {
		t.c.s.UpstreamFailures++
		return t.errLimit(size)
	}
	if err := m.Map(addr, size); err != nil {
		t.c.s.UpstreamFailures++
		return fmt.Errorf("map %d bytes at %#x: %w", size, addr, err)
	}
	t.gained(size)
	return nil
}

// unmapPages releases the memory behind [addr, addr+size) through a Mapper.
func (t *tracked) unmapPages(m Mapper, addr, size uint64) error {
	if err := m.Unmap(addr, size); err != nil {
		return fmt.Errorf("unmap %d bytes at %#x: %w", size, addr, err)
	}
	t.lost(size)
	return nil
}

// remapPages moves the memory behind [from, from+size) to [to, to+size) through a Remapper: one
// upstream reserve and one release, the bytes held unchanged.
func (t *tracked) remapPages(r Remapper, from, to, size uint64) error {
	if err := r.Remap(from, to, size); err != nil {
		return fmt.Errorf("remap %d bytes from %#x to %#x: %w", size, from, to, err)
	}
	t.counts.Remapped()
	t.toStats()
	return nil
}

// maxRequest is the largest request any policy accepts (4 EiB); larger ones fail with
// ErrOutOfMemory before any rounding could overflow.
const maxRequest = 1 << 62

// checkRequest returns an error for a request above maxRequest.
func checkRequest(size uint64) error {
	if size > maxRequest {
		return fmt.Errorf("alloc %d bytes: larger than any device: %w", size, ErrOutOfMemory)
	}
	return nil
}

// isOOM reports whether err means "no memory" (as opposed to a broken Upstream).
func isOOM(err error) bool { return errors.Is(err, ErrOutOfMemory) }
