package poolsim

import (
	"fmt"
	"github.com/allocscope/allocscope/internal/upstreams"
	"math"

	"github.com/allocscope/allocscope/internal/addrindex"
	"github.com/allocscope/allocscope/internal/spans"
)

// Base is the first address an Upstream hands out (rounded up to its granularity).
const Base = 1 << 32

// Upstream is a simulated address space: a pool.Upstream, pool.Mapper and pool.Remapper that
// holds no memory, for analyze's what-if simulation and for tests of allocators. It hands out
// non-overlapping address ranges and counts.
//
// Reserve and ReserveAddress round sizes up to the granularity and place the range at the most
// recently freed range of exactly that size, or else above everything handed out so far,
// starting at Base (a range freed at the top lowers the top again). Placement takes constant
// time: nothing reported depends on where the simulated device puts a region, since capacity
// counts bytes, not address space. The same calls always give the same addresses. Reserve and
// Map fail with an error wrapping pool.ErrOutOfMemory when the memory held (reserved regions plus
// mapped pages) would exceed the capacity (0 = unbounded); address space is not counted against
// it. It is safe for concurrent use unless made by NewSingleGoroutineUpstream.
type Upstream struct {
	mu          upstreams.OptionalMutex
	capacity    uint64
	granularity uint64
	top         uint64                      // the lowest address above every range handed out
	reusable    map[uint64][]uint64         // freed ranges by size, most recent last
	nReusable   int                         // ranges in reusable
	regions     *addrindex.Index[simRegion] // ranges handed out, by base address
	byAddr      *spans.Tree                 // the ReserveAddress ranges among them, ordered by address
	mapped      *spans.Tree                 // mapped page ranges, coalesced within one address reservation (seg = its base)
	st          Stats
}

// Stats are an Upstream's counters. Bytes are after rounding to the granularity.
type Stats struct {
	ReservedBytes     uint64 // memory held now: reserved regions plus mapped pages
	PeakReservedBytes uint64 // maximum of ReservedBytes
	AddressBytes      uint64 // address space reserved without memory (ReserveAddress), now
	Regions           uint64 // regions from Reserve held now
	Reserves          uint64 // successful Reserve calls
	Releases          uint64 // successful Release calls
	Maps              uint64 // successful Map calls
	Unmaps            uint64 // successful Unmap calls
	Remaps            uint64 // successful Remap calls
	Failures          uint64 // Reserve or Map calls refused for lack of capacity
}

// simRegion is a range handed out.
type simRegion struct {
	size        uint64
	addressOnly bool // from ReserveAddress
}

// simSpaceBytes is the size of the simulated address space.
const simSpaceBytes = 1 << 63

// NewUpstream returns an empty simulated address space holding at most capacity bytes
// (0 = unbounded) whose ranges are multiples of granularity bytes (0 means 1), safe for
// concurrent use.
func NewUpstream(capacity, granularity uint64) *Upstream {
	return newUpstream(capacity, granularity, false)
}

// NewSingleGoroutineUpstream is NewUpstream for use by one goroutine at a time, each use ordered
// after the previous one, so it takes no lock: analyze's simulation, which replays each policy on
// a goroutine of its own, uses it (with pool.SingleGoroutine for the allocator on top).
func NewSingleGoroutineUpstream(capacity, granularity uint64) *Upstream {
	return newUpstream(capacity, granularity, true)
}

func newUpstream(capacity, granularity uint64, singleGoroutine bool) *Upstream {
	granularity = max(granularity, 1)
	u := &Upstream{
		mu:          upstreams.OptionalMutex{Off: singleGoroutine},
		capacity:    capacity,
		granularity: granularity,
		top:         upstreams.AlignUp(Base, granularity),
		reusable:    make(map[uint64][]uint64),
		regions:     addrindex.New[simRegion](),
		byAddr:      spans.NewTree(spans.ByAddr),
		mapped:      spans.NewTree(spans.ByAddr),
	}
	return u
}

// Reserve returns the base of a new region of size bytes rounded up to the granularity.
func (u *Upstream) Reserve(size uint64) (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, err := u.rounded(size)
	if err != nil {
		return 0, fmt.Errorf("reserve %d bytes: %w", size, err)
	}
	if u.capacity > 0 && u.st.ReservedBytes+r > u.capacity {
		u.st.Failures++
		return 0, fmt.Errorf("reserve %d bytes with %d of %d held: %w", r, u.st.ReservedBytes, u.capacity, upstreams.OutOfMemory)
	}
	addr, err := u.take(r, false)
	if err != nil {
		return 0, fmt.Errorf("reserve %d bytes: %w", size, err)
	}
	u.st.Reserves++
	u.st.Regions++
	u.hold(r)
	return addr, nil
}

// Release gives back a region from Reserve; size must be the size it was reserved with.
func (u *Upstream) Release(addr, size uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, _ := u.rounded(size)
	reg, ok := u.region(addr)
	if !ok || reg.addressOnly || reg.size != r {
		return fmt.Errorf("release %d bytes at %#x: no such region: %w", size, addr, upstreams.UnknownAddress)
	}
	u.give(addr, reg)
	u.st.Releases++
	u.st.Regions--
	u.st.ReservedBytes -= r
	return nil
}

// ReserveAddress returns the base of size bytes (rounded up to the granularity) of address space
// that holds no memory until pages are mapped into it.
func (u *Upstream) ReserveAddress(size uint64) (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, err := u.rounded(size)
	if err != nil {
		return 0, fmt.Errorf("reserve %d bytes of address space: %w", size, err)
	}
	addr, err := u.take(r, true)
	if err != nil {
		return 0, fmt.Errorf("reserve %d bytes of address space: %w", size, err)
	}
	u.st.AddressBytes += r
	return addr, nil
}

// ReleaseAddress gives back address space from ReserveAddress; none of it may be mapped.
func (u *Upstream) ReleaseAddress(addr, size uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, _ := u.rounded(size)
	reg, ok := u.region(addr)
	if !ok || !reg.addressOnly || reg.size != r {
		return fmt.Errorf("release %d bytes of address space at %#x: no such reservation: %w", size, addr, upstreams.UnknownAddress)
	}
	if m, ok := u.mapped.LowerBound(spans.Span{Addr: addr}); ok && m.Addr < addr+r {
		return fmt.Errorf("release address space at %#x: %d bytes at %#x still mapped", addr, m.Size, m.Addr)
	}
	u.give(addr, reg)
	u.st.AddressBytes -= r
	return nil
}

// Map backs [addr, addr+size) of one address reservation with memory; addr and size must be
// multiples of the granularity and the range must not be mapped already.
func (u *Upstream) Map(addr, size uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	owner, err := u.checkPages(addr, size)
	if err != nil {
		return fmt.Errorf("map %d bytes at %#x: %w", size, addr, err)
	}
	if prev, ok := u.lastMappedAtOrBelow(addr); ok && prev.End() > addr {
		return fmt.Errorf("map %d bytes at %#x: overlaps mapped range at %#x", size, addr, prev.Addr)
	}
	if next, ok := u.mapped.LowerBound(spans.Span{Addr: addr}); ok && next.Addr < addr+size {
		return fmt.Errorf("map %d bytes at %#x: overlaps mapped range at %#x", size, addr, next.Addr)
	}
	if u.capacity > 0 && u.st.ReservedBytes+size > u.capacity {
		u.st.Failures++
		return fmt.Errorf("map %d bytes with %d of %d held: %w", size, u.st.ReservedBytes, u.capacity, upstreams.OutOfMemory)
	}
	u.addMapped(spans.Span{Addr: addr, Size: size, Seg: owner})
	u.st.Maps++
	u.hold(size)
	return nil
}

// Unmap releases the memory behind [addr, addr+size), which must be mapped.
func (u *Upstream) Unmap(addr, size uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, err := u.checkPages(addr, size); err != nil {
		return fmt.Errorf("unmap %d bytes at %#x: %w", size, addr, err)
	}
	m, ok := u.lastMappedAtOrBelow(addr)
	if !ok || m.End() < addr+size {
		return fmt.Errorf("unmap %d bytes at %#x: not mapped: %w", size, addr, upstreams.UnknownAddress)
	}
	u.cutMapped(m, addr, size)
	u.st.Unmaps++
	u.st.ReservedBytes -= size
	return nil
}

// Remap moves the memory behind [from, from+size), mapped, to [to, to+size), unmapped: both
// multiples of the granularity inside address reservations. Memory held does not change.
func (u *Upstream) Remap(from, to, size uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	owner, err := u.checkPages(to, size)
	if err == nil {
		_, err = u.checkPages(from, size)
	}
	if err != nil {
		return fmt.Errorf("remap %d bytes from %#x to %#x: %w", size, from, to, err)
	}
	m, ok := u.lastMappedAtOrBelow(from)
	if !ok || m.End() < from+size {
		return fmt.Errorf("remap %d bytes from %#x: not mapped: %w", size, from, upstreams.UnknownAddress)
	}
	if prev, ok := u.lastMappedAtOrBelow(to); ok && prev.End() > to {
		return fmt.Errorf("remap %d bytes to %#x: overlaps mapped range at %#x", size, to, prev.Addr)
	}
	if next, ok := u.mapped.LowerBound(spans.Span{Addr: to}); ok && next.Addr < to+size {
		return fmt.Errorf("remap %d bytes to %#x: overlaps mapped range at %#x", size, to, next.Addr)
	}
	u.cutMapped(m, from, size)
	u.addMapped(spans.Span{Addr: to, Size: size, Seg: owner})
	u.st.Remaps++
	return nil
}

// cutMapped takes [addr, addr+size) out of the mapped range m that holds it.
func (u *Upstream) cutMapped(m spans.Span, addr, size uint64) {
	u.mapped.Delete(m)
	if addr > m.Addr {
		u.mapped.Insert(spans.Span{Addr: m.Addr, Size: addr - m.Addr, Seg: m.Seg})
	}
	if end := addr + size; end < m.End() {
		u.mapped.Insert(spans.Span{Addr: end, Size: m.End() - end, Seg: m.Seg})
	}
}

// Contains reports whether [addr, addr+size) lies entirely inside one region held now: a
// reserved region, or mapped pages of one address reservation. It looks through every region
// (it is meant for checks in tests), so that Reserve and Release need no address order.
func (u *Upstream) Contains(addr, size uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	end := addr + size
	if end < addr {
		return false
	}
	if reg, found := u.byAddr.Below(spans.Span{Addr: addr + 1}); found && end <= reg.End() {
		m, ok := u.lastMappedAtOrBelow(addr)
		return ok && m.End() >= end
	}
	found := false
	u.regions.Each(func(base uint64, reg *simRegion) {
		found = found || (!reg.addressOnly && base <= addr && end <= base+reg.size)
	})
	return found
}

// Stats returns the counters so far.
func (u *Upstream) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}

func (u *Upstream) rounded(size uint64) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("size 0")
	}
	if size > math.MaxUint64-u.granularity {
		return 0, fmt.Errorf("size too large: %w", upstreams.OutOfMemory)
	}
	return upstreams.AlignUp(size, u.granularity), nil
}

// maxReusable bounds the freed ranges kept for reuse, so that memory follows the live regions:
// a range freed beyond it is not handed out again (the address space is 2^63 bytes).
const maxReusable = 1 << 16

// take finds room for r bytes: the last freed range of that size, else the top.
func (u *Upstream) take(r uint64, addressOnly bool) (uint64, error) {
	var addr uint64
	if free := u.reusable[r]; len(free) > 0 {
		addr = free[len(free)-1]
		if len(free) == 1 {
			delete(u.reusable, r)
		} else {
			u.reusable[r] = free[:len(free)-1]
		}
		u.nReusable--
	} else {
		limit := upstreams.AlignUp(Base, u.granularity) + simSpaceBytes
		if r > limit-u.top {
			return 0, fmt.Errorf("simulated address space of %d bytes exhausted: %w", uint64(simSpaceBytes), upstreams.OutOfMemory)
		}
		addr = u.top
		u.top += r
	}
	u.regions.Put(addr, simRegion{size: r, addressOnly: addressOnly})
	if addressOnly {
		u.byAddr.Insert(spans.Span{Addr: addr, Size: r})
	}
	return addr, nil
}

// region returns the range handed out at addr.
func (u *Upstream) region(addr uint64) (simRegion, bool) {
	if r := u.regions.Get(addr); r != nil {
		return *r, true
	}
	return simRegion{}, false
}

// give returns a range handed out to the free address space.
func (u *Upstream) give(addr uint64, reg simRegion) {
	u.regions.Take(addr)
	switch {
	case addr+reg.size == u.top:
		u.top = addr
	case u.nReusable < maxReusable:
		u.reusable[reg.size] = append(u.reusable[reg.size], addr)
		u.nReusable++
	}
	if reg.addressOnly {
		u.byAddr.Delete(spans.Span{Addr: addr})
	}
}

func (u *Upstream) hold(r uint64) {
	u.st.ReservedBytes += r
	u.st.PeakReservedBytes = max(u.st.PeakReservedBytes, u.st.ReservedBytes)
}

// checkPages checks that [addr, addr+size) is granularity-aligned and inside one address
// reservation, and returns that reservation's base.
func (u *Upstream) checkPages(addr, size uint64) (uint64, error) {
	if size == 0 || addr%u.granularity != 0 || size%u.granularity != 0 {
		return 0, fmt.Errorf("range not a non-empty multiple of the %d-byte granularity", u.granularity)
	}
	reg, found := u.byAddr.Below(spans.Span{Addr: addr + 1})
	if !found || addr+size > reg.End() || addr+size < addr {
		return 0, fmt.Errorf("range outside any address reservation: %w", upstreams.UnknownAddress)
	}
	return reg.Addr, nil
}

// addMapped inserts a mapped range, merging it with adjacent ranges of the same reservation.
func (u *Upstream) addMapped(m spans.Span) {
	if prev, ok := u.lastMappedAtOrBelow(m.Addr); ok && prev.End() == m.Addr && prev.Seg == m.Seg {
		u.mapped.Delete(prev)
		m.Addr, m.Size = prev.Addr, prev.Size+m.Size
	}
	if next, ok := u.mapped.LowerBound(spans.Span{Addr: m.End()}); ok && next.Addr == m.End() && next.Seg == m.Seg {
		u.mapped.Delete(next)
		m.Size += next.Size
	}
	u.mapped.Insert(m)
}

// lastMappedAtOrBelow returns the mapped range with the highest base not above addr.
func (u *Upstream) lastMappedAtOrBelow(addr uint64) (spans.Span, bool) {
	return u.mapped.Below(spans.Span{Addr: addr + 1})
}
